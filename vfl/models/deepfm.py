"""The `deepfm` bottom: DeepFM (Guo et al., IJCAI 2017) over one party's own fields.

One embedding per field is shared by the FM and the deep tower (Sec. 2.1, Fig. 1):
  y_FM   = <w, x> + sum_{i<j} <V_i, V_j> x_i x_j                       (Eq. 2)
         = first order + 1/2 sum_k [(sum_i V_ik x_i)^2 - sum_i (V_ik x_i)^2]   (Rendle 2010, Lemma 3.1)
  y_DNN  = MLP(concat(V_1 x_1, ..., V_F x_F, numeric, numeric_missing))  (Eq. 3-4)
  cut    = [y_FM, y_DNN]  ->  1 + (cut_dim - 1) values
A categorical field has x_i = 1 at its id; a numeric column j has x_j its value and a vector v_j of its own
(`options.fm_numeric`). The paper's output sigmoid(y_FM + y_DNN) (Eq. 1) is the leader's top: a linear top over
the cuts sums each party's y_FM and y_DNN with learnt weights; the FM's pairs stay within the party (the
`interaction` top adds cross-party terms). The first-order ids use a 1-wide sparse table, as Wide&Deep's wide part.
"""

from __future__ import annotations

import torch
from torch import nn

from vfl.config.model_options import DeepFMOptions
from vfl.config.model_sections import BottomConfig
from vfl.models.inputs import FieldEmbeddings, InputSchema
from vfl.models.mlp import mlp


def fm_second_order(vectors: torch.Tensor) -> torch.Tensor:
    """sum_{i<j} <v_i, v_j> for (rows, fields, dim) vectors, in O(fields x dim): (rows, 1)."""
    square_of_sum = vectors.sum(dim=1).pow(2)
    sum_of_squares = vectors.pow(2).sum(dim=1)
    return 0.5 * (square_of_sum - sum_of_squares).sum(dim=1, keepdim=True)


class DeepFMBottom(nn.Module):
    """One party's DeepFM bottom; forward(dense, dense_missing, cat) -> (rows, cut_dim)."""

    def __init__(self, schema: InputSchema, cfg: BottomConfig, options: DeepFMOptions | None = None):
        super().__init__()
        if cfg.cut_dim < 2:
            raise ValueError(f"cut_dim must be >= 2 (one FM value and at least one deep value), got {cfg.cut_dim}")
        options = options or DeepFMOptions()
        n_num, dim = schema.n_numeric, cfg.embedding_dim
        self.first_order = FieldEmbeddings(schema.vocab_sizes, 1, std=0.0)
        self.first_order_numeric = nn.Linear(2 * n_num, 1)
        self.embedding = FieldEmbeddings(schema.vocab_sizes, dim)
        self.numeric_vectors = nn.Parameter(torch.randn(n_num, dim) * 0.01) if options.fm_numeric else None
        self.deep = mlp([schema.n_categorical * dim + 2 * n_num, *cfg.hidden, cfg.cut_dim - 1], cfg.dropout)

    def linear_parameters(self) -> list[nn.Parameter]:
        """The FM's first order (Eq. 2's <w, x>: one weight per id, and the numeric values' linear layer), which
        `train.linear_optimizer` trains apart from the embeddings and the deep tower."""
        return [self.first_order.table.weight, *self.first_order_numeric.parameters()]

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        x_dense = torch.cat([dense, dense_missing], dim=1)
        embedded = self.embedding(cat)  # (rows, F, dim)
        first = self.first_order_numeric(x_dense) + self.first_order(cat).sum(dim=1)
        vectors = embedded
        if self.numeric_vectors is not None:
            vectors = torch.cat([embedded, dense.unsqueeze(2) * self.numeric_vectors], dim=1)
        fm = first + fm_second_order(vectors)
        deep = self.deep(torch.cat([embedded.flatten(1), x_dense], dim=1))
        return torch.cat([fm, deep], dim=1)
