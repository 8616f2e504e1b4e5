"""A labelled party's label column -> the task's label array: class ids (binary, multiclass) or clipped values.

The classes are declared (data.schema.label.classes; binary defaults to 0 and 1) or, for multiclass, fitted from
the file. A value outside the task's domain refuses the file once it is read (vfl/data/bad_labels.py): a row is
never dropped for its label. vfl/data/table.py's FittedTable holds one; schema.json saves its classes.
"""

from __future__ import annotations

import numpy as np

from vfl.data.bad_labels import BadLabels
from vfl.data.errors import DataError
from vfl.data.task import MAX_CLASSES, Task


class LabelEncoder:
    """Label text (or float) -> the task's label array; a value outside the task's domain refuses the file.

    A class label written as an integral number ('1.0', '0.0', '2.00': what pandas writes for an integer column with
    a missing value) is the integer's class ('1', '0', '2') unless the classes name that text itself."""

    def __init__(self, task_kind: str, classes: tuple[str, ...] | None, clip: tuple[float, float] | None, column: str):
        self.kind, self.column, self.clip = task_kind, column, clip
        if task_kind == "binary":
            classes = classes or ("0", "1")
            if len(classes) != 2:
                raise DataError(
                    f"data.schema.label.classes lists {len(classes)} classes {list(classes)}; a binary task names 2 "
                    "(negative, positive): set train.task: multiclass for more"
                )
        self.classes = classes  # None for multiclass: fitted from the file
        self._distinct: set[str] = set()
        self.values_seen: list[float] = []

    def fit_block(self, labels: np.ndarray) -> None:
        if self.kind == "multiclass" and self.classes is None:
            self._distinct.update(_integral(np.asarray(_distinct(labels), dtype=object).astype(str)).tolist())

    def finish(self, path: str) -> None:
        if self.kind == "multiclass" and self.classes is None:
            values = sorted(self._distinct - {""}, key=_class_order)
            if not 3 <= len(values) <= MAX_CLASSES:
                raise DataError(
                    f"{path}: label column {self.column!r} takes {len(values)} distinct values "
                    f"{values[:10]}; a multiclass task needs 3 to {MAX_CLASSES} (set train.task: binary for 2)"
                )
            self.classes = tuple(values)

    def encode(self, labels: np.ndarray, rows: np.ndarray, path: str, line, bad: BadLabels | None = None) -> np.ndarray:
        """The label array of a block (data rows `rows`); a value outside the task's domain is recorded in `bad` (0 in
        its place; the caller refuses the file once it is read), or, without `bad`, a DataError naming it and its
        line. No row is ever dropped for its label (vfl/data/bad_labels.py)."""
        own = bad is None
        bad = BadLabels(path, self.column, line) if own else bad
        out = self._encode(labels, rows, path, line, bad)
        if own:
            bad.refuse()
        return out

    def _encode(self, labels: np.ndarray, rows: np.ndarray, path: str, line, bad: BadLabels) -> np.ndarray:
        if self.kind == "regression":
            missing = ~np.isfinite(labels)
            bad.add(rows[missing], labels[missing], "a finite number (regression task)")
            v = np.where(missing, 0.0, labels).astype(np.float64)
            if self.clip is not None:
                v = np.clip(v, *self.clip)
            too_big = np.abs(v) > np.finfo(np.float32).max  # float32 would make it inf
            if too_big.any():
                r = int(np.flatnonzero(too_big)[0])
                raise DataError(
                    f"{path}: {line(int(rows[r]))}: label {self.column!r} is {labels[r]:g}, beyond float32's range "
                    f"(|y| <= 3.4e38): rescale the label, or declare data.schema.label.clip: [lo, hi]"
                )
            return v.astype(np.float32)
        lookup = {c: i for i, c in enumerate(self.classes)}
        codes, uniques = _factorize(labels)  # each distinct label looked up once
        text = np.asarray(uniques, dtype=object).astype(str)
        ids = np.array([lookup.get(t, lookup.get(i, -1)) for t, i in zip(text, _integral(text))], np.int64)[codes]
        if (ids < 0).any():
            hint = (
                "declare data.schema.label.classes: [negative, positive], or set train.task: multiclass"
                if self.kind == "binary"
                else "list it in data.schema.label.classes"
            )
            out = ids < 0
            bad.add(rows[out], text[codes][out], f"one of {list(self.classes)[:20]} ({self.kind} task): {hint}")
        return np.maximum(ids, 0).astype(np.int8)

    def known(self, labels: np.ndarray) -> np.ndarray:
        """Whether each class label (text) is one of the classes, as `encode` reads it."""
        text = np.asarray(labels, dtype=object).astype(str)
        classes = [str(c) for c in self.classes]
        return np.isin(text, classes) | np.isin(_integral(text), classes)

    def task(self) -> Task:
        if self.kind == "multiclass":
            return Task("multiclass", len(self.classes))
        return Task(self.kind, clip=self.clip)

    def to_doc(self) -> dict:
        doc = {"column": self.column, **self.task().to_manifest()}
        if self.classes is not None:
            doc["classes"] = list(self.classes)
        return doc


def _factorize(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values) of a label array (pandas' hash table: one pass, no sort)."""
    import pandas as pd

    values = np.asarray(labels, dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes, np.asarray(uniques, dtype=object)


def _integral(text: np.ndarray) -> np.ndarray:
    """Each label text, with an integral number's text as the integer's ('1.0' -> '1', '-0.0' -> '0', '2e1' -> '20');
    every other text as it is. Integers beyond 2**53 are left alone (a float would not hold them exactly)."""
    out = np.array(text, dtype=object)
    for i, t in enumerate(out):
        t = str(t)
        if not t or not (t[0].isdigit() or t[0] in "+-.") or t.lstrip("+-").isdigit() or "_" in t:
            continue
        try:
            v = float(t)
        except ValueError:
            continue
        if v.is_integer() and abs(v) < 2**53:
            out[i] = str(int(v))
    return out


def _distinct(labels: np.ndarray) -> np.ndarray:
    return _factorize(labels)[1]


def _class_order(value: str):
    """Integer class names in numeric order (so '0'..'9' keep their ids), then the others in text order."""
    try:
        return (0, int(value), "")
    except ValueError:
        return (1, 0, value)
