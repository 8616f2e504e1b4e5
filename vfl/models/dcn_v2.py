"""The `dcn_v2` bottom: DCN-V2 (Wang et al., WWW 2021) over one party's own fields.

  x0      = concat(E[id_1], ..., E[id_F], numeric, numeric_missing)             (Sec. 3.1, embedding layer)
  cross   x_{l+1} = x0 * (W_l x_l + b_l) + x_l,  l = 0 .. L-1                  (Eq. 1, full rank: W_l is d x d)
          x_{l+1} = x0 * (U_l (V_l^T x_l) + b_l) + x_l                          (Eq. 2, low rank r: U_l, V_l d x r)
  stacked:  h = Deep(Cross(x0));  parallel: h = concat(Cross(x0), Deep(x0))     (Fig. 2)
  cut     = W_out h + b_out  ->  cut_dim values (the paper's logit layer, one value per cut column)
Deep is an MLP with ReLU after every layer (model.bottom.hidden; none: the cross net alone). The paper's
mixture of low-rank experts (Eq. 3) is not built.
"""

from __future__ import annotations

import torch
from torch import nn

from vfl.config.model_options import DCNv2Options
from vfl.config.model_sections import BottomConfig
from vfl.models.inputs import FieldEmbeddings, InputSchema, flat_inputs


class CrossLayer(nn.Module):
    """x_{l+1} = x0 * (W x_l + b) + x_l, with W full (d x d) or low-rank U V^T (rank r)."""

    def __init__(self, dim: int, low_rank: int | None):
        super().__init__()
        self.w = (
            nn.Linear(dim, dim)
            if low_rank is None
            else nn.Sequential(nn.Linear(dim, low_rank, bias=False), nn.Linear(low_rank, dim))
        )

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x0 * self.w(x) + x


class DCNv2Bottom(nn.Module):
    """One party's DCN-V2 bottom; forward(dense, dense_missing, cat) -> (rows, cut_dim)."""

    def __init__(self, schema: InputSchema, cfg: BottomConfig, options: DCNv2Options | None = None):
        super().__init__()
        options = options or DCNv2Options()
        hidden, dropout = cfg.hidden, cfg.dropout
        self.stacked = options.structure == "stacked"
        d = schema.n_categorical * cfg.embedding_dim + 2 * schema.n_numeric
        self.embedding = FieldEmbeddings(schema.vocab_sizes, cfg.embedding_dim)
        self.cross = nn.ModuleList(CrossLayer(d, options.low_rank) for _ in range(options.cross_layers))
        layers: list[nn.Module] = []
        for a, b in zip([d, *hidden[:-1]], hidden):
            layers += [nn.Linear(a, b), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
        self.deep = nn.Sequential(*layers)
        deep_out = hidden[-1] if hidden else d
        self.out = nn.Linear(deep_out if self.stacked else d + (hidden[-1] if hidden else 0), cfg.cut_dim)

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        x0 = flat_inputs(self.embedding(cat), dense, dense_missing)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        if self.stacked:
            return self.out(self.deep(x))
        return self.out(torch.cat([x, self.deep(x0)], dim=1) if len(self.deep) else x)
