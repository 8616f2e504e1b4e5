"""A party's saved transforms applied to new rows, frozen: the prediction path of preparation, which never refits.

`prepare` fits each column's transform on the party's own training rows and saves what it fitted with the shard
(`schema.json` and `vocab/NNNN.npy`, a Criteo party's shard as any table's). `FrozenTransforms.of_shard(dir)` reads them back as vfl/data/table.py's fitted columns, and
`read(path)` streams a file of new rows (the same columns as the party's training file; the label column optional)
through the same reader and the same `FittedColumn.apply` as preparation: a value unseen at fit time gets the
out-of-vocabulary id 1, a missing one 0, hashing and numeric statistics are the saved ones. Blocks are bounded
(the reader's chunks); nothing is written here.

A row is never skipped, nor the file refused, for its label: a new row's outcome is often not known yet. The label
is parsed leniently (`label_valid` marks the rows whose label is in the task's domain; the others only leave the
metrics), so which rows are read, and so the ids PSI sees, depend on the ids and features alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from vfl.config.table_schema import ColumnSpec, LabelSpec, SchemaConfig
from vfl.data.errors import DataError
from vfl.data.readers.read_stats import ReadStats
from vfl.data.table import SCHEMA_FILE, FittedTable, load_vocab
from vfl.data.task import Task, label_task
from vfl.data.transforms import OOV_ID


@dataclass
class NewBlock:
    """One block of new rows after the frozen transforms, in file order."""

    row_index: np.ndarray  # int64 (n,): 0-based data row of the file
    ids: np.ndarray  # int64 (n,): sample ids as training used them (vfl/data/ids.py)
    dense: np.ndarray  # float32 (n, d)
    dense_missing: np.ndarray  # uint8 (n, d)
    cat: np.ndarray  # int32 (n, c)
    label: np.ndarray | None  # the task's labels (int8 class ids or float32 values) when the file carries them
    label_valid: np.ndarray | None  # bool (n,): the label is in the task's domain (else `label` holds 0, unused)


class FrozenTransforms:
    """The transforms a party's shard saved, applied to new rows; `oov` counts the categorical values that got the
    out-of-vocabulary id (unseen at fit time) of the `cat_values` present values read so far."""

    def __init__(self, shard_dir: str, table: FittedTable, manifest: dict, label: LabelSpec | None):
        self.shard_dir = shard_dir
        self.table = table
        self.manifest = manifest
        self.label_spec = label
        self.oov = 0
        self.cat_values = 0
        party = manifest["party"]
        if table.dense_names != list(party["dense"]) or table.cat_names != list(party["categorical"]):
            raise DataError(
                f"shard {shard_dir}: its saved transforms give columns {table.dense_names} + {table.cat_names}, "
                f"its manifest {party['dense']} + {party['categorical']} (re-run prepare)"
            )
        sizes = table.field_sizes()
        wrong = [c for c in table.cat_names if int(party["field_sizes"][c]) != sizes[c]]
        if wrong:
            raise DataError(f"shard {shard_dir}: the saved vocabulary of {wrong[0]!r} does not give its field size")

    @classmethod
    def of_shard(cls, shard_dir: str) -> FrozenTransforms:
        """The transforms saved with the shard at shard_dir; DataError naming what is missing."""
        path = os.path.join(shard_dir, "manifest.json")
        if not os.path.exists(path):
            raise DataError(
                f"{shard_dir} has no manifest.json: it is not a party shard of `python -m vfl.data prepare`"
            )
        with open(path) as f:
            manifest = json.load(f)
        if not os.path.exists(os.path.join(shard_dir, SCHEMA_FILE)):
            raise DataError(
                f"shard {shard_dir} has no {SCHEMA_FILE}: it was prepared before shards saved their schema; "
                "re-run `python -m vfl.data prepare` on its raw file"
            )
        with open(os.path.join(shard_dir, SCHEMA_FILE)) as f:
            doc = json.load(f)
        lab = doc.get("label")
        label = (
            LabelSpec(column=lab["column"], classes=lab.get("classes"), clip=lab.get("clip"))
            if lab is not None
            else None
        )
        schema = SchemaConfig(
            id=doc["id"],
            columns={c["name"]: ColumnSpec(kind=c["kind"], transform=c["transform"]) for c in doc["columns"]},
            label=label,
            keys=doc.get("keys", "text"),
        )
        table = FittedTable(schema, label_task(lab).kind if lab is not None else None)
        for col, saved in zip(table.columns, doc["columns"]):
            state = dict(saved.get("state") or {})
            col.restore(state, load_vocab(shard_dir, state.pop("file")) if "file" in state else None)
        if table.label is not None and table.label.classes is None:
            table.label.classes = tuple(lab.get("classes") or ())
        return cls(shard_dir, table, manifest, label)

    @property
    def task(self) -> Task | None:
        lab = self.manifest.get("label")
        return label_task(lab) if lab else None

    def has_label(self, path: str) -> bool:
        """Whether the file of new rows carries this (labelled) party's label column."""
        if self.label_spec is None:
            return False
        from vfl.data.readers.table_file import columns_of

        return self.label_spec.column in columns_of(path)

    def read(self, path: str, strict: bool = False, stats: ReadStats | None = None) -> Iterator[NewBlock]:
        """The new rows of `path`, block by block, transformed as at training; the label when the file has it."""
        stats = stats if stats is not None else ReadStats()
        from vfl.data.readers.table_file import line_of, read_table_blocks

        labelled = self.has_label(path)
        task = self.task
        regression = task is not None and task.is_regression
        for block in read_table_blocks(path, self.table.schema, labelled, regression, strict, stats, digest=False):
            label = None
            if labelled:
                valid = self._valid_table_labels(block.label)
                label = np.zeros(valid.size, task.label_dtype)
                label[valid] = self.table.label.encode(
                    block.label[valid], block.row_index[valid], path, lambda r: line_of(path, r)
                )
                label = (label, valid)
            yield self._rows(block, label)

    def _valid_table_labels(self, values: np.ndarray) -> np.ndarray:
        """Which labels of a table block the label encoder accepts: a finite number within float32 once clipped
        (regression), one of the classes (classification); blank and NA are not."""
        enc = self.table.label
        if enc.kind == "regression":
            v = np.asarray(values, np.float64)
            with np.errstate(invalid="ignore"):
                v = np.clip(v, *enc.clip) if enc.clip is not None else v
                return np.isfinite(v) & (np.abs(v) <= np.finfo(np.float32).max)
        return enc.known(values)

    def _rows(self, block, label: tuple[np.ndarray, np.ndarray] | None) -> NewBlock:
        """The block transformed; label: (labels, which are valid) when the file carries the label."""
        every = np.arange(block.sample_id.size)
        dense, missing, cat = self.table.apply(block, every)
        n_vocab = [j for j, c in enumerate(self.table.categorical_columns()) if c.transform == "vocabulary"]
        if n_vocab:
            present = ~block.cat_missing[:, n_vocab]
            self.cat_values += int(present.sum())
            self.oov += int(((cat[:, n_vocab] == OOV_ID) & present).sum())
        labels, valid = label if label is not None else (None, None)
        return NewBlock(block.row_index, block.sample_id, dense, missing, cat, labels, valid)
