"""Numeric embeddings in front of a bottom: a column declared `{embedding: piecewise_linear | periodic}` becomes a vector.

Gorishniy, Rubachev and Babenko, "On Embeddings for Numerical Features in Tabular Deep Learning", NeurIPS 2022:
- piecewise_linear (sec. 3.2, eq. 1): x is encoded over its T quantile bins [b_{t-1}, b_t) as
  (1, ..., 1, (x - b_{t-1}) / (b_t - b_{t-1}), 0, ..., 0), then a linear layer per column maps it to `dim` values;
  the authors' `rtdl_num_embeddings.PiecewiseLinearEmbeddings`, version "B" (Gorishniy et al., TabM, ICLR 2025: a
  linear embedding plus the piecewise-linear part, the latter initialised at zero), no activation.
- periodic (sec. 3.3, "PLR"): v = concat(cos(2 pi c x), sin(2 pi c x)) with k learned frequencies c initialised from
  N(0, sigma^2), then Linear and ReLU per column: `rtdl_num_embeddings.PeriodicEmbeddings(lite=False)`.

The column's value reaches the bottom standardized by its prepared transform (vfl/data/table.py), and the bins are
those `prepare` fitted on the party's own training rows and saved with its shard (`schema.json`): the model reads
them from the shard (`InputSchema.numeric_embeddings`) and keeps them as buffers, so checkpoints, prediction,
serving and ONNX export carry the same numbers. The inner bottom sees, as its numeric inputs, the plain columns then
each embedded column's `dim` values, and as their missing flags each column's own flag (repeated per value).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, replace

import torch
from torch import nn

from vfl.config.table_schema import EMBEDDINGS


@dataclass(frozen=True)
class NumericEmbedding:
    """One numeric column's embedding: its kind, width, and fitted bin edges (piecewise_linear) or frequencies and
    their initial scale (periodic)."""

    kind: str  # one of EMBEDDINGS
    dim: int
    edges: tuple[float, ...] = ()
    frequencies: int = 0
    sigma: float = 0.0

    def group(self) -> tuple:
        """Columns that share one library module: same kind and options (piecewise-linear bins may differ)."""
        return (self.kind, self.dim, self.frequencies, self.sigma)


def shard_embeddings(shard_dir: str, dense_columns: list[str]) -> tuple[NumericEmbedding | None, ...] | None:
    """Each dense column's embedding as the shard's `schema.json` saved it (None: a plain value), or None when no
    column is embedded (or the shard has no schema.json)."""
    path = os.path.join(shard_dir, "schema.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        doc = json.load(f)
    try:
        by_name = {c["name"]: c for c in doc.get("columns", [])}
    except (AttributeError, KeyError, TypeError):
        raise ValueError(f"{path}: 'columns' must be a list of columns with a name: prepare the shard again") from None
    out = []
    for name in dense_columns:
        try:
            out.append(_saved_embedding(by_name.get(name) or {}))
        except (KeyError, TypeError, ValueError, StopIteration) as e:
            raise ValueError(
                f"{path}: column {name!r}: its embedding is not as prepare writes it ({type(e).__name__}: {e}): "
                "prepare the shard again"
            ) from None
    return tuple(out) if any(e is not None for e in out) else None


MAX_EMBEDDING_DIM = 1024  # far above any useful width: a larger one in schema.json is not prepare's


def _saved_embedding(col: dict) -> NumericEmbedding | None:
    """One column's embedding from schema.json (None: a plain value), its width and bin edges checked."""
    (kind, params), state = next(iter((col.get("transform") or {"none": {}}).items())), col.get("state") or {}
    if kind not in EMBEDDINGS:
        return None
    dim = int(params["dim"])
    if not 1 <= dim <= MAX_EMBEDDING_DIM:
        raise ValueError(f"dim must be in [1, {MAX_EMBEDDING_DIM}], got {dim}")
    if kind == "piecewise_linear":
        edges = tuple(float(e) for e in state["edges"])
        if len(edges) < 2 or not all(a < b for a, b in zip(edges, edges[1:])) or not all(map(math.isfinite, edges)):
            raise ValueError(f"edges must be at least 2 finite, strictly increasing numbers, got {list(edges)[:8]}")
        return NumericEmbedding(kind, dim, edges)
    return NumericEmbedding(kind, dim, (), int(params["frequencies"]), float(params["sigma"]))


class NumericEmbeddings(nn.Module):
    """(dense, dense_missing) -> (values, flags): the plain columns, then every embedded column's `dim` values
    (grouped by kind and options, one library module per group), and the matching missing flags."""

    def __init__(self, specs: tuple[NumericEmbedding | None, ...]):
        super().__init__()
        from rtdl_num_embeddings import PeriodicEmbeddings, PiecewiseLinearEmbeddings

        plain = [j for j, s in enumerate(specs) if s is None]
        groups: dict[tuple, list[int]] = {}
        for j, s in enumerate(specs):
            if s is not None:
                groups.setdefault(s.group(), []).append(j)
        self.register_buffer("plain", torch.tensor(plain, dtype=torch.int64), persistent=False)
        flags = list(plain)
        self.modules_ = nn.ModuleList()
        self.columns: list[list[int]] = []
        for (kind, dim, frequencies, sigma), cols in groups.items():
            if kind == "piecewise_linear":
                bins = [torch.tensor(specs[j].edges, dtype=torch.float32) for j in cols]
                with warnings.catch_warnings():  # a one-bin column is min-max scaling: a warning we need not print
                    warnings.simplefilter("ignore", UserWarning)
                    module = PiecewiseLinearEmbeddings(bins, dim, activation=False, version="B")
            else:
                module = PeriodicEmbeddings(
                    len(cols), dim, n_frequencies=frequencies, frequency_init_scale=sigma, activation=True, lite=False
                )
            self.modules_.append(module)
            self.columns.append(cols)
            flags += [j for j in cols for _ in range(dim)]
        for k, cols in enumerate(self.columns):
            self.register_buffer(f"columns_{k}", torch.tensor(cols, dtype=torch.int64), persistent=False)
        self.register_buffer("flags", torch.tensor(flags, dtype=torch.int64), persistent=False)
        self.width = len(flags)

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [dense.index_select(1, self.plain)]
        for k, module in enumerate(self.modules_):
            parts.append(module(dense.index_select(1, getattr(self, f"columns_{k}"))).flatten(1))
        return torch.cat(parts, dim=1), dense_missing.index_select(1, self.flags)


class EmbeddedInputs(nn.Module):
    """A bottom behind NumericEmbeddings: forward(dense, dense_missing, cat) = inner(embedded values, flags, cat)."""

    def __init__(self, inner: nn.Module, embeddings: NumericEmbeddings):
        super().__init__()
        self.inner = inner
        self.embeddings = embeddings
        self.n_fields = getattr(inner, "n_fields", 1)  # what the rank wrapper reads (vfl/distributed/context.py)

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        values, flags = self.embeddings(dense, dense_missing)
        return self.inner(values, flags, cat)


def inner_schema(schema):
    """The InputSchema the inner bottom is built with: the plain numeric columns, then `name#i` for each value of an
    embedded column (no scaling statistics: the prepared values are standardized already)."""
    specs = schema.numeric_embeddings
    names = [n for n, s in zip(schema.numeric, specs) if s is None]
    groups: dict[tuple, list[int]] = {}
    for j, s in enumerate(specs):
        if s is not None:
            groups.setdefault(s.group(), []).append(j)
    for cols in groups.values():
        names += [f"{schema.numeric[j]}#{i}" for j in cols for i in range(specs[j].dim)]
    return replace(schema, numeric=tuple(names), numeric_mean=None, numeric_std=None, numeric_embeddings=None)
