"""An efficient ensemble top: k MLP members over the one concatenated cut, sharing their weights (TabM-mini).

Gorishniy, Kotelnikov, Babenko, "TabM: Advancing Tabular Deep Learning with Parameter-Efficient Ensembling", ICLR
2025, sec. 3.3 (TabM-mini): k members share every weight of an MLP; member i multiplies the MLP's input elementwise
by its own adapter r_i (BatchEnsemble's input scaling, Wen, Tran, Ba, ICLR 2020, eq. 1; initialised at random signs,
TabM's initialisation) and reads its output through its own head. The members see the same batch; the training loss
is the mean of the members' losses (TabM sec. 3.2: the members learn apart, each from its own loss), and the
prediction is the mean of the members' logits (one value per row: prediction, export and serving read the top as
any other).

Only the leader's top is ensembled: the followers' bottoms and the cut they send are the same as with any top, so
a follower's cost and what it sees (the gradient of the members' mean loss w.r.t. its cut) keep their form.
"""

from __future__ import annotations

import torch
from torch import nn

from vfl.models.mlp import mlp


class EnsembleTop(nn.Module):
    """forward(cuts): in training mode the k members' logits (n, k) (or (n, k, K) for K classes); in evaluation mode
    their mean (n,) (or (n, K)). `members` says k to the trainer, which averages the members' losses."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...], outputs: int = 1, members: int = 8):
        super().__init__()
        self.members = int(members)
        self.outputs = outputs
        signs = torch.randint(0, 2, (self.members, in_dim)).float() * 2 - 1  # TabM: r_i at random +-1
        self.adapters = nn.Parameter(signs)
        self.body = nn.Sequential(mlp([in_dim, *hidden]), nn.ReLU()) if hidden else nn.Identity()
        width = hidden[-1] if hidden else in_dim
        bound = 1.0 / width**0.5  # nn.Linear's default initialisation, per member
        self.head_weight = nn.Parameter(torch.empty(self.members, width, outputs).uniform_(-bound, bound))
        self.head_bias = nn.Parameter(torch.empty(self.members, outputs).uniform_(-bound, bound))

    def member_logits(self, cuts: torch.Tensor) -> torch.Tensor:
        """(n, k, outputs): every member's logits of the rows."""
        x = cuts.unsqueeze(1) * self.adapters  # (n, k, in_dim)
        h = self.body(x)  # the shared MLP, applied per member
        return torch.einsum("nkw,kwo->nko", h, self.head_weight) + self.head_bias

    def forward(self, cuts: torch.Tensor) -> torch.Tensor:
        out = self.member_logits(cuts)
        if not self.training:
            out = out.mean(dim=1)
            return out.squeeze(1) if self.outputs == 1 else out
        return out.squeeze(2) if self.outputs == 1 else out


def ensemble_loss(loss_fn, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean of the members' losses: loss_fn of each member's logits (column i of (n, k[, K])) and the labels."""
    return torch.stack([loss_fn(logits[:, i], labels) for i in range(logits.shape[1])]).mean()
