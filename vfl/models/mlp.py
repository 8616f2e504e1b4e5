"""MLP building blocks and the leader's tops: a Linear or an MLP over the concatenated cuts of all parties.

The top outputs one logit (binary: BCE-with-logits) or K class logits (train.task multiclass: cross-entropy).
"""

from __future__ import annotations

import torch
from torch import nn


def mlp(sizes: list[int], dropout: float = 0.0) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class LinearTop(nn.Module):
    """The leader's top: one Linear layer from the concatenated cuts to the click logit (or K class logits)."""

    def __init__(self, in_dim: int, outputs: int = 1):
        super().__init__()
        self.linear = nn.Linear(in_dim, outputs)
        self.outputs = outputs

    def forward(self, cuts: torch.Tensor) -> torch.Tensor:
        out = self.linear(cuts)
        return out.squeeze(1) if self.outputs == 1 else out


class MLPTop(nn.Module):
    """An MLP top for wide cuts (cut_dim > 2): it can model interactions across parties."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...], outputs: int = 1):
        super().__init__()
        self.net = mlp([in_dim, *hidden, outputs])
        self.outputs = outputs

    def forward(self, cuts: torch.Tensor) -> torch.Tensor:
        out = self.net(cuts)
        return out.squeeze(1) if self.outputs == 1 else out
