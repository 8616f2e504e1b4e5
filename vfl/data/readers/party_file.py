"""Streaming reader of one party's own raw file: a header line, an id column, its columns, the label (leader only).

TSV or CSV (the header's first tab decides; .gz is read directly), read in bounded chunks with
every value as text. Dense values must be numbers (empty = missing); categorical values are keyed
exactly as the combined-file tokenizer keys them (8 hex digits -> their value, other text -> a
CRC-based key above 2**32), so a party's shard equals the one the combined path would give; the
label must be 0 or 1 (a class id 0..K-1). A row with a bad feature value or id is skipped with a warning naming its
line (an error with strict); a line with the wrong number of fields is an error. A row is never skipped for its label:
a file with a blank or invalid label is refused once it has been read (vfl/data/bad_labels.py), and prediction reads
the label as text (label_text), unchecked.
"""

from __future__ import annotations

import csv
import hashlib
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from vfl.data.bad_labels import BadLabels
from vfl.data.errors import DataError
from vfl.data.ids import ids64
from vfl.data.readers import arrow_text
from vfl.data.readers.read_stats import BadLine, ReadStats
from vfl.data.readers.source_file import missing_columns, sniff_header

CHUNK_ROWS = 100_000
_HEX8 = re.compile(r"^[0-9a-fA-F]{8}$")
_NON_HEX_KEY_BASE = 1 << 32


@dataclass(frozen=True)
class PartySource:
    """Which columns of a party's raw file to read."""

    path: str
    dense: tuple[str, ...]
    categorical: tuple[str, ...]
    label: bool
    id_column: str = "id"
    label_column: str = "label"
    num_classes: int = 2  # 2: the label is 0 or 1; K > 2: class ids 0..K-1
    label_text: bool = False  # the label as its stripped text, never checked: no row is skipped for it (prediction)


@dataclass
class PartyBlock:
    """The good rows of one chunk of a party's file."""

    row_index: np.ndarray  # int64 (n,), 0-based data row of the file (the truth file is indexed by it)
    sample_id: np.ndarray  # int64 (n,), see vfl/data/ids.py
    label: np.ndarray | None  # int8 (n,), labelled party only (object (n,) of str with PartySource.label_text)
    dense: np.ndarray  # float64 (n, d), 0 where missing
    dense_missing: np.ndarray  # bool (n, d)
    cat_key: np.ndarray  # uint64 (n, c), 0 where missing
    cat_missing: np.ndarray  # bool (n, c)

    @property
    def numeric(self) -> np.ndarray:
        """The dense values under the table block's name (vfl/data/table.py's FittedTable reads either block)."""
        return self.dense

    @property
    def numeric_missing(self) -> np.ndarray:
        return self.dense_missing


def _cat_keys(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint64 keys and missing flags of one categorical column (text values)."""
    uniq, inv = np.unique(values.astype(str), return_inverse=True)
    keys = np.empty(uniq.size, np.uint64)
    miss = np.zeros(uniq.size, bool)
    for i, t in enumerate(uniq):
        if t == "":
            keys[i], miss[i] = 0, True
        elif _HEX8.match(t):
            keys[i] = int(t, 16)
        else:
            keys[i] = _NON_HEX_KEY_BASE + zlib.crc32(t.encode("utf-8", "surrogateescape"))
    return keys[inv], miss[inv]


def read_party_blocks(
    src: PartySource, strict: bool, stats: ReadStats, chunk_rows: int = CHUNK_ROWS, digest: bool = True
) -> Iterator[PartyBlock]:
    """Yield the parsed good rows of a party file, chunk by chunk; bad rows are counted (or raise with strict). A
    blank or invalid label skips no row: once the file is read, it is refused naming them (vfl/data/bad_labels.py).

    pyarrow reads the file and parses whole columns at once (readers/arrow_text.py); a block with a bad value, and
    a file pyarrow cannot read, take the pandas text path below, so both give the same blocks, warnings and errors.
    digest=False leaves out the file's sha256 (a first pass that only counts)."""
    sep, names = sniff_header(src.path)
    errors = missing_columns(src.path, [src.id_column], names, "id")
    errors += missing_columns(src.path, list(src.dense), names, "dense")
    errors += missing_columns(src.path, list(src.categorical), names, "categorical")
    if src.label:
        errors += missing_columns(src.path, [src.label_column], names, "label")
    if errors:
        raise DataError("; ".join(errors))
    stats.has_id_column = True
    sha = hashlib.sha256() if digest else None
    with open(src.path, "rb") as f:  # the source digest names the labelled dataset (label-DP ledger)
        for chunk in iter(lambda: f.read(1 << 20), b""):
            if sha is not None:
                sha.update(chunk)
            stats.bytes_read += len(chunk)
    cols = [src.id_column, *src.dense, *src.categorical, *([src.label_column] if src.label else [])]
    bad_labels = BadLabels(src.path, src.label_column, lambda r: f"line {r + 2}")
    row0 = 0
    if arrow_text.usable(src.path, names):
        try:
            for row0, table in arrow_text.text_tables(src.path, sep, names, cols, chunk_rows):
                block = _arrow_block(src, table, row0, stats)
                if block is None:
                    yield from _block(src, arrow_text.text_frame(table), row0, strict, stats, bad_labels)
                elif block.row_index.size:
                    yield block
                row0 += table.num_rows
        except arrow_text.ArrowTextFailed as e:
            row0 = e.row0  # pandas reads the rest (and names a bad line as it always did)
        else:
            return _finish(src, stats, row0, sha, bad_labels)
    read = [0]
    yield from _pandas_blocks(src, sep, cols, row0, strict, stats, chunk_rows, read, bad_labels)
    _finish(src, stats, read[0], sha, bad_labels)


def _finish(src: PartySource, stats: ReadStats, rows: int, sha, bad_labels: BadLabels) -> None:
    bad_labels.refuse()
    stats.lines = rows + 1
    stats.sha256 = sha.hexdigest() if sha is not None else ""
    if stats.good_rows == 0:
        raise DataError(f"{src.path}: no usable rows ({stats.bad_rows} malformed rows)")


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


def _pandas_blocks(src, sep, cols, skip: int, strict: bool, stats: ReadStats, chunk_rows: int, read: list, bad_labels):
    """The text path: pandas' C parser, every value as text; the first `skip` data rows were read already
    (read[0]: the data rows of the file)."""
    for row0, part in text_frames(src.path, sep, cols, chunk_rows, skip, read):
        yield from _block(src, part, row0, strict, stats, bad_labels)


def _arrow_block(src: PartySource, table, row0: int, stats: ReadStats) -> PartyBlock | None:
    """The block of a text table with every value parsed by whole columns; None if any row is bad (the text path
    names it) or a value needs the text path."""
    n = table.num_rows
    id_text = arrow_text.strip(arrow_text.column(table, src.id_column))
    if (arrow_text.lengths(id_text) == 0).any():
        return None
    dense = np.zeros((n, len(src.dense)))
    dmiss = np.zeros((n, len(src.dense)), bool)
    for j, c in enumerate(src.dense):
        got = arrow_text.parsed(arrow_text.column(table, c), None, 0.0)
        if got is None or not np.isfinite(got[0]).all():
            return None
        vals, miss = got
        dense[:, j] = vals
        dmiss[:, j] = miss
    keys = np.zeros((n, len(src.categorical)), np.uint64)
    cmiss = np.zeros((n, len(src.categorical)), bool)
    for j, c in enumerate(src.categorical):
        keys[:, j], cmiss[:, j] = _arrow_cat_keys(arrow_text.column(table, c))
    label = None
    if src.label:
        lab = arrow_text.column(table, src.label_column)
        if src.label_text:
            values, idx = arrow_text.distinct(lab, stripped=True)
            label = values[idx]
        elif src.num_classes == 2:
            values, idx = arrow_text.distinct(lab, stripped=True)
            if not np.isin(values, ["0", "1"]).all():
                return None
            label = (values == "1")[idx].astype(np.int8)
        else:
            values, idx = arrow_text.distinct(lab, stripped=True)
            cls = np.array([int(v) if re.fullmatch(r"[0-9]{1,3}", v) else -1 for v in values], dtype=np.int64)
            if not ((cls >= 0) & (cls < src.num_classes)).all():
                return None
            label = cls[idx].astype(np.int8)
    stats.good_rows += n
    return PartyBlock(
        row_index=row0 + np.arange(n, dtype=np.int64),
        sample_id=arrow_text.ids(id_text),
        label=label,
        dense=dense,
        dense_missing=dmiss,
        cat_key=keys,
        cat_missing=cmiss,
    )


def _arrow_cat_keys(arr) -> tuple[np.ndarray, np.ndarray]:
    """_cat_keys of a text column, each distinct value keyed once (8 hex digits vectorized)."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    ok, value = arrow_text.hex8(enc.dictionary)
    keys = value.copy()
    miss = np.zeros(keys.size, bool)
    if not ok.all():  # as _cat_keys keys them
        values = enc.dictionary.to_pylist()
        for i in np.flatnonzero(~ok):
            t = values[i]
            if t == "":
                keys[i], miss[i] = 0, True
            elif _HEX8.match(t):
                keys[i] = int(t, 16)
            else:
                keys[i] = _NON_HEX_KEY_BASE + zlib.crc32(t.encode("utf-8", "surrogateescape"))
    idx = enc.indices.to_numpy(zero_copy_only=False)
    return keys[idx], miss[idx]


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


def _block(
    src: PartySource, df, row0: int, strict: bool, stats: ReadStats, bad_labels: BadLabels
) -> Iterator[PartyBlock]:
    import pandas as pd

    n = len(df)
    rows = BadRows(n)
    flag = rows.flag
    id_text = df[src.id_column].str.strip().to_numpy()
    flag(id_text == "", lambda r: f"empty {src.id_column}")
    dense = np.zeros((n, len(src.dense)))
    dmiss = np.zeros((n, len(src.dense)), bool)
    for j, c in enumerate(src.dense):
        text = df[c].str.strip()
        miss = (text == "").to_numpy()
        vals = pd.to_numeric(text.where(~miss, "0"), errors="coerce").to_numpy(dtype=float)
        flag(~np.isfinite(vals), lambda r, c=c: f"{c} is not a number")
        dense[:, j] = np.where(np.isfinite(vals) & ~miss, vals, 0.0)
        dmiss[:, j] = miss
    keys = np.zeros((n, len(src.categorical)), np.uint64)
    cmiss = np.zeros((n, len(src.categorical)), bool)
    for j, c in enumerate(src.categorical):
        keys[:, j], cmiss[:, j] = _cat_keys(df[c].to_numpy())
    label = None
    if src.label:
        lab = df[src.label_column].str.strip()
        if src.label_text:
            label = lab.to_numpy(dtype=object)
        elif src.num_classes == 2:
            lab = lab.to_numpy()
            ok = (lab == "0") | (lab == "1")
            bad_labels.add(row0 + np.flatnonzero(~ok), lab[~ok], "0 or 1")
            label = (lab == "1").astype(np.int8)
        else:
            k = src.num_classes
            text = lab.to_numpy()
            cls = pd.to_numeric(lab.where(lab.str.fullmatch(r"\d{1,3}"), "-1"), errors="coerce").to_numpy()
            ok = (cls >= 0) & (cls < k)
            bad_labels.add(row0 + np.flatnonzero(~ok), text[~ok], f"a class id in [0, {k - 1}]")
            label = np.where(ok, cls, 0).astype(np.int8)
    first = min(rows.reasons) if rows.reasons else 0
    keep = rows.settle(src.path, f"line {row0 + first + 2}", row0, strict, stats)
    if not keep.any():
        return
    yield PartyBlock(
        row_index=row0 + np.flatnonzero(keep).astype(np.int64),
        sample_id=ids64(id_text[keep]),
        label=label[keep] if label is not None else None,
        dense=dense[keep],
        dense_missing=dmiss[keep],
        cat_key=keys[keep],
        cat_missing=cmiss[keep],
    )
