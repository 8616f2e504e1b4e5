"""A party's table schema fitted on its own training rows: its column transforms, and its label's encoder.

Each declared column (vfl/config/table_schema.py) becomes a transform that is fitted once, on the rows of the party's own
file whose public split is `train` (pytorch-frame's fittable transforms: fit, apply, state), then applied to every
row, in training and in prediction alike; nothing is refitted on new rows. What a transform fitted is saved with
the shard in a versioned, non-pickle form (`schema.json`'s entries; vocabularies as `vocab/<n>.npy`).

| kind | transform | what the model sees | fitted state |
|---|---|---|---|
| numeric | log1p | sign(x) log(1+abs(x)) | none |
| numeric | standardize | (x - mean) / std (std 0: 1) | mean, std |
| numeric | none | x | none |
| numeric | quantile_bins: N | a categorical field: the bin of x among <= N quantile bins | the bin edges |
| numeric | piecewise_linear: bins, dim | (x - mean) / std, embedded by the bottom over <= N quantile bins of it | mean, std, edges |
| numeric | periodic: frequencies, dim, sigma | (x - mean) / std, embedded by the bottom (learned frequencies) | mean, std |
| categorical | vocabulary: min_count | ids 2.. of values seen >= min_count times (sorted keys); 1 otherwise | the keys |
| categorical | hash: buckets | 2 + splitmix64(key ^ salt(column)) mod (buckets - 2) | the salt |

The two embeddings (vfl/models/numeric_embeddings.py) store the standardized value like `standardize`; the bottom
turns it into a vector. Piecewise-linear bins are quantiles of the standardized float32 training values (the
quantile bins of Gorishniy, Rubachev, Babenko, NeurIPS 2022, sec. 3.2.1, computed by their `rtdl_num_embeddings`
`compute_bins` on a uniform sample of at most QUANTILE_SAMPLE values): features only, never the label.

Numeric values are float32; a missing one is 0 with its missing flag set to 1. Categorical id 0 is missing and 1
out of vocabulary (a value unseen at fit time, or rarer than min_count), as in vfl/data/transforms.py.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from vfl.config.table_schema import EMBEDDINGS, ColumnSpec, SchemaConfig
from vfl.data.errors import DataError
from vfl.data.label_encoder import LabelEncoder
from vfl.data.transforms import (
    MISSING_ID,
    VocabularyCounter,
    dense_transform,
    field_salts,
    hash_bucket,
    vocabulary_ids,
)

SCHEMA_FORMAT = 1
SCHEMA_FILE = "schema.json"  # a table shard's declarations and fitted state, beside its manifest.json
QUANTILE_SAMPLE = 1 << 20  # values kept (reservoir) per column to place the quantile bins


class FittedColumn:
    """One column's transform: fit on training values (fit_block, then finish), apply to any values."""

    def __init__(self, name: str, spec: ColumnSpec):
        self.name, self.kind = name, spec.kind
        self.transform, self.params = spec.transform_name, dict(spec.transform_params)
        self.state: dict = {}
        self.vocab: np.ndarray | None = None
        self.seen = 0  # non-missing training values
        self._sum = self._sumsq = 0.0
        self._counter = VocabularyCounter(1) if self.transform == "vocabulary" else None
        self._sample: list[np.ndarray] = []
        self._rng = np.random.default_rng(0)

    @property
    def output(self) -> str:
        """Where the model sees this column: `numeric` (a value and its missing flag) or `categorical` (an id)."""
        return "categorical" if self.kind == "categorical" or self.transform == "quantile_bins" else "numeric"

    def fit_block(self, values: np.ndarray, missing: np.ndarray) -> None:
        present = ~missing
        self.seen += int(present.sum())
        if self.transform in ("standardize", *EMBEDDINGS):
            v = values[present].astype(np.float64)
            self._sum += float(v.sum())
            self._sumsq += float((v * v).sum())
        if self.transform in ("quantile_bins", "piecewise_linear"):
            self._sample.append(values[present].astype(np.float64))
            if sum(a.size for a in self._sample) > 2 * QUANTILE_SAMPLE:  # a uniform subsample bounds memory
                pool = np.concatenate(self._sample)
                self._sample = [self._rng.choice(pool, QUANTILE_SAMPLE, replace=False)]
        elif self._counter is not None:
            self._counter.update(values.reshape(-1, 1), missing.reshape(-1, 1))

    @property
    def fit_free(self) -> bool:
        """Whether the transform's state depends on no row (log1p, none, hash): it applies before any row is seen."""
        return self.transform in ("log1p", "none", "hash")

    def check_seen(self, path: str) -> None:
        """An error naming the column when every training value of it is missing."""
        if self.seen == 0:
            raise DataError(
                f"{path}: column {self.name!r} is empty in the training rows (every value missing); remove it from "
                "data.schema.columns or fill it"
            )

    def finish(self, path: str, allow_empty: bool = False) -> None:
        """Turn what fit_block saw into the state; an empty column is an error naming it (unless allow_empty: the
        state of a fit-free column, set before its rows are seen; check_seen once they are)."""
        if not allow_empty:
            self.check_seen(path)
        if self.transform in ("standardize", *EMBEDDINGS):
            mean = self._sum / self.seen
            var = max(self._sumsq / self.seen - mean * mean, 0.0)
            std = float(np.sqrt(var))
            self.state = {"mean": mean, "std": std if std > 0 else 1.0}
        if self.transform == "piecewise_linear":
            pool = np.concatenate(self._sample)
            scaled = self._standardized(pool, np.zeros(pool.shape, bool))
            self.state["edges"] = quantile_edges(scaled, self.params["bins"])
            self._sample = []
        elif self.transform == "quantile_bins":
            pool = np.concatenate(self._sample)
            qs = np.quantile(pool, np.linspace(0, 1, self.params["bins"] + 1)[1:-1])
            self.state = {"edges": np.unique(qs).tolist()}
            self._sample = []
        elif self.transform == "vocabulary":
            self.vocab = self._counter.vocabularies(self.params["min_count"])[0]
            self.state = {"size": int(self.vocab.size)}
            self._counter = None
        elif self.transform == "hash":
            self.state = {"salt": int(field_salts([self.name])[0])}

    def restore(self, state: dict, vocab: np.ndarray | None = None) -> None:
        """Put back what a fit saved (schema.json's state, a vocabulary): the column applies it, never refits."""
        self.state, self.vocab, self._counter = dict(state), vocab, None

    @property
    def field_size(self) -> int:
        """The id range of a categorical output (ids 0 and 1 included)."""
        if self.transform == "vocabulary":
            return int(self.vocab.size) + 2
        if self.transform == "hash":
            return int(self.params["buckets"])
        if self.transform == "quantile_bins":
            return len(self.state["edges"]) + 3
        raise ValueError(f"column {self.name!r} is numeric")

    def apply(self, values: np.ndarray, missing: np.ndarray) -> np.ndarray:
        """float32 values (numeric output; 0 where missing) or int32 ids (categorical output)."""
        if self.transform == "log1p":
            return dense_transform(np.where(missing, 0.0, values), missing)
        if self.transform in ("standardize", "none", *EMBEDDINGS):
            return self._standardized(values, missing)
        if self.transform == "quantile_bins":
            ids = np.searchsorted(np.asarray(self.state["edges"]), np.where(missing, 0.0, values), side="right") + 2
            return np.where(missing, MISSING_ID, ids).astype(np.int32)
        keys = values.reshape(-1, 1)
        miss = missing.reshape(-1, 1)
        if self.transform == "hash":
            salt = np.array([self.state["salt"]], dtype=np.uint64)
            return hash_bucket(keys, miss, salt, self.params["buckets"])[:, 0]
        return vocabulary_ids(keys, miss, [self.vocab])[:, 0]

    def _standardized(self, values: np.ndarray, missing: np.ndarray) -> np.ndarray:
        """float32 (x - mean) / std (x itself for `none`), 0 where missing."""
        v = np.where(missing, 0.0, values).astype(np.float64)
        if self.transform != "none":
            v = (v - self.state["mean"]) / self.state["std"]
        out = v.astype(np.float32)
        out[missing] = 0.0
        return out

    def to_doc(self) -> dict:
        return {"name": self.name, "kind": self.kind, "transform": {self.transform: self.params}, "state": self.state}


def quantile_edges(values: np.ndarray, bins: int) -> list[float]:
    """The sorted, distinct edges of at most `bins` quantile bins of float32 `values` (compute_bins of
    rtdl_num_embeddings: quantiles at 0, 1/bins, ..., 1), as float32 numbers; a column with one distinct value gets
    the one bin [v, v + 1]. JSON keeps each float32 edge exactly (a Python float holds it without rounding)."""
    import torch
    from rtdl_num_embeddings import compute_bins

    x = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(-1, 1)
    if x.shape[0] < 2 or bool((x == x[0]).all()):
        v = float(x[0, 0]) if x.shape[0] else 0.0
        return [float(np.float32(v)), float(np.float32(v + 1.0))]
    with warnings.catch_warnings():  # a two-valued column gets one bin (min-max scaling): said in the docs, not here
        warnings.simplefilter("ignore", UserWarning)
        edges = compute_bins(x, n_bins=min(bins, x.shape[0] - 1))[0]
    return [float(e) for e in edges.to(torch.float32)]


def _columns(index: list[int]) -> slice | np.ndarray:
    """Column positions as a slice when they run consecutively (a view, not numpy's slower gather)."""
    if index and index == list(range(index[0], index[-1] + 1)):
        return slice(index[0], index[-1] + 1)
    return np.asarray(index, dtype=np.intp)


class FittedTable:
    """A party's schema with every column's transform: built unfitted from the config, fitted, or loaded."""

    def __init__(self, schema: SchemaConfig, task_kind: str | None):
        self.schema = schema
        self.columns = [FittedColumn(n, s) for n, s in schema.columns.items()]
        self.label = (
            LabelEncoder(task_kind, schema.label.classes, schema.label.clip, schema.label.column)
            if task_kind is not None and schema.label is not None
            else None
        )
        if task_kind != "regression" and schema.label is not None and schema.label.clip is not None:
            raise DataError(f"data.schema.label.clip is for train.task: regression, not {task_kind}")

    def numeric_columns(self) -> list[FittedColumn]:
        return [c for c in self.columns if c.kind == "numeric"]

    def categorical_columns(self) -> list[FittedColumn]:
        return [c for c in self.columns if c.kind == "categorical"]

    @property
    def dense_names(self) -> list[str]:
        """The columns of the shard's dense.npy, in order (numeric outputs)."""
        return [c.name for c in self.numeric_columns() if c.output == "numeric"]

    @property
    def cat_names(self) -> list[str]:
        """The fields of the shard's cat.npy, in order: categorical columns, then binned numeric ones."""
        return [c.name for c in self.categorical_columns()] + [
            c.name for c in self.numeric_columns() if c.output == "categorical"
        ]

    def fit_block(self, block, rows: np.ndarray) -> None:
        """Fit on the block's `rows` (its training rows), whole rows gathered once. A fit-free column only needs to
        have seen a present value (check_seen): it counts them until it has."""
        for columns, values, missing in (
            (self.numeric_columns(), block.numeric, block.numeric_missing),
            (self.categorical_columns(), block.cat_key, block.cat_missing),
        ):
            todo = [j for j, c in enumerate(columns) if not c.fit_free or c.seen == 0]
            if not todo:
                continue
            missing = missing[rows]
            fitting = any(not columns[j].fit_free for j in todo)
            values = values[rows] if fitting else None
            for j in todo:
                c = columns[j]
                if c.fit_free:
                    c.seen += int(rows.size - np.count_nonzero(missing[:, j]))
                else:
                    c.fit_block(values[:, j], missing[:, j])

    def fit_labels(self, block) -> None:
        if self.label is not None:
            self.label.fit_block(block.label)

    @property
    def fit_free(self) -> bool:
        """Whether nothing is fitted from the rows (every column fit-free; the label's classes declared): preparation
        then reads the file once, applying as it goes."""
        fixed_label = self.label is None or self.label.kind != "multiclass" or self.label.classes is not None
        return fixed_label and all(c.fit_free for c in self.columns)

    def finish(self, path: str, allow_empty: bool = False) -> None:
        for c in self.columns:
            c.finish(path, allow_empty)
        if self.label is not None:
            self.label.finish(path)

    def check_seen(self, path: str) -> None:
        """An error naming the first column whose training values are all missing."""
        for c in self.columns:
            c.check_seen(path)

    def apply(self, block, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dense float32 (n, d), dense_missing uint8 (n, d), cat int32 (n, c)) of the block's rows. The columns of
        one transform go through it together (log1p; hash with one bucket count; vocabulary), giving what each
        column's own `FittedColumn.apply` gives."""
        n = rows.size
        numeric, nmiss = block.numeric[rows], block.numeric_missing[rows]  # whole rows gathered once
        keys, kmiss = block.cat_key[rows], block.cat_missing[rows]
        nums, cats = self.numeric_columns(), self.categorical_columns()
        out = [j for j, c in enumerate(nums) if c.output == "numeric"]
        dense = np.empty((n, len(out)), np.float32)
        log = [k for k, j in enumerate(out) if nums[j].transform == "log1p"]
        if log:
            src = _columns([out[k] for k in log])
            dense[:, _columns(log)] = dense_transform(numeric[:, src], nmiss[:, src])  # missing: 0
        for k, j in enumerate(out):
            if nums[j].transform != "log1p":
                dense[:, k] = nums[j].apply(numeric[:, j], nmiss[:, j])
        binned = [j for j, c in enumerate(nums) if c.output == "categorical"]
        cat = np.empty((n, len(cats) + len(binned)), np.int32)
        groups: dict[tuple, list[int]] = {}
        for j, c in enumerate(cats):
            groups.setdefault(("hash", c.params["buckets"]) if c.transform == "hash" else ("vocabulary",), []).append(j)
        for group, listed in groups.items():
            js = _columns(listed)
            if group[0] == "hash":
                salts = np.array([cats[j].state["salt"] for j in listed], np.uint64)
                ids = hash_bucket(keys[:, js], kmiss[:, js], salts, group[1])
            else:
                ids = vocabulary_ids(keys[:, js], kmiss[:, js], [cats[j].vocab for j in listed])
            if len(listed) == cat.shape[1]:  # one transform for every field: its ids are the array
                cat = ids
            else:
                cat[:, js] = ids
        for k, j in enumerate(binned):
            cat[:, len(cats) + k] = nums[j].apply(numeric[:, j], nmiss[:, j])
        return dense, nmiss[:, _columns(out)].astype(np.uint8), cat

    def field_sizes(self) -> dict[str, int]:
        by_name = {c.name: c for c in self.columns}
        return {n: by_name[n].field_size for n in self.cat_names}

    def to_doc(self) -> dict:
        """schema.json: the declarations and what was fitted (vocabularies in vocab/<n>.npy, named here)."""
        cols = []
        n_vocab = 0
        for c in self.columns:
            d = c.to_doc()
            if c.vocab is not None:
                d["state"] = {**d["state"], "file": f"vocab/{n_vocab:04d}.npy"}
                n_vocab += 1
            cols.append(d)
        doc = {
            "format": SCHEMA_FORMAT,
            "id": self.schema.id,
            "columns": cols,
            "dense": self.dense_names,
            "categorical": self.cat_names,
        }
        if self.schema.keys != "text":  # the default scheme is left unsaid (shards before the option read the same)
            doc["keys"] = self.schema.keys
        if self.label is not None:
            doc["label"] = self.label.to_doc()
        return doc

    def vocab_files(self) -> list[tuple[str, np.ndarray]]:
        out, n = [], 0
        for c in self.columns:
            if c.vocab is not None:
                out.append((f"vocab/{n:04d}.npy", c.vocab))
                n += 1
        return out


def load_vocab(shard_dir: str, rel: str) -> np.ndarray:
    """A saved vocabulary (uint64 keys, sorted) of the shard at shard_dir; DataError naming it when it is missing."""
    path = os.path.join(shard_dir, rel)
    if not os.path.exists(path):
        raise DataError(f"shard {shard_dir}: its vocabulary {rel} is missing (re-run prepare)")
    return np.load(path, allow_pickle=False).astype(np.uint64)
