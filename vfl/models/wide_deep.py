"""Wide&Deep split as in MindSpore Federated's splitnn_criteo: per-party bottoms, a top on the leader.

Bottom (one per party, over that party's columns only):
  wide  = sum_f w[id_f] + a . [dense, dense_missing] + b                     -> 1 value
  deep  = MLP(concat(E[id_f] for f, dense, dense_missing))                 -> cut_dim - 1 values
  output = [wide, deep]                                                     -> cut_dim values
The leader's tops (Linear, or an MLP when the cut is wider) are in vfl/models/mlp.py.
Each field has its own id range in one shared table (offsets), so one lookup serves all fields.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vfl.models.mlp import mlp


class WideDeepBottom(nn.Module):
    """One party's bottom model; forward(dense, dense_missing, cat) -> (batch, cut_dim)."""

    def __init__(
        self,
        field_sizes: list[int],
        n_dense: int,
        embedding_dim: int = 80,
        hidden: tuple[int, ...] = (1024, 512, 256, 128),
        cut_dim: int = 2,
        dropout: float = 0.0,
    ):
        super().__init__()
        if cut_dim < 2:
            raise ValueError(f"cut_dim must be >= 2 (one wide value and at least one deep value), got {cut_dim}")
        self.n_fields = len(field_sizes)
        self.n_dense = n_dense
        self.cut_dim = cut_dim
        offsets = (
            torch.tensor([0] + list(field_sizes[:-1]), dtype=torch.int64).cumsum(0)
            if field_sizes
            else torch.zeros(0, dtype=torch.int64)
        )
        self.register_buffer("offsets", offsets, persistent=False)
        total = int(sum(field_sizes))
        # sparse=True: each step touches only the rows of the batch (lazy Adam), as CTR systems do
        self.wide_embedding = nn.Embedding(max(total, 1), 1, sparse=True)
        self.deep_embedding = nn.Embedding(max(total, 1), embedding_dim, sparse=True)
        nn.init.zeros_(self.wide_embedding.weight)
        nn.init.normal_(self.deep_embedding.weight, std=0.01)
        if not field_sizes:  # no categorical column: 1-row placeholders no forward reads, frozen so that DDP (ranks)
            for table in (self.wide_embedding, self.deep_embedding):  # does not wait for their gradients
                table.weight.requires_grad_(False)
        self.wide_dense = nn.Linear(2 * n_dense, 1)
        self.deep = mlp([self.n_fields * embedding_dim + 2 * n_dense, *hidden, cut_dim - 1], dropout)

    def linear_parameters(self) -> list[nn.Parameter]:
        """The wide part (Cheng et al. 2016, Eq. 1: one weight per id, and the numeric values' linear layer), which
        `train.linear_optimizer` trains apart from the deep part (the paper: FTRL for the wide part, AdaGrad for the
        deep)."""
        return [self.wide_embedding.weight, *self.wide_dense.parameters()]

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        x_dense = torch.cat([dense, dense_missing], dim=1)
        wide = self.wide_dense(x_dense)
        if not self.n_fields:
            return torch.cat([wide, self.deep(x_dense)], dim=1)
        ids = cat + self.offsets
        wide = wide + self.wide_embedding(ids).sum(dim=1)
        return torch.cat([wide, self.deep[1:](self._first_layer(self.deep_embedding(ids).flatten(1), x_dense))], dim=1)

    def _first_layer(self, embedded: torch.Tensor, x_dense: torch.Tensor) -> torch.Tensor:
        """deep[0] over concat(embedded, x_dense), without the concatenation: W_e e + W_d x + b.

        Same parameter and the same function as nn.Linear on the concatenation, but the backward computes the input
        gradient for the embedded columns only (the dense inputs need none). That product's width is then
        n_fields x embedding_dim (1040 at MindSpore's sizes, a multiple of 16) instead of 1054, which BLAS runs at
        ~85 instead of ~62 GFLOP/s on one AVX2 core (benchmarks/compute.py; ~150 ms of a 2.7 s step)."""
        first = self.deep[0]
        k = embedded.shape[1]
        return torch.addmm(F.linear(embedded, first.weight[:, :k], first.bias), x_dense, first.weight[:, k:].t())
