"""The `mlp` bottom: the party's embeddings and numeric values concatenated into one MLP, for tables that are not CTR.

x0  = concat(E[id_1], ..., E[id_F], numeric, numeric_missing)
cut = MLP(x0)  ->  cut_dim values (ReLU between the layers, none after the last)
"""

from __future__ import annotations

import torch
from torch import nn

from vfl.config.model_options import MLPOptions
from vfl.config.model_sections import BottomConfig
from vfl.models.inputs import FieldEmbeddings, InputSchema, flat_inputs
from vfl.models.mlp import mlp


class MLPBottom(nn.Module):
    """One party's MLP bottom; forward(dense, dense_missing, cat) -> (rows, cut_dim)."""

    def __init__(self, schema: InputSchema, cfg: BottomConfig, options: MLPOptions | None = None):
        super().__init__()
        self.embedding = FieldEmbeddings(schema.vocab_sizes, cfg.embedding_dim)
        width = schema.n_categorical * cfg.embedding_dim + 2 * schema.n_numeric
        self.net = mlp([width, *cfg.hidden, cfg.cut_dim], cfg.dropout)

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        return self.net(flat_inputs(self.embedding(cat), dense, dense_missing))
