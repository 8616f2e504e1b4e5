"""Reading a party's prepared shard for training: memory-mapped splits, batch order, batch digests."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np
import torch

from vfl.data.errors import DataError
from vfl.data.shard_sets import PARTS_DIR
from vfl.data.task import Task, label_task
from vfl.splits import SPLITS

IN_MEMORY_LIMIT = 2 << 30
DEVICE_RESIDENT_FRACTION = 0.25  # a split is kept on the GPU when it takes at most this share of its free memory


def _owned(arr: np.ndarray, dtype) -> np.ndarray:
    """A writable, contiguous array of dtype (slices of a memory map are read-only views)."""
    out = np.ascontiguousarray(arr, dtype=dtype)
    return out if out.flags.writeable and not isinstance(out, np.memmap) else np.array(out, dtype=dtype)


class RowSubset:
    """Rows `sel` of an array (memory-mapped or not), indexed on demand: a batch gathers only its rows."""

    def __init__(self, arr: np.ndarray, sel: np.ndarray):
        self.arr = arr
        self.sel = sel
        self.shape = (int(sel.size), *arr.shape[1:])
        self.dtype = arr.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows):
        return self.arr[self.sel[rows]]

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self.arr[self.sel])
        return out.astype(dtype) if dtype is not None else out


@dataclass
class ShardSplit:
    """One split (train or test) of a party's shard, arrays memory-mapped from disk."""

    ids: np.ndarray
    dense: np.ndarray
    dense_missing: np.ndarray
    cat: np.ndarray
    labels: np.ndarray | None

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def subset(self, sel: np.ndarray) -> "ShardSplit":
        """The rows sel (ascending) of this split: ids and labels in memory, features gathered per batch."""
        if sel.size == len(self) and (sel.size == 0 or sel[-1] == sel.size - 1):
            return self
        return ShardSplit(
            np.array(self.ids[sel]),
            RowSubset(self.dense, sel),
            RowSubset(self.dense_missing, sel),
            RowSubset(self.cat, sel),
            np.array(self.labels[sel]) if self.labels is not None else None,
        )

    def features(self, rows: np.ndarray | slice, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        """(dense float32, dense_missing float32, cat int64) tensors of the given rows.

        On an accelerator the split is copied there once (when it fits, see `resident_on`) and batches are
        gathered on the device: only the row indices cross the bus per batch."""
        device = torch.device(device)
        resident = self.resident_on(device) if device.type != "cpu" else None
        if resident is not None:
            dense, missing, cat = resident
            if isinstance(rows, slice):  # a slice is a view: copy, so no caller can write into the resident split
                return dense[rows].clone(), missing[rows].clone(), cat[rows].long()
            idx = torch.from_numpy(np.asarray(rows, dtype=np.int64)).to(device, non_blocking=True)
            return dense[idx], missing[idx], cat[idx].long()
        dense = torch.from_numpy(_owned(self.dense[rows], np.float32))
        missing = torch.from_numpy(_owned(self.dense_missing[rows], np.float32))
        cat = torch.from_numpy(_owned(self.cat[rows], np.int64))
        return dense.to(device), missing.to(device), cat.to(device)

    def resident_on(self, device: torch.device) -> tuple[torch.Tensor, ...] | None:
        """This split's feature arrays on `device` (copied on first use), or None when they would take more than
        DEVICE_RESIDENT_FRACTION of the device's free memory (then batches are gathered on the host)."""
        cache = self.__dict__.setdefault("_resident", {})
        if str(device) not in cache:
            need = len(self) * (self.dense.shape[1] * 8 + self.cat.shape[1] * 4)
            free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 0
            cache[str(device)] = (
                None
                if need > DEVICE_RESIDENT_FRACTION * free
                else tuple(
                    torch.from_numpy(_owned(np.asarray(a), dt)).to(device)
                    for a, dt in ((self.dense, np.float32), (self.dense_missing, np.float32), (self.cat, np.int32))
                )
            )
        return cache[str(device)]


class PartyShard:
    """OUT/<party> of `python -m vfl.data prepare`: manifest plus train/test splits."""

    def __init__(self, path: str, in_memory: bool | None = None):
        """in_memory None: load the arrays into RAM when the shard is under IN_MEMORY_LIMIT bytes, else
        memory-map them (the full Kaggle set is ~4 GiB per party; random batch gathers then hit the page cache)."""
        self.path = path
        manifest_path = os.path.join(path, "manifest.json")
        if not os.path.isdir(path):
            raise DataError(
                f"data.path {path!r} does not exist or is not a directory (run `python -m vfl.data prepare` first)"
            )
        if not os.path.exists(manifest_path):
            raise DataError(
                f"data.path {path!r} has no manifest.json: it is not a party shard written by `python -m vfl.data prepare`"
            )
        with open(manifest_path) as f:
            self.manifest = json.load(f)
        if not isinstance(self.manifest, dict) or not isinstance(self.manifest.get("party"), dict):
            parties = sorted((self.manifest.get("parties") or {}) if isinstance(self.manifest, dict) else {})
            raise DataError(
                f"data.path {path!r} is the prepared dataset, not one party's shard: use its party directory "
                f"{os.path.join(path, '<party>')} (one of {parties})"
            )
        party = self.manifest["party"]
        self.name: str = party["name"]
        self.dense_columns: list[str] = party["dense"]
        self.categorical_columns: list[str] = party["categorical"]
        self.field_sizes: list[int] = [int(party["field_sizes"][c]) for c in self.categorical_columns]
        self.has_labels: bool = bool(party["has_labels"])
        self.id_digest: dict[str, str] = self.manifest["id_digest"]
        # the labelled party's task (binary, K classes or a real value); None on a follower, which never learns it
        self.task: Task | None = label_task(self.manifest.get("label") or {}) if self.has_labels else None
        # the class ids' K (2: a 0/1 label); None for a real-valued label and on a follower
        self.num_classes: int | None = (
            None if self.task is None or self.task.is_regression else (self.task.num_classes or 2)
        )
        missing = [s for s in SPLITS if s not in self.id_digest]
        if missing:
            raise DataError(
                f"shard {path} has no {'/'.join(missing)} split (it was prepared by an older version): "
                "re-run `python -m vfl.data prepare`"
            )
        if in_memory is None:
            size = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)
            in_memory = size < IN_MEMORY_LIMIT
        self._in_memory = in_memory
        self._splits: dict[str, ShardSplit] = {}
        self._keep: np.ndarray | None = None
        self.rows_before_alignment: int | None = None

    def all_ids(self) -> np.ndarray:
        """Every sample id of the shard (all splits), the set this party brings to the intersection."""
        return np.concatenate([np.asarray(self.split(s).ids) for s in SPLITS])

    def restrict(self, keep: np.ndarray) -> None:
        """From now on every split holds only the ids in keep (the agreed intersection), in ascending id order;
        the id digests become those of the restricted splits, so aligned parties agree by construction."""
        keep = np.unique(np.asarray(keep, np.int64))
        self.rows_before_alignment = sum(len(self.split(s)) for s in SPLITS)
        for name in SPLITS:
            split = self.split(name)
            sel = np.flatnonzero(np.isin(np.asarray(split.ids), keep))
            self._splits[name] = split.subset(sel)
            self.id_digest = {**self.id_digest, name: ids_digest(self._splits[name].ids)}
        self._keep = keep

    @property
    def n_dense(self) -> int:
        return len(self.dense_columns)

    def split(self, name: str) -> ShardSplit:
        if name not in self._splits and self.manifest.get("parts"):  # several files' shard sets (shard_sets.py)
            self._splits[name] = read_parts(
                self.path, [p["name"] for p in self.manifest["parts"]], name, self._in_memory
            )
        if name not in self._splits:
            root = os.path.join(self.path, name)
            mode = None if self._in_memory else "r"

            def load(fname: str, required: bool = True):
                p = os.path.join(root, fname)
                if not os.path.exists(p):
                    if required:
                        raise DataError(f"shard {self.path}: missing {name}/{fname}")
                    return None
                return np.load(p, mmap_mode=mode, allow_pickle=False)

            s = ShardSplit(
                load("ids.npy"),
                load("dense.npy"),
                load("dense_missing.npy"),
                load("cat.npy"),
                load("labels.npy", required=self.has_labels),
            )
            n = len(s)
            for arr, what in ((s.dense, "dense"), (s.dense_missing, "dense_missing"), (s.cat, "cat")):
                if arr.shape[0] != n:
                    raise DataError(f"shard {self.path}/{name}: {what}.npy has {arr.shape[0]} rows, ids.npy has {n}")
            if s.labels is not None and self.task.is_regression:
                _check_real_labels(s.labels, f"{self.path}/{name}")
            elif (
                s.labels is not None
                and s.labels.size
                and not 0 <= int(s.labels.min()) <= int(s.labels.max()) < self.num_classes
            ):
                raise DataError(
                    f"shard {self.path}/{name}: labels.npy holds values in [{int(s.labels.min())}, "
                    f"{int(s.labels.max())}], but the manifest says {self.num_classes} classes (0..{self.num_classes - 1})"
                )
            self._splits[name] = s
        return self._splits[name]

    def check_columns(self, dense: tuple[str, ...] | None, categorical: tuple[str, ...] | None) -> None:
        """The config's optional column lists must match the shard's."""
        for want, have, key in (
            (dense, self.dense_columns, "dense"),
            (categorical, self.categorical_columns, "categorical"),
        ):
            if want is not None and list(want) != list(have):
                raise DataError(f"data.{key} {list(want)} does not match the shard's columns {have} in {self.path}")


def _check_real_labels(labels: np.ndarray, where: str) -> None:
    """A real-valued label is stored as finite floats."""
    if not np.issubdtype(labels.dtype, np.floating):
        raise DataError(f"shard {where}: labels.npy holds {labels.dtype}, but the manifest says real-valued (float32)")
    if labels.size and not np.isfinite(labels).all():
        raise DataError(f"shard {where}: labels.npy holds {int((~np.isfinite(labels)).sum())} non-finite values")


def batch_order(n_rows: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The row indices of each training batch of an epoch; every party derives the same order."""
    perm = np.random.default_rng([seed, epoch, 0xBA7C4]).permutation(n_rows)
    return [perm[i : i + batch_size] for i in range(0, n_rows, batch_size)]


def steps_per_epoch(n_rows: int, batch_size: int) -> int:
    """Number of batches in an epoch (the last one may be partial)."""
    return -(-n_rows // batch_size)


def eval_batches(n_rows: int, batch_size: int) -> list[slice]:
    """Consecutive evaluation batches over a split, in id order."""
    return [slice(i, min(i + batch_size, n_rows)) for i in range(0, n_rows, batch_size)]


def ids_digest(ids: np.ndarray) -> str:
    """sha256 of sample ids in order (the manifest's id_digest of a split)."""
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()


class ConcatRows:
    """Several arrays (memory-mapped or not) with the same trailing shape, indexed as one along rows."""

    def __init__(self, arrays: list):
        self.arrays = arrays
        self.starts = np.cumsum([0] + [len(a) for a in arrays])
        self.shape = (int(self.starts[-1]), *arrays[0].shape[1:])
        self.dtype = arrays[0].dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows):
        rows = np.arange(self.shape[0])[rows] if isinstance(rows, slice) else np.asarray(rows, np.int64)
        out = np.empty((rows.size, *self.shape[1:]), self.dtype)
        which = np.searchsorted(self.starts, rows, side="right") - 1
        for k in np.unique(which):
            sel = which == k
            out[sel] = self.arrays[k][rows[sel] - self.starts[k]]
        return out

    def __array__(self, dtype=None, copy=None):
        out = np.concatenate([np.asarray(a) for a in self.arrays])
        return out.astype(dtype) if dtype is not None else out


def read_parts(path: str, names: list[str], split: str, in_memory: bool):
    """One ShardSplit over every part's split, rows in ascending id order."""
    pieces = [PartyShard(os.path.join(path, PARTS_DIR, n), in_memory=in_memory).split(split) for n in names]
    ids = np.concatenate([np.asarray(p.ids) for p in pieces])
    order = np.argsort(ids, kind="stable")
    labels = None if pieces[0].labels is None else np.concatenate([np.asarray(p.labels) for p in pieces])[order]
    cat = lambda attr: RowSubset(ConcatRows([getattr(p, attr) for p in pieces]), order)
    return ShardSplit(ids[order], cat("dense"), cat("dense_missing"), cat("cat"), labels)
