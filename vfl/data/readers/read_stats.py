"""What one pass of a reader over a file saw: ReadStats, a block's malformed rows (BadRows), the warning naming them.

A malformed row is skipped and counted (an error with --strict); `warn_bad_lines` names the first few by line."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from vfl.data.errors import DataError

MAX_BAD_LINES_NAMED = 5


@dataclass
class BadLine:
    """A malformed line: 0-based line index and why it was rejected."""

    line_index: int
    reason: str


@dataclass
class ReadStats:
    """What a pass over the file saw."""

    lines: int = 0
    good_rows: int = 0
    bad_rows: int = 0
    first_bad: list[BadLine] = field(default_factory=list)
    sha256: str = ""
    bytes_read: int = 0
    has_id_column: bool = False
    ignored_columns: list[str] = field(default_factory=list)  # a table's columns its schema does not declare
    numeric_text: dict = field(default_factory=dict)  # a table's numeric column -> NumericText (readers/table_file.py)


def warn_bad_lines(path: str, stats: ReadStats) -> None:
    """One warning naming the first malformed lines, on stderr."""
    if stats.bad_rows:
        named = ", ".join(f"line {b.line_index + 1} ({b.reason})" for b in stats.first_bad)
        print(f"warning: {path}: skipped {stats.bad_rows} malformed line(s); first: {named}", file=sys.stderr)


class BadRows:
    """The malformed rows of one block: `flag` marks rows with a reason (the first reason of a row is kept);
    `settle` refuses the first with strict, else counts them in the read's stats (the first five kept for the
    warning). Returns the rows to keep."""

    def __init__(self, n: int):
        self.bad = np.zeros(n, bool)
        self.reasons: dict[int, str] = {}

    def flag(self, mask: np.ndarray, why) -> None:
        for r in np.flatnonzero(mask & ~self.bad):
            self.reasons[int(r)] = why(int(r))
        self.bad[mask] = True

    def settle(self, path: str, where: str, row0: int, strict: bool, stats: ReadStats) -> np.ndarray:
        """`where`: how the first bad row is named (its line of a text file, its row of a Parquet file)."""
        if self.bad.any():
            first = min(self.reasons)
            if strict:
                raise DataError(f"{path}: {where}: {self.reasons[first]} (run without --strict to skip malformed rows)")
            stats.bad_rows += int(self.bad.sum())
            room = 5 - len(stats.first_bad)
            stats.first_bad.extend(BadLine(row0 + r + 1, self.reasons[r]) for r in sorted(self.reasons)[: max(room, 0)])
        keep = ~self.bad
        stats.good_rows += int(keep.sum())
        return keep
