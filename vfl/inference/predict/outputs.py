"""The leader's prediction files: `predictions.parquet` and `predictions.csv`, written batch by batch, then renamed.

Columns: `id` (the sample id as training used it: a decimal id as itself, other text its 64-bit hash,
vfl/data/ids.py), then the score: `score` (binary: the probability of the positive class; regression: the value in
the label's units), or `score_<class>` per class (K classes: their probabilities, in class-id order, named by the
class names the shard recorded), then `row` (the row's 0-based data row in the leader's file of new rows, to join
back to it). Rows sorted by id. Both files are written to temporary names, fsynced and renamed at the end (privacy/durable_files.py):
a failed prediction, or a crash, leaves no half-written file.
"""

from __future__ import annotations

import os

import numpy as np

from privacy.durable_files import PendingFile
from vfl.data.task import Task


def score_columns(task: Task, class_names: list[str] | None = None) -> list[str]:
    """The score columns of a task: ["score"], or one per class."""
    if task.kind != "multiclass":
        return ["score"]
    names = class_names if class_names and len(class_names) == task.outputs else [str(k) for k in range(task.outputs)]
    return [f"score_{n}" for n in names]


class PredictionWriter:
    """Appends (ids, scores, rows) batches to predictions.parquet and .csv under out_dir; `close()` renames them."""

    def __init__(self, out_dir: str, task: Task, class_names: list[str] | None = None):
        import pyarrow as pa

        os.makedirs(out_dir, exist_ok=True)
        self.paths = {ext: os.path.join(out_dir, f"predictions.{ext}") for ext in ("parquet", "csv")}
        self.pending: dict[str, PendingFile] = {}  # the temporary files, made with the writers
        self.columns = score_columns(task, class_names)
        self.score_type = pa.float64()
        self.schema = pa.schema(
            [("id", pa.int64()), *((c, self.score_type) for c in self.columns), ("row", pa.int64())]
        )
        self._parquet = None
        self._csv = None
        self.rows = 0

    def write(self, ids: np.ndarray, scores: np.ndarray, rows: np.ndarray) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        scores = np.asarray(scores).reshape(len(ids), len(self.columns))
        arrays = [pa.array(np.asarray(ids, np.int64))]
        arrays += [pa.array(scores[:, j], type=self.score_type) for j in range(len(self.columns))]
        arrays.append(pa.array(np.asarray(rows, np.int64)))
        batch = pa.record_batch(arrays, schema=self.schema)
        if self._parquet is None:
            self.pending = {ext: PendingFile(p) for ext, p in self.paths.items()}
            self._parquet = pq.ParquetWriter(self.pending["parquet"].tmp, self.schema)
            self._csv = pacsv.CSVWriter(self.pending["csv"].tmp, self.schema)
        self._parquet.write_batch(batch)
        self._csv.write_batch(batch)
        self.rows += len(ids)

    def close(self) -> dict[str, str]:
        """Finish both files and move them into place; returns their paths."""
        if self._parquet is None:  # no row was scored: empty files with the header
            self.write(np.empty(0, np.int64), np.empty((0, len(self.columns))), np.empty(0, np.int64))
        self._parquet.close()
        self._csv.close()
        for pending in self.pending.values():  # fsynced, renamed into place, the directory fsynced
            pending.commit()
        return dict(self.paths)

    def discard(self) -> None:
        """Remove the temporary files (a failed prediction)."""
        for w in (self._parquet, self._csv):
            if w is not None:
                try:
                    w.close()
                except Exception:  # noqa: BLE001 - already failing; the files go
                    pass
        for pending in self.pending.values():
            pending.discard()
