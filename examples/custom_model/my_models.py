"""A user's own bottom and top for the split model, loaded by import path (docs/models.md states the contracts).

model.bottom: {import: "my_models:HashedFieldsBottom", cut_dim: 4, options: {dim: 8}} builds
HashedFieldsBottom(schema, cut_dim, options); model.top: {import: "my_models:GatedTop"} builds
GatedTop(cut_dims, outputs, options). Each party imports its own module; nothing of it crosses the wire.
"""

from __future__ import annotations

import torch
from torch import nn


class HashedFieldsBottom(nn.Module):
    """Mean of the party's field embeddings beside its numeric values, through one hidden layer."""

    def __init__(self, schema, cut_dim: int, options: dict):
        super().__init__()
        dim = int(options.get("dim", 8))
        # one table over every field: field j's ids start at the sum of the earlier fields' vocabulary sizes
        offsets = torch.tensor([0, *schema.vocab_sizes[:-1]], dtype=torch.int64).cumsum(0)
        self.register_buffer("offsets", offsets[: schema.n_categorical], persistent=False)
        self.embedding = nn.EmbeddingBag(max(sum(schema.vocab_sizes), 1), dim, mode="mean")
        self.net = nn.Sequential(nn.Linear(dim + 2 * schema.n_numeric, 32), nn.ReLU(), nn.Linear(32, cut_dim))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        fields = self.embedding(batch["categorical"] + self.offsets)  # (rows, dim)
        return self.net(torch.cat([fields, batch["numeric"], batch["numeric_missing"]], dim=1))  # (rows, cut_dim)


class GatedTop(nn.Module):
    """A linear score over the concatenated cuts, scaled by a learnt gate of the same cuts."""

    def __init__(self, cut_dims: tuple[int, ...], outputs: int, options: dict):
        super().__init__()
        width = sum(cut_dims)
        self.score = nn.Linear(width, outputs)
        self.gate = nn.Linear(width, outputs)

    def forward(self, cuts: torch.Tensor) -> torch.Tensor:
        return (self.score(cuts) * (1 + torch.tanh(self.gate(cuts)))).squeeze(1)  # (rows,) for one output
