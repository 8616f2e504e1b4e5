"""Raw Criteo lines written by hand: one line from its fields, and a file of such lines."""

from __future__ import annotations

import os


def write_lines(path: os.PathLike, lines: list[str]) -> str:
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)


def raw_line(label="0", ints=None, cats=None) -> str:
    """A raw Criteo line: label, 13 ints, 26 categoricals ('' = missing)."""
    ints = ints if ints is not None else ["1"] * 13
    cats = cats if cats is not None else ["68fd1e64"] * 26
    return "\t".join([label, *ints, *cats])
