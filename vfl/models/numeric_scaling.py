"""Standardized numeric inputs for a bottom (`model.bottom.numeric_scaling: standard`): fitted statistics, a scaler.

A numeric column arrives as its prepared transform wrote it (Criteo's counts as sign(x) log(1 + |x|), some columns
around 8 +- 2, others around 0.5). With `standard`, every bottom sees x -> (x - mean_j) / std_j instead, where
mean_j and std_j are those of column j's *present* values in the party's own training split (its first
STATS_ROWS rows, so that a 45M-row Criteo shard costs one bounded read); a missing value stays 0 (its missing flag
is a separate input), and a column with std 0 (or no present value) gets std 1.

The statistics are the party's own: computed from its own feature columns only, never from labels, never sent to
any peer. They are a pure function of the training split's rows (in the shard's id order, after the shard is
restricted to the private set intersection), so every rank of a party and the centralized reference compute the
same numbers. They live in the model as persistent buffers (`NumericScaler.mean` / `.std`): checkpoints, batch
prediction, serving and ONNX export carry them with the weights; a model built without statistics (0 / 1) takes the
checkpoint's when it is loaded.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from vfl.config.model_options import NUMERIC_SCALINGS

STATS_ROWS = 1_000_000  # rows of the training split the statistics are computed from (the first ones)
CHUNK_ROWS = 65_536  # rows read at a time from a memory-mapped split


def numeric_stats(
    dense, dense_missing, rows: int = STATS_ROWS, chunk: int = CHUNK_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) float32 per column over the present values of the first `rows` rows of (dense, dense_missing):
    (rows, n) arrays, memory maps, or anything sliced by rows. Population std (ddof 0); a column with no present
    value gets mean 0, a column with std 0 (or no present value) std 1. Read in chunks of `chunk` rows, merged
    with Chan, Golub and LeVeque's pairwise update (1979, Eq. 2.1b), so large offsets lose no precision."""
    n_rows = min(int(rows), int(dense.shape[0]))
    n_cols = int(dense.shape[1])
    count = np.zeros(n_cols)
    mean = np.zeros(n_cols)
    m2 = np.zeros(n_cols)  # sum of squared deviations from the mean
    for start in range(0, n_rows, chunk):
        stop = min(start + chunk, n_rows)
        x = np.asarray(dense[start:stop], dtype=np.float64)
        present = np.asarray(dense_missing[start:stop], dtype=np.float64) == 0.0
        c = present.sum(axis=0)
        m = np.divide((x * present).sum(axis=0), c, out=np.zeros(n_cols), where=c > 0)
        d2 = (((x - m) * present) ** 2).sum(axis=0)
        total = count + c
        delta = m - mean
        share = np.divide(c, total, out=np.zeros(n_cols), where=total > 0)
        mean = mean + delta * share
        m2 = m2 + d2 + delta**2 * count * share
        count = total
    std = np.sqrt(np.divide(m2, count, out=np.zeros(n_cols), where=count > 0))
    std32 = std.astype(np.float32)
    return mean.astype(np.float32), np.where(std32 > 0, std32, np.float32(1.0))


def split_numeric_stats(split, rows: int = STATS_ROWS) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """numeric_stats of a shard split (vfl/data/shards.py ShardSplit), as tuples for InputSchema."""
    mean, std = numeric_stats(split.dense, split.dense_missing, rows)
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


class NumericScaler(nn.Module):
    """(dense, dense_missing) -> (dense - mean) / std where present, 0 where missing; mean and std are persistent
    buffers (saved with the model, not parameters: the optimizer never moves them)."""

    def __init__(self, n_numeric: int, mean=None, std=None):
        super().__init__()
        self.register_buffer("mean", _vector(mean, n_numeric, 0.0, "mean"))
        self.register_buffer("std", _vector(std, n_numeric, 1.0, "std"))
        if bool((self.std <= 0).any()):
            raise ValueError(f"numeric std must be > 0 in every column, got {self.std.tolist()}")

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor) -> torch.Tensor:
        return (dense - self.mean) / self.std * (1.0 - dense_missing)


def _vector(values, n: int, fill: float, what: str) -> torch.Tensor:
    if values is None:
        return torch.full((n,), fill, dtype=torch.float32)
    out = torch.tensor(tuple(values), dtype=torch.float32)
    if tuple(out.shape) != (n,):
        raise ValueError(f"numeric {what} must hold one value per numeric column ({n}), got {tuple(out.shape)}")
    return out


class ScaledInputs(nn.Module):
    """A bottom behind a NumericScaler: forward(dense, dense_missing, cat) = inner(scaled dense, dense_missing, cat)."""

    def __init__(self, inner: nn.Module, scaler: NumericScaler):
        super().__init__()
        self.inner = inner
        self.scaler = scaler
        # what the rank wrapper reads (vfl/distributed/context.py: a bottom without fields leaves parameters unused)
        self.n_fields = getattr(inner, "n_fields", 1)

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        return self.inner(self.scaler(dense, dense_missing), dense_missing, cat)


def with_numeric_scaling(module: nn.Module, scaling: str, schema) -> nn.Module:
    """The bottom as `model.bottom.numeric_scaling` asks: itself for `none`, wrapped in ScaledInputs (with the
    schema's numeric_mean / numeric_std, or 0 / 1 until a checkpoint is loaded) for `standard`."""
    if scaling == "none":
        return module
    if scaling != "standard":
        raise ValueError(f"model.bottom.numeric_scaling must be one of {NUMERIC_SCALINGS}, got {scaling!r}")
    return ScaledInputs(module, NumericScaler(schema.n_numeric, schema.numeric_mean, schema.numeric_std))
