"""A party's file of new rows for batch prediction: transformed with its frozen transforms, spilled to disk, aligned.

The file is read block by block (vfl/data/frozen.py: the transforms training fitted, nothing refitted) and each
block's arrays are appended to .npy files in a work directory, so memory holds one block and the ids (8 bytes a row),
whatever the file's size. After the private set intersection, `align(common)` keeps the rows whose ids every party
holds, in ascending id order (the order every party walks), and `split` serves their features by range as a
training shard's split does (vfl/data/shards.ShardSplit), so the bottom sees exactly what training fed it.
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np

from vfl.data.errors import DataError
from vfl.data.frozen import FrozenTransforms
from vfl.data.ids import check_unique
from vfl.data.npy_stream import NpyAppender
from vfl.data.readers.read_stats import ReadStats, warn_bad_lines
from vfl.data.shards import ShardSplit

PROGRESS_EVERY_S = 10.0


class NewRows:
    """One party's new rows: `ids` (file order), `split` (after align: the aligned rows), `labels` and
    `label_valid` (leader, when its file carries the label: a row whose label is missing or invalid is kept, scored
    and left out of the metrics only), `row_index` (each row's 0-based data row in the file). `rows_in_file` counts
    the rows kept and those refused for a malformed id or feature value (stats.bad_rows)."""

    def __init__(self, shard_dir: str, path: str, work_dir: str, log, strict: bool = False):
        if not os.path.isfile(path):
            raise DataError(f"the file of new rows {path!r} does not exist or is not a file")
        self.path = path
        self.frozen = FrozenTransforms.of_shard(shard_dir)
        self.work_dir = work_dir
        shutil.rmtree(work_dir, ignore_errors=True)
        os.makedirs(work_dir)
        self.stats = ReadStats()
        t0 = time.perf_counter()
        n_dense, n_cat = len(self.frozen.table.dense_names), len(self.frozen.table.cat_names)
        files = {
            "ids": NpyAppender(self._p("ids"), np.int64),
            "row_index": NpyAppender(self._p("row_index"), np.int64),
            "dense": NpyAppender(self._p("dense"), np.float32, (n_dense,)),
            "dense_missing": NpyAppender(self._p("dense_missing"), np.uint8, (n_dense,)),
            "cat": NpyAppender(self._p("cat"), np.int32, (n_cat,)),
        }
        labelled = self.frozen.has_label(path)
        task = self.frozen.task
        if labelled:
            files["labels"] = NpyAppender(self._p("labels"), task.label_dtype)
            files["label_valid"] = NpyAppender(self._p("label_valid"), np.bool_)
        last = t0
        for block in self.frozen.read(path, strict, self.stats):
            for name, app in files.items():
                app.append(block.label if name == "labels" else getattr(block, name))
            if time.perf_counter() - last >= PROGRESS_EVERY_S:
                last = time.perf_counter()
                log(f"new rows: {self.stats.good_rows} read, {self.stats.good_rows / (last - t0):.0f} rows/s")
        for app in files.values():
            app.close()
        warn_bad_lines(path, self.stats)
        self.ids = np.load(self._p("ids"))
        if self.ids.size == 0:
            raise DataError(f"{path}: no row to score")
        check_unique(self.ids, path)
        self.seconds = time.perf_counter() - t0
        self.labelled = labelled
        self.rows_in_file = len(self) + self.stats.bad_rows
        self.split: ShardSplit | None = None
        self.labels: np.ndarray | None = None
        self.label_valid: np.ndarray | None = None
        self.row_index: np.ndarray | None = None

    def _p(self, name: str) -> str:
        return os.path.join(self.work_dir, f"{name}.npy")

    def __len__(self) -> int:
        return int(self.ids.size)

    def align(self, common: np.ndarray) -> int:
        """Keep the rows whose ids are in `common`, in ascending id order; returns how many rows got no match."""
        order = np.argsort(self.ids, kind="stable")
        keep = order[np.isin(self.ids[order], np.asarray(common, np.int64))]
        load = lambda name: np.load(self._p(name), mmap_mode="r")  # noqa: E731
        full = ShardSplit(self.ids, load("dense"), load("dense_missing"), load("cat"), None)
        self.split = full.subset(keep)
        self.row_index = np.asarray(load("row_index")[keep])
        self.labels = np.asarray(load("labels")[keep]) if self.labelled else None
        self.label_valid = np.asarray(load("label_valid")[keep]) if self.labelled else None
        return len(self) - int(keep.size)

    def oov_fraction(self) -> float | None:
        """The share of present categorical values (vocabulary columns) that got the out-of-vocabulary id."""
        f = self.frozen
        return f.oov / f.cat_values if f.cat_values else None

    def close(self) -> None:
        """Drop the work directory (the memory maps are released first)."""
        self.split = None
        shutil.rmtree(self.work_dir, ignore_errors=True)
