"""Streaming reader of a party's own table under its schema: CSV or TSV with a header (.gz too), or Parquet.

Only the declared columns are read (the id, the features, the leader's label), in blocks of CHUNK_ROWS rows, so
memory stays bounded whatever the file's size. Every format yields the same blocks for the same rows:
- the id is text (an integer column's decimal digits), hashed to int64 by vfl/data/ids.py;
- a numeric value is a float; empty, NA, N/A, NaN, null and None are missing (the model sees a missing flag); any
  other text is a bad value: the row is skipped with a warning naming the line and the column (an error with strict);
- a categorical value is any text or integer, keyed to 64 bits under the schema's key scheme (`data.schema.keys`:
  readers/category_keys.py); empty is missing;
- the label is kept as text (classification) or a float (regression), and checked by the label encoder of
  vfl/data/table.py, which names any value outside the task's domain: a row is never dropped for its label.
A column in the file but not declared is ignored (listed in `ReadStats.ignored_columns`); a declared column that
the file lacks is an error naming it and the columns that are there. A text file's delimiter is `data.schema.delimiter`,
or sniffed from the header (tab where it holds one, else the most frequent of comma, semicolon and pipe); a header
that reads as one column is an error naming the delimiter used and the option. A numeric column whose values are
mostly text (more text than numbers) is an error naming it and a few of its values: it is a categorical column. With
strict, a text line whose field count is not the header's (a stray delimiter, in the label or any value) is an error
naming the line and the value; without it, the header's columns of such a line are read and the rest ignored.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from privacy.durable_files import file_sha256
from vfl.config.table_schema import DELIMITERS, SchemaConfig
from vfl.data.errors import DataError
from vfl.data.ids import ids64
from vfl.data.readers import arrow_text
from vfl.data.readers.category_keys import NA_TOKENS, arrow_keys, keys_of
from vfl.data.readers.read_stats import BadRows, ReadStats
from vfl.data.readers.source_file import check_field_counts, missing_columns, open_text, sniff_header, text_frames

CHUNK_ROWS = 100_000
PARQUET_SUFFIXES = (".parquet", ".pq")
SNIFFED = (",", ";", "|")  # without a tab in the header, the most frequent of these (comma on a tie)
EXAMPLES = 5  # the distinct text values a numeric column's refusal shows
NO_TEXT = np.zeros(0, object)


@dataclass
class NumericText:
    """What a numeric column held over a read: its numbers, its text values, and the first distinct texts."""

    numbers: int = 0
    texts: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, numbers: int, texts: np.ndarray) -> None:
        self.numbers += numbers
        self.texts += int(texts.size)
        for t in texts:
            if len(self.examples) >= EXAMPLES:
                break
            if t not in self.examples:
                self.examples.append(str(t)[:40])


@dataclass
class TableBlock:
    """The good rows of one block of a party's table (raw values; vfl/data/table.py transforms them)."""

    row_index: np.ndarray  # int64 (n,): 0-based data row of the file
    sample_id: np.ndarray  # int64 (n,)
    numeric: np.ndarray  # float64 (n, d): NaN where missing
    numeric_missing: np.ndarray  # bool (n, d)
    cat_key: np.ndarray  # uint64 (n, c): 0 where missing
    cat_missing: np.ndarray  # bool (n, c)
    label: np.ndarray | None  # object (n,) of str (classification) or float64 (regression); leader only


def is_parquet(path: str) -> bool:
    return path.lower().endswith(PARQUET_SUFFIXES)


def delimiter_name(sep: str) -> str:
    return {v: k for k, v in DELIMITERS.items()}.get(sep, repr(sep))


def table_header(path: str, delimiter: str | None = None) -> tuple[str, list[str]]:
    """(delimiter, column names) of a text table's header: `delimiter` (data.schema.delimiter) where given, else
    tab where the header holds one, else the most frequent of comma, semicolon and pipe (comma on a tie)."""
    if delimiter is None:
        with open_text(path) as f:
            first = f.readline(1 << 20)
        delimiter = "\t" if "\t" in first else max(SNIFFED, key=lambda c: (first.count(c), -SNIFFED.index(c)))
    return sniff_header(path, delimiter)


def columns_of(path: str, delimiter: str | None = None) -> list[str]:
    """The column names of a table: a Parquet file's schema, a text file's header."""
    if is_parquet(path):
        import pyarrow.parquet as pq

        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise DataError(f"{path} is not a readable Parquet file: {' '.join(str(e).split())[:200]}") from None
    return table_header(path, delimiter)[1]


def check_columns(path: str, schema: SchemaConfig, labelled: bool) -> list[str]:
    """The file's columns that the schema does not declare (ignored); DataError naming each declared one it lacks."""
    if not os.path.exists(path):
        raise DataError(f"input file not found: {path}")
    have = columns_of(path, schema.delimiter)
    if len(have) == 1 and not is_parquet(path) and (schema.columns or schema.label is not None):
        sep = table_header(path, schema.delimiter)[0]
        how = "data.schema.delimiter" if schema.delimiter is not None else "sniffed"
        raise DataError(
            f"{path}: the header reads as one column {have[0][:80]!r} with the {delimiter_name(sep)} delimiter "
            f"{sep!r} ({how}); set data.schema.delimiter to the file's delimiter (one of "
            f"{list(DELIMITERS.values())}, or its name: {', '.join(DELIMITERS)})"
        )
    errors = missing_columns(path, [schema.id], have, "id")
    for kind in ("numeric", "categorical"):
        errors += missing_columns(path, list(schema.names(kind)), have, kind)
    if labelled:
        errors += missing_columns(path, [schema.label.column], have, "label")
    if errors:
        raise DataError("; ".join(errors))
    used = {schema.id, *schema.columns, *([schema.label.column] if labelled else [])}
    return [c for c in have if c not in used]


def read_table_blocks(
    path: str,
    schema: SchemaConfig,
    labelled: bool,
    regression: bool,
    strict: bool,
    stats: ReadStats,
    chunk_rows: int = CHUNK_ROWS,
    digest: bool = True,
    id_cache: IdCache | None = None,
) -> Iterator[TableBlock]:
    """Yield the good rows of a party's table block by block; bad numeric values skip their row (raise with strict).

    A CSV/TSV is read by pyarrow and parsed by whole columns (readers/arrow_text.py); a block with a bad value, and a
    file pyarrow cannot read, take the pandas text path, so every path gives the same blocks, warnings and errors.
    digest=False leaves out the file's sha256 (a first pass that only fits); id_cache keeps the ids of a first pass
    for the second (hashing text ids is the dearest step of a block)."""
    stats.ignored_columns = check_columns(path, schema, labelled)
    stats.has_id_column = True
    sha = None  # the source digest names the labelled dataset (label-DP ledger)
    if digest:
        sha = file_sha256(path, on_block=lambda n: setattr(stats, "bytes_read", stats.bytes_read + n))
    else:
        stats.bytes_read += os.path.getsize(path)
    cols = [schema.id, *schema.columns, *([schema.label.column] if labelled else [])]
    rows = 0
    skip = 0
    if not is_parquet(path):
        sep, names = table_header(path, schema.delimiter)
        if arrow_text.usable(path, names):
            try:
                for row0, table in arrow_text.text_tables(path, sep, names, cols, chunk_rows):
                    block = _arrow_block(schema, labelled, regression, table, row0, stats, id_cache)
                    if block is None:
                        frame = arrow_text.text_frame(table)
                        yield from _block(path, schema, labelled, regression, frame, row0, strict, stats)
                    else:
                        yield block
                    rows = row0 + table.num_rows
            except arrow_text.ArrowTextFailed as e:
                skip = e.row0  # pandas reads the rest (and names a bad line as it always did)
            else:
                return _finish(path, stats, rows, sha)
    if strict and not is_parquet(path):  # pandas reads the header's columns of a longer line and drops the rest
        sep, names = table_header(path, schema.delimiter)
        check_field_counts(path, sep, names, schema.label.column if schema.label is not None else None)
    for row0, frame in _frames(path, cols, chunk_rows, skip, schema.delimiter):
        yield from _block(path, schema, labelled, regression, frame, row0, strict, stats)
        rows = row0 + len(frame)
    _finish(path, stats, max(rows, skip), sha)


def _finish(path: str, stats: ReadStats, rows: int, sha: str | None) -> None:
    stats.lines = rows + 1
    stats.sha256 = sha or ""
    for name, seen in stats.numeric_text.items():  # a text column declared numeric: its rows were skipped
        if seen.texts > seen.numbers:
            raise DataError(
                f"{path}: column {name!r} is declared numeric but holds text: {seen.texts} of "
                f"{seen.texts + seen.numbers} values are not numbers (e.g. {', '.join(map(repr, seen.examples))}); "
                f"declare it categorical (data.schema.columns.{name}: categorical), or fix the values"
            )
    if stats.good_rows == 0:
        first = (
            f"; first: line {stats.first_bad[0].line_index + 1}: {stats.first_bad[0].reason}" if stats.first_bad else ""
        )
        raise DataError(f"{path}: no usable rows ({stats.bad_rows} malformed rows{first})")


class IdCache:
    """The int64 ids of a file's blocks from one pass to the next (at most MAX_ROWS ids, 8 bytes each)."""

    MAX_ROWS = 1 << 24

    def __init__(self):
        self.blocks: dict[int, np.ndarray] = {}
        self.rows = 0

    def get(self, row0: int, n: int, compute) -> np.ndarray:
        hit = self.blocks.pop(row0, None)
        if hit is not None and hit.size == n:
            return hit
        ids = compute()
        if self.rows + n <= self.MAX_ROWS:
            self.blocks[row0] = ids
            self.rows += n
        return ids


def _arrow_block(schema, labelled, regression, table, row0, stats, id_cache=None) -> TableBlock | None:
    """The block of a text table with every value parsed by whole columns; None if any row is bad (the text path
    names it) or a value needs the text path."""
    n = table.num_rows
    id_text = arrow_text.strip(arrow_text.column(table, schema.id))
    if (arrow_text.lengths(id_text) == 0).any():
        return None
    numeric_names, cat_names = schema.names("numeric"), schema.names("categorical")
    numeric = np.empty((n, len(numeric_names)))
    nmiss = np.empty((n, len(numeric_names)), bool)
    for j, c in enumerate(numeric_names):
        got = arrow_text.parsed(arrow_text.column(table, c), NA_TOKENS, np.nan)  # NaN where missing
        if got is None or not (np.isfinite(got[0]) | got[1]).all():
            return None
        numeric[:, j], nmiss[:, j] = got
    keys = np.zeros((n, len(cat_names)), np.uint64)
    cmiss = np.zeros((n, len(cat_names)), bool)
    for j, c in enumerate(cat_names):
        keys[:, j], cmiss[:, j] = arrow_keys(arrow_text.column(table, c), schema.keys)
    label = None
    if labelled:
        text = arrow_text.column(table, schema.label.column)
        if regression:
            got = arrow_text.parsed(text, NA_TOKENS, np.nan)
            if got is None:
                return None
            label = got[0]
        else:
            values, idx = arrow_text.distinct(text, stripped=True)
            label = values[idx]
    stats.good_rows += n
    present = n - np.count_nonzero(nmiss, axis=0)
    for j, c in enumerate(numeric_names):  # every value of the block is a number or missing
        stats.numeric_text.setdefault(c, NumericText()).add(int(present[j]), NO_TEXT)
    return TableBlock(
        row_index=row0 + np.arange(n, dtype=np.int64),
        sample_id=arrow_text.ids(id_text)
        if id_cache is None
        else id_cache.get(row0, n, lambda: arrow_text.ids(id_text)),
        numeric=numeric,
        numeric_missing=nmiss,
        cat_key=keys,
        cat_missing=cmiss,
        label=label,
    )


def _frames(path: str, cols: list[str], chunk_rows: int, skip: int = 0, delimiter: str | None = None):
    """(row0, pandas DataFrame of `cols` as text (numbers of a Parquet file included)), chunk by chunk, from data
    row `skip` on (a multiple of chunk_rows)."""
    import pandas as pd

    if is_parquet(path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        f = pq.ParquetFile(path)
        for name in cols:
            t = f.schema_arrow.field(name).type
            if not (
                pa.types.is_integer(t)
                or pa.types.is_floating(t)
                or pa.types.is_string(t)
                or pa.types.is_large_string(t)
                or pa.types.is_boolean(t)
                or pa.types.is_dictionary(t)
            ):
                raise DataError(
                    f"{path}: column {name!r} has Parquet type {t}; allowed: integers, floats, booleans and strings"
                )
        row0 = 0
        for batch in f.iter_batches(batch_size=chunk_rows, columns=cols):
            yield row0, pd.DataFrame({name: _parquet_text(batch.column(name)) for name in cols})
            row0 += batch.num_rows
        return
    sep, _ = table_header(path, delimiter)
    yield from text_frames(path, sep, cols, chunk_rows, skip)


def _parquet_text(column) -> np.ndarray:
    """A Parquet column as the text a CSV would hold: integers as digits, floats as repr, null as ''."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_floating(column.type):
        values = column.to_numpy(zero_copy_only=False)
        out = np.array([repr(float(v)) if v == v else "" for v in values], dtype=object)
        return out
    text = pc.cast(column, pa.string()) if not pa.types.is_string(column.type) else column
    return np.asarray(text.fill_null("").to_numpy(zero_copy_only=False), dtype=object)


def _block(path, schema, labelled, regression, df, row0, strict, stats) -> Iterator[TableBlock]:
    import pandas as pd

    n = len(df)
    rows = BadRows(n)
    flag = rows.flag
    id_text = df[schema.id].str.strip().to_numpy()
    flag(id_text == "", lambda r: f"empty {schema.id}")
    numeric_names, cat_names = schema.names("numeric"), schema.names("categorical")
    numeric = np.full((n, len(numeric_names)), np.nan)
    nmiss = np.zeros((n, len(numeric_names)), bool)
    for j, c in enumerate(numeric_names):
        text = df[c].str.strip()
        miss = text.isin(NA_TOKENS).to_numpy()
        vals = pd.to_numeric(text.where(~miss, "0"), errors="coerce").to_numpy(dtype=float)
        not_number = ~np.isfinite(vals) & ~miss
        flag(not_number, lambda r, c=c, t=text: f"{c} is not a finite number ({t.iloc[r][:40]!r})")
        stats.numeric_text.setdefault(c, NumericText()).add(
            int((~not_number & ~miss).sum()), text.to_numpy(dtype=object)[not_number]
        )
        numeric[:, j] = np.where(miss, np.nan, vals)
        nmiss[:, j] = miss
    keys = np.zeros((n, len(cat_names)), np.uint64)
    cmiss = np.zeros((n, len(cat_names)), bool)
    for j, c in enumerate(cat_names):
        raw = df[c].to_numpy() if schema.keys == "hex" else df[c].str.strip().to_numpy()  # hex strips distinct values
        keys[:, j], cmiss[:, j] = keys_of(raw, schema.keys)
    label = None
    if labelled:
        text = df[schema.label.column].str.strip()
        label = text.to_numpy(dtype=object)
        if regression:
            label = pd.to_numeric(text.where(~text.isin(NA_TOKENS), "nan"), errors="coerce").to_numpy(dtype=float)
    keep = rows.settle(path, line_of(path, row0 + min(rows.reasons, default=0)), row0, strict, stats)
    if not keep.any():
        return
    yield TableBlock(
        row_index=row0 + np.flatnonzero(keep).astype(np.int64),
        sample_id=ids64(id_text[keep]),
        numeric=numeric[keep],
        numeric_missing=nmiss[keep],
        cat_key=keys[keep],
        cat_missing=cmiss[keep],
        label=label[keep] if label is not None else None,
    )


def line_of(path: str, row: int) -> str:
    """Where a 0-based data row is: a line of a text file (the header is line 1), a row of a Parquet file."""
    return f"row {row + 1}" if is_parquet(path) else f"line {row + 2}"
