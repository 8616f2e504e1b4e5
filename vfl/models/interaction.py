"""The `interaction` top: the cuts' linear term plus cross terms between the parties' cuts, which a linear top lacks.

With party p's cut z_p (c_p values) projected to s_p = P_p z_p (rank values per output), the logit of output k is
  y_k = w_k . z + b_k + sum_{p<q} <s_pk, s_qk>  (+ MLP(z)_k when model.top.hidden is set)
       = w_k . z + b_k + 1/2 [ ||sum_p s_pk||^2 - sum_p ||s_pk||^2 ]
a factorization machine (Rendle 2010, Eq. 1 and Lemma 3.1) whose "fields" are the parties' cuts: only pairs of
different parties interact (within a party, its bottom already mixes its columns). A top built without the cut
sizes (a bare width) treats every cut value as its own field. Wider cuts (cut_dim > 2) give the pairs more to cross.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vfl.models.mlp import mlp


class InteractionTop(nn.Module):
    """The leader's top over the concatenated cuts (rows, sum cut_dims) -> (rows,) or (rows, outputs)."""

    def __init__(self, cut_dims: Sequence[int], outputs: int = 1, rank: int = 8, hidden: tuple[int, ...] = ()):
        super().__init__()
        self.cut_dims = [int(c) for c in cut_dims]
        self.outputs, self.rank = outputs, rank
        in_dim = sum(self.cut_dims)
        self.linear = nn.Linear(in_dim, outputs)
        self.project = nn.ModuleList(nn.Linear(c, outputs * rank, bias=False) for c in self.cut_dims)
        for p in self.project:  # each pair's product starts near the linear term's scale, not above it
            nn.init.normal_(
                p.weight, std=1.0 / (rank * max(len(self.cut_dims), 2)) ** 0.5 / max(p.in_features, 1) ** 0.5
            )
        self.mlp = mlp([in_dim, *hidden, outputs]) if hidden else None

    def forward(self, cuts: torch.Tensor) -> torch.Tensor:
        parts = torch.split(cuts, self.cut_dims, dim=1)
        s = torch.stack([p(z) for p, z in zip(self.project, parts)], dim=1)  # (rows, parties, outputs * rank)
        s = s.view(s.shape[0], s.shape[1], self.outputs, self.rank)
        cross = 0.5 * (s.sum(dim=1).pow(2) - s.pow(2).sum(dim=1)).sum(dim=2)  # (rows, outputs)
        out = self.linear(cuts) + cross
        if self.mlp is not None:
            out = out + self.mlp(cuts)
        return out.squeeze(1) if self.outputs == 1 else out
