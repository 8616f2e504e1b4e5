"""What one pass of a reader over a file saw (ReadStats, its BadLines), and the one warning naming its malformed lines."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

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
