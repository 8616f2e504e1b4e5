"""A party's raw file opened (plain or .gz, as bytes or text) and its header read: what every reader shares.

`text_frames` reads its columns as text with pandas' C parser, chunk by chunk (the readers' text path); that parser
reads the declared columns of a line with more fields than the header and drops the rest unseen, so `--strict` first
checks every line's field count (`check_field_counts`). Also the one-line errors for a declared column the header lacks (with the nearest name), and the id texts behind a
duplicate int64 id (both texts named, e.g. '7' and '007').
"""

from __future__ import annotations

import csv
import difflib
import gzip
import io
import os
import zlib

from vfl.data.errors import DataError
from vfl.data.ids import id64_of_text


def open_binary(path: str):
    """The file at path as bytes (a .gz decompressed); DataError when it is missing or a directory."""
    if not os.path.exists(path):
        raise DataError(f"input file not found: {path}")
    if os.path.isdir(path):
        raise DataError(f"input must be a file, got a directory: {path}")
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def open_text(path: str):
    """The file at path as UTF-8 text (undecodable bytes kept as surrogates, newlines untranslated)."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="surrogateescape", newline="")


def sniff_header(path: str, sep: str | None = None) -> tuple[str, list[str]]:
    """(delimiter, column names) of a party file's header line; the delimiter `sep`, or (None) tab where the header
    holds one, else comma."""
    with open_text(path) as f:
        first = f.readline(1 << 20)
    if not first.strip():
        raise DataError(f"input file is empty: {path}")
    sep = sep or ("\t" if "\t" in first else ",")
    names = next(
        csv.reader([first.rstrip("\r\n")], delimiter=sep, quoting=csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL)
    )
    names = [n.strip() for n in names]
    if names and names[0].startswith("\ufeff"):  # a UTF-8 byte-order mark (Excel's "CSV UTF-8") is not a name
        names[0] = names[0][1:].strip()
    if len(set(names)) != len(names):
        raise DataError(f"{path}: the header names a column twice: {names}")
    return sep, names


def text_frames(path: str, sep: str, cols: list[str], chunk_rows: int, skip: int = 0, read: list | None = None):
    """(first data row, DataFrame of `cols`, every value as text) chunk by chunk with pandas' C parser, from data row
    `skip` on (the rows before were read already); read[0] follows the data rows read. A parse error is a DataError
    naming the file."""
    import pandas as pd

    row0 = 0
    try:
        reader = pd.read_csv(
            path,
            sep=sep,
            dtype=str,
            usecols=cols,
            keep_default_na=False,
            na_filter=False,
            chunksize=chunk_rows,
            quoting=csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL,
            encoding="utf-8-sig",  # utf-8, a leading byte-order mark dropped
            encoding_errors="surrogateescape",
            compression="infer",
            engine="c",
        )
        for df in reader:
            if row0 + len(df) > skip:
                part = df.iloc[max(skip - row0, 0) :].reset_index(drop=True)
                yield row0 + len(df) - len(part), part
            row0 += len(df)
            if read is not None:
                read[0] = row0
    except (pd.errors.ParserError, UnicodeDecodeError, EOFError, OSError, zlib.error) as e:
        raise DataError(f"{path}: {' '.join(str(e).split())[:300]}") from None


def check_field_counts(path: str, sep: str, names: list[str], label: str | None = None) -> None:
    """DataError naming the first data line whose field count is not the header's (a stray delimiter in a value: the
    line, its count, the label column's text (`label`) or the first surplus field, and the line itself); blank lines
    are skipped, as the readers skip them. Quoting as the readers read it: none in a TSV, CSV's double quotes else."""
    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    with open_text(path) as f:
        reader = csv.reader(f, delimiter=sep, quoting=quoting)
        try:
            next(reader, None)  # the header
            for fields in reader:
                if not fields or len(fields) == len(names):
                    continue
                where = names.index(label) if label in names else None
                if where is not None and where < len(fields):
                    what = f"label {label!r} reads {fields[where][:40]!r}"
                else:
                    what = (
                        f"field {len(names) + 1} reads {fields[len(names)][:40]!r}" if len(fields) > len(names) else ""
                    )
                shown = sep.join(fields)
                raise DataError(
                    f"{path}: line {reader.line_num}: {len(fields)} fields where the header names {len(names)} "
                    f"(a stray {sep!r} in a value?{'; ' + what if what else ''}): "
                    f"{shown[:80]!r}{'...' if len(shown) > 80 else ''} (run without --strict to read the header's "
                    "columns of each line and ignore the rest)"
                )
        except csv.Error as e:
            raise DataError(f"{path}: line {reader.line_num}: {e}") from None


def missing_columns(path: str, want: list[str], have: list[str], what: str) -> list[str]:
    """One error line per column of `want` that the header `have` lacks, naming the nearest header name."""
    errors = []
    for c in want:
        if c not in have:
            same_case = [h for h in have if h.lower() == c.lower()]
            near = same_case or difflib.get_close_matches(c, have, n=1)
            errors.append(
                f"{what} column {c!r} is not in the header of {path}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; the header has {have[:50]}"
            )
    return errors


def id_texts(path: str, id_column: str, id64: int) -> str | None:
    """The id texts of a text file's id column that map to id64 (for the duplicate-id error message)."""
    import pandas as pd

    sep, _ = sniff_header(path)
    found = []
    for df in pd.read_csv(
        path,
        sep=sep,
        dtype=str,
        usecols=[id_column],
        keep_default_na=False,
        chunksize=200_000,
        quoting=3 if sep == "\t" else 0,
        encoding_errors="surrogateescape",
    ):
        for t in df[id_column]:
            if id64_of_text(t) == id64:
                found.append(t)
    found = list(dict.fromkeys(found))
    return " = ".join(repr(t) for t in found[:3]) if found else None
