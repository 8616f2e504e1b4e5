"""What a bottom model is built from and fed: the party's fitted columns, and one embedding table for its fields.

`InputSchema` is read from the party's shard (the columns its table schema declared, as fitted: numeric columns,
categorical columns with their vocabulary sizes), never from Criteo positions. A batch holds, keyed by kind:
`numeric` (rows, n_numeric) float32, `numeric_missing` (rows, n_numeric) float32 1.0 where the value was missing
(the value is then 0), and `categorical` (rows, n_categorical) int64 ids in [0, vocab_sizes[j]) (0: missing,
1: out of vocabulary; vfl/data/table.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vfl.models.numeric_embeddings import shard_embeddings
from vfl.models.numeric_scaling import split_numeric_stats


@dataclass(frozen=True)
class InputSchema:
    """One party's model inputs: numeric column names, categorical column names and their vocabulary sizes; with
    `model.bottom.numeric_scaling: standard`, each numeric column's training mean and std
    (vfl/models/numeric_scaling.py; None otherwise, and where a model is built to load a checkpoint's)."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    vocab_sizes: tuple[int, ...]
    numeric_mean: tuple[float, ...] | None = None
    numeric_std: tuple[float, ...] | None = None
    # per numeric column, its embedding as the shard's schema.json saved it (vfl/models/numeric_embeddings.py);
    # None when no column is embedded
    numeric_embeddings: tuple | None = None

    @classmethod
    def of_shard(cls, shard, numeric_scaling: str = "none") -> InputSchema:
        """The columns of a prepared party shard (vfl/data/shards.py PartyShard), in the shard's order; with
        numeric_scaling "standard", the numeric statistics of its training split too; the numeric embeddings its
        schema.json declares (vfl/models/numeric_embeddings.py)."""
        stats = (None, None)
        if numeric_scaling == "standard":
            stats = split_numeric_stats(shard.split("train"))
        path = getattr(shard, "path", None)
        return cls(
            tuple(shard.dense_columns),
            tuple(shard.categorical_columns),
            tuple(int(v) for v in shard.field_sizes),
            *stats,
            shard_embeddings(path, list(shard.dense_columns)) if path else None,
        )

    @property
    def n_numeric(self) -> int:
        return len(self.numeric)

    @property
    def n_categorical(self) -> int:
        return len(self.categorical)

    def dummy_batch(self, rows: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
        """A batch of the right kinds, shapes and dtypes (random values, every categorical id in range)."""
        g = torch.Generator().manual_seed(seed)
        high = torch.tensor(self.vocab_sizes or (1,), dtype=torch.float64)
        return {
            "numeric": torch.randn(rows, self.n_numeric, generator=g),
            "numeric_missing": torch.zeros(rows, self.n_numeric),
            "categorical": (
                torch.rand(rows, self.n_categorical, generator=g, dtype=torch.float64) * high[: self.n_categorical]
            ).long(),
        }


class FieldEmbeddings(nn.Module):
    """Every categorical field's vectors in one sparse table (each field its own id range, by offsets): one lookup
    per batch, and the sparse gradient that LazyAdam updates row by row (vfl/training/lazy_adam.py)."""

    def __init__(self, vocab_sizes: tuple[int, ...], dim: int, std: float = 0.01):
        super().__init__()
        sizes = list(vocab_sizes)
        offsets = (
            torch.tensor([0, *sizes[:-1]], dtype=torch.int64).cumsum(0) if sizes else torch.zeros(0, dtype=torch.int64)
        )
        self.register_buffer("offsets", offsets, persistent=False)
        self.table = nn.Embedding(max(sum(sizes), 1), dim, sparse=True)
        if std > 0:
            nn.init.normal_(self.table.weight, std=std)
        else:
            nn.init.zeros_(self.table.weight)
        if not sizes:  # no categorical column: a 1-row placeholder no forward reads, frozen so that DDP (ranks) does
            self.table.weight.requires_grad_(False)  # not wait for its gradient

    def forward(self, cat: torch.Tensor) -> torch.Tensor:
        """(rows, fields) ids -> (rows, fields, dim) vectors."""
        return self.table(cat + self.offsets)


def flat_inputs(embedded: torch.Tensor, dense: torch.Tensor, dense_missing: torch.Tensor) -> torch.Tensor:
    """x0 = concat(e_1, ..., e_F, numeric values, missing flags): (rows, F * dim + 2 * n_numeric)."""
    return torch.cat([embedded.flatten(1), dense, dense_missing], dim=1)
