"""A labelled file's rows whose label is blank or outside its task: counted over the whole file, refused in one line.

The leader's training prepare never drops a row for its label. Its shard's ids are the set it brings to the private set
intersection, so a row dropped for its label would leave the intersection, and every follower would learn which of its
ids have a usable label. The label encoder of vfl/data/table.py (a table under its schema, a Criteo party's file
included) records such rows here while the file is read, and prepare then refuses the file in one line: how many rows, the first lines, the first value and the domain.
Nothing is written. Prediction keeps such rows (scored, left out of the metrics only: vfl/data/frozen.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vfl.data.errors import DataError

SHOWN = 5  # the lines a refusal names


class BadLabels:
    """The rows of one file whose label is unusable; `where(row)` names a 0-based data row ('line 7', 'row 6')."""

    def __init__(self, path: str, column: str, where: Callable[[int], str]):
        self.path, self.column, self.where = path, column, where
        self.count = 0
        self.first: list[tuple[int, object]] = []  # (data row, the label as read) of the SHOWN first rows
        self.domain = ""

    def add(self, rows: np.ndarray, values: np.ndarray, domain: str) -> None:
        """Record the data rows `rows` (ascending), whose labels as read are `values`, as outside `domain` (what the
        label must be, with a hint on how to declare it)."""
        rows = np.asarray(rows)
        if rows.size == 0:
            return
        self.count += int(rows.size)
        self.domain = self.domain or domain
        seen = self.first + [(int(r), v) for r, v in zip(rows[:SHOWN], list(values[:SHOWN]))]
        self.first = sorted(seen, key=lambda rv: rv[0])[:SHOWN]  # a block's splits arrive one after another

    def refuse(self) -> None:
        """DataError in one line if any row's label was unusable; nothing otherwise."""
        if not self.count:
            return
        row, value = self.first[0]
        lines = ", ".join(self.where(r) for r, _ in self.first) + (", ..." if self.count > len(self.first) else "")
        raise DataError(
            f"{self.path}: {self.where(row)}: label {self.column!r} is {_shown(value)}, not {self.domain}; "
            f"{self.count} row(s) in all have a blank or invalid label ({lines}): prepare refuses the file rather "
            "than drop them, since a row left out of the shard leaves the private set intersection and tells every "
            "follower which ids have a label; give each a label in the domain, or remove those rows from the file "
            "yourself (the intersection then shows the followers which ids were removed)"
        )


def _shown(value) -> str:
    """A label as read, for the refusal: its text (at most 40 characters), or 'missing' for a NaN number."""
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return "missing or not a number" if np.isnan(value) else f"{float(value):g}"
    return repr(str(value)[:40])
