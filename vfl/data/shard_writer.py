"""Writing a shard directory: each split's .npy appenders, its JSON files, and the atomic rename into place.

A shard is built in a temporary sibling of its final directory (`temp_sibling`) and renamed into place when it is
complete (`commit`), so a failure leaves nothing half-written; `--force` replaces an old shard the same way.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from vfl.data.npy_stream import NpyAppender


class SplitWriter:
    """The .npy appenders of one split of a party's shard."""

    def __init__(self, root: str, n_dense: int, n_cat: int, labelled: bool, label_dtype=np.int8):
        os.makedirs(root)
        self.root = root
        self.ids = NpyAppender(os.path.join(root, "ids.npy"), np.int64)
        self.dense = NpyAppender(os.path.join(root, "dense.npy"), np.float32, (n_dense,))
        self.dense_missing = NpyAppender(os.path.join(root, "dense_missing.npy"), np.uint8, (n_dense,))
        self.cat = NpyAppender(os.path.join(root, "cat.npy"), np.int32, (n_cat,))
        self.labels = NpyAppender(os.path.join(root, "labels.npy"), label_dtype) if labelled else None
        self.rows = 0

    def close(self) -> None:
        for a in (self.ids, self.dense, self.dense_missing, self.cat, self.labels):
            if a is not None:
                a.close()
        self.rows = self.ids.rows

    def sort_by_id(self) -> np.ndarray:
        """Reorder every array of the split by ascending id (one array in memory at a time); return the ids."""
        ids = np.load(self.ids.path)
        if ids.size < 2 or bool(np.all(np.diff(ids) > 0)):
            return ids
        order = np.argsort(ids, kind="stable")
        for a in (self.ids, self.dense, self.dense_missing, self.cat, self.labels):
            if a is not None:
                arr = np.load(a.path)[order]
                np.save(a.path, arr)
        return ids[order]


def temp_sibling(out_dir: str) -> str:
    """An empty temporary directory name beside out_dir (its parent created), where the shard is built."""
    parent = os.path.dirname(out_dir) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


def write_json(path: str, doc: dict) -> None:
    """doc as indented JSON, with a final newline."""
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")


def commit(tmp: str, out_dir: str) -> None:
    """Rename the finished temporary directory into place (replacing an old one with --force)."""
    if os.path.exists(out_dir):
        old = f"{out_dir}.old-{os.getpid()}"
        os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out_dir)
