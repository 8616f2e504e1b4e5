"""The fast path of the table reader (table_file): pyarrow's CSV reader and vectorized parsing.

Every function here gives exactly what the pandas text path gives for the same values, or says it cannot (None, or
ArrowTextFailed), and the caller then takes the pandas text path for that block (or, for a file pyarrow cannot
tokenize, for the rest of the file). So the shards, the warnings and the errors are those of the text path:
- `text_tables` streams the declared columns of a CSV/TSV (plain or .gz) as arrow strings, in tables of exactly
  chunk_rows rows (block boundaries never change a shard);
- `numbers` parses a column as pandas.to_numeric would (its precise_xstrtod and pyarrow's correctly rounded parser
  agree on every value of at most 15 characters whose magnitude is 0 or in [1e-8, 1e15); any other value, rare in
  real tables, is parsed by pandas itself);
- `ids` turns an id column into vfl/data/ids.py's int64 ids (decimal integers vectorized, other text hashed once
  per row);
- `distinct` dictionary-encodes a column so a categorical key is computed once per distinct value.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator

import numpy as np

from vfl.data.ids import ID_DOMAIN, INT64_MAX, INT64_MIN, id64_of_text

READ_BLOCK_BYTES = 1 << 22
_EXACT_LEN = 15  # at most 15 characters: <= 15 digits and a power of ten of at most 15 (exact in a double)
_INT_RE = r"^[+-]?[0-9]+$"
_INT = re.compile(_INT_RE)


class ArrowTextFailed(Exception):
    """pyarrow could not read the file from data row `row0` on (the caller reads the rest with pandas)."""

    def __init__(self, row0: int):
        super().__init__(row0)
        self.row0 = row0


ENABLED = True  # False: every block takes the pandas text path (tests compare the two)


def usable(path: str, names: list[str]) -> bool:
    """Whether the fast reader applies: a plain or .gz text file whose header names need no stripping."""
    if not ENABLED:
        return False
    lower = path.lower()
    compressed = lower.endswith((".bz2", ".zip", ".xz", ".zst", ".tar", ".lz4", ".z"))
    return not compressed and all(n == n.strip() and n for n in names) and os.path.isfile(path)


def text_tables(path: str, sep: str, names: list[str], cols: list[str], chunk_rows: int) -> Iterator[tuple]:
    """(row0, pyarrow Table of `cols` as strings, exactly chunk_rows rows but the last) of a CSV/TSV file.

    Raises ArrowTextFailed(row0) where pyarrow fails (a bad line, invalid UTF-8): rows from row0 on were not given."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    row0 = 0
    pending: list = []
    held = 0
    try:
        reader = pcsv.open_csv(
            pa.input_stream(path, compression="gzip" if path.lower().endswith(".gz") else None),
            read_options=pcsv.ReadOptions(block_size=READ_BLOCK_BYTES, column_names=names, skip_rows=1),
            parse_options=pcsv.ParseOptions(delimiter=sep, quote_char=False if sep == "\t" else '"'),
            convert_options=pcsv.ConvertOptions(
                column_types={c: pa.string() for c in cols},
                include_columns=cols,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
            ),
        )
        for batch in reader:
            if batch.num_rows == 0:
                continue
            pending.append(batch)
            held += batch.num_rows
            while held >= chunk_rows:
                table = pa.Table.from_batches(pending)
                yield row0, table.slice(0, chunk_rows)
                row0 += chunk_rows
                rest = table.slice(chunk_rows)
                pending, held = rest.to_batches(), rest.num_rows
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError, EOFError) as e:
        raise ArrowTextFailed(row0) from e
    if held:
        yield row0, pa.Table.from_batches(pending)


def column(table, name: str):
    """One column of a text table as a single arrow array."""
    return table.column(name).combine_chunks()


def text_frame(table):
    """The pandas DataFrame that pandas.read_csv(dtype=str) gives for the same rows (for the text path)."""
    import pandas as pd

    return pd.DataFrame(
        {
            n: pd.Series(np.asarray(table.column(n).to_numpy(zero_copy_only=False), dtype=object), dtype="str")
            for n in table.column_names
        }
    )


def strip(arr):
    import pyarrow.compute as pc

    return pc.utf8_trim_whitespace(arr)


def lengths(arr) -> np.ndarray:
    """The byte length of each value of an arrow string array (from its offsets, no copy of the text)."""
    return np.diff(np.asarray(arr.buffers()[1]).view(np.int32)[arr.offset : arr.offset + len(arr) + 1])


_SETS: dict = {}


def in_set(arr, tokens: tuple[str, ...]) -> np.ndarray:
    """Whether each value of an arrow string array is one of `tokens`: an empty value by its length, the others looked
    up only where a token's length and first byte match (numbers, the usual values, never do)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lookup = _SETS.get(tokens)
    if lookup is None:
        encoded = [t.encode() for t in tokens if t]
        token_length = np.zeros(max(map(len, encoded), default=0) + 2, bool)  # by length (the last: longer)
        token_length[[len(t) for t in encoded]] = True
        first_byte = np.zeros(256, bool)
        first_byte[[t[0] for t in encoded]] = True
        lookup = _SETS[tokens] = (pc.SetLookupOptions(pa.array(list(tokens), pa.string())), token_length, first_byte)
    options, token_length, first_byte = lookup
    n = len(arr)
    size = lengths(arr)
    out = (size == 0) if "" in tokens else np.zeros(n, bool)
    maybe = token_length[np.minimum(size, token_length.size - 1)]
    if maybe.any():
        rows = np.flatnonzero(maybe)
        starts = np.asarray(arr.buffers()[1]).view(np.int32)[arr.offset + rows]
        maybe[rows] = first_byte[np.frombuffer(arr.buffers()[2], np.uint8)[starts]]
    if maybe.any():
        rows = np.flatnonzero(maybe)
        out[rows] = pc.is_in(arr.take(pa.array(rows)), options=options).to_numpy(zero_copy_only=False)
    return out


def numbers(arr, missing: np.ndarray, missing_as: float) -> np.ndarray | None:
    """float64 values of a (stripped) text column as pandas.to_numeric(errors="coerce") gives them, with missing
    rows read as `missing_as`; None where pyarrow refuses a value (the caller parses the block as text)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    fill = "0" if missing_as == 0.0 else "nan"
    text = pc.if_else(pa.array(missing), pa.scalar(fill, pa.string()), arr) if missing.any() else arr
    try:
        vals = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False).copy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    size = np.abs(vals)
    length = lengths(text)
    risky = ((length > _EXACT_LEN) | ~((size == 0.0) | ((size >= 1e-8) & (size < 1e15)))) & ~missing
    if risky.any():
        rows = np.flatnonzero(risky)
        some = pd.Series(np.asarray(text.take(pa.array(rows)).to_pylist(), dtype=object), dtype="str")
        vals[rows] = pd.to_numeric(some, errors="coerce").to_numpy(dtype=float)
    if missing.any():
        vals[missing] = missing_as
    return vals


def parsed(arr, na_tokens: tuple[str, ...] | None, missing_as: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(numbers(...), missing) of a raw text column as the text path reads it: stripped, then missing where empty
    (na_tokens None) or an NA token. The raw text is tried first: pyarrow's parser refuses any whitespace, so when
    it accepts every value, stripping would change none; otherwise the stripped text. None: the text path decides."""
    for text in (arr, None):
        text = strip(arr) if text is None else text
        miss = lengths(text) == 0 if na_tokens is None else in_set(text, na_tokens)
        vals = numbers(text, miss, missing_as)
        if vals is not None:
            return vals, miss
    return None


def distinct(arr, stripped: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values as an object array of str, each row's index into them) of a text column; stripped:
    each distinct value stripped (as stripping every row, then encoding, would give them)."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    values = strip(enc.dictionary) if stripped else enc.dictionary
    values = np.asarray(values.to_numpy(zero_copy_only=False), dtype=object)
    return values, enc.indices.to_numpy(zero_copy_only=False).astype(np.intp)


_HEX = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def hex8(values) -> tuple[np.ndarray, np.ndarray]:
    """(is 8 ASCII hex digits, their value) of each entry of an arrow string array."""
    n = len(values)
    offsets = np.asarray(values.buffers()[1]).view(np.int32)[values.offset : values.offset + n + 1]
    data = values.buffers()[2]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    is8 = np.diff(offsets) == 8
    out = np.zeros(n, np.uint64)
    ok = np.zeros(n, bool)
    if is8.any():
        idx = starts[is8][:, None] + np.arange(8)
        digits = _HEX[data[idx]]
        good = (digits < 16).all(axis=1)
        val = np.zeros(idx.shape[0], np.uint64)
        for k in range(8):
            val = (val << np.uint64(4)) | digits[:, k].astype(np.uint64)
        rows = np.flatnonzero(is8)
        ok[rows] = good
        out[rows[good]] = val[good]
    return ok, out


def ids(stripped) -> np.ndarray:
    """vfl/data/ids.py's int64 ids of a stripped, non-empty id column (ids64 of the same texts, vectorized)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(stripped)
    is_int = pc.match_substring_regex(stripped, _INT_RE).to_numpy(zero_copy_only=False)
    out = np.empty(n, np.int64)
    if is_int.all():
        try:
            return pc.cast(stripped, pa.int64()).to_numpy(zero_copy_only=False).copy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a '+' sign, or out of int64: one by one
            pass
    texts = stripped.to_pylist()
    if is_int.any():
        rows = np.flatnonzero(is_int)
        out[rows] = [_int_id(texts[r]) for r in rows]
    rest = np.flatnonzero(~is_int)
    if rest.size:
        sha = hashlib.sha256
        # a text that Python's strip changes (a whitespace arrow keeps) goes through the reference function
        digests = [
            sha(ID_DOMAIN + t.encode("utf-8")).digest()[:8]
            if t.strip() == t
            else id64_of_text(t).to_bytes(8, "little", signed=True)
            for t in (texts[r] for r in rest)
        ]
        out[rest] = np.frombuffer(b"".join(digests), "<i8")
    return out


def _int_id(t: str) -> int:
    v = int(t)
    return v if INT64_MIN <= v <= INT64_MAX else id64_of_text(t)
