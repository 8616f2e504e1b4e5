"""Streaming reader of raw Criteo TSV files (plain or .gz) in bounded-memory blocks."""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterator

from vfl.data.errors import DataError
from vfl.data.presets.criteo import N_RAW_FIELDS
from vfl.data.readers.read_stats import MAX_BAD_LINES_NAMED, ReadStats
from vfl.data.readers.source_file import open_binary
from vfl.data.readers.tokenizer import ParsedBlock, parse_block

BLOCK_BYTES = 1 << 20  # numpy temporaries stay in cache; measured fastest on 2 cores


MAX_LINE_BYTES = 1 << 20  # a raw Criteo line is a few hundred bytes


def _read(f, path: str, n: int = -1, line: bool = False) -> bytes:
    """f.read(n) / f.readline(n), with a broken .gz (truncated, fake) as a one-line DataError."""
    try:
        return f.readline(n) if line else f.read(n)
    except (OSError, EOFError, zlib.error) as e:
        kind = "gzip file" if path.endswith(".gz") else "file"
        raise DataError(f"{path}: not a readable {kind} ({' '.join(str(e).split())})") from None


def _too_long(path: str, line_number: int) -> DataError:
    return DataError(
        f"{path}: line {line_number} is longer than {MAX_LINE_BYTES} bytes with no newline; "
        f"a raw Criteo line is a few hundred bytes (is this the right file?)"
    )


def detect_id_column(path: str) -> bool:
    """True when the first line has 41 fields (a leading sample-id column), False for 40."""
    with open_binary(path) as f:
        first = _read(f, path, MAX_LINE_BYTES + 1, line=True)
    if len(first) > MAX_LINE_BYTES:
        raise _too_long(path, 1)
    if not first.strip():
        raise DataError(f"input file is empty: {path}")
    n = first.rstrip(b"\r\n").count(b"\t") + 1
    if n == N_RAW_FIELDS:
        return False
    if n == N_RAW_FIELDS + 1:
        return True
    raise DataError(
        f"{path}: line 1 has {n} tab-separated fields; raw Criteo has {N_RAW_FIELDS} "
        f"(label, I1..I13, C1..C26), or {N_RAW_FIELDS + 1} with a leading id column"
    )


def read_blocks(
    path: str, strict: bool, stats: ReadStats, block_bytes: int = BLOCK_BYTES, num_classes: int = 2
) -> Iterator[ParsedBlock]:
    """Yield parsed blocks of good rows; bad lines are counted (or raise with strict)."""
    for _, _, block in read_raw_blocks(path, strict, stats, block_bytes, num_classes):
        yield block


def read_raw_blocks(
    path: str, strict: bool, stats: ReadStats, block_bytes: int = BLOCK_BYTES, num_classes: int = 2
) -> Iterator[tuple[bytes, int, ParsedBlock]]:
    """Yield (the block's raw bytes, the file line index of its first line, its parsed good rows)."""
    has_id = detect_id_column(path)
    stats.has_id_column = has_id
    digest = hashlib.sha256()
    line_index = 0
    carry = b""
    from vfl.obs.progress import bar

    size = None if path.endswith(".gz") else os.path.getsize(path)  # a gzip file's size says little about its text
    with open_binary(path) as f, bar(total=size, desc="prepare: read", unit="B") as progress:
        while True:
            chunk = _read(f, path, block_bytes)
            if chunk:
                progress.update(len(chunk))
                digest.update(chunk)
                stats.bytes_read += len(chunk)
                data = carry + chunk
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    if len(data) > MAX_LINE_BYTES:  # memory stays bounded by one line's limit
                        raise _too_long(path, line_index + 1)
                    carry = data
                    continue
                carry, data = data[cut:], data[:cut]
            elif carry:
                data, carry = carry + b"\n", b""
            else:
                break
            block, bad = parse_block(data, line_index, has_id, num_classes)
            first_line = line_index
            line_index += data.count(b"\n")
            if bad:
                if strict:
                    b = bad[0]
                    raise DataError(
                        f"{path}: line {b.line_index + 1}: {b.reason} (run without --strict to skip malformed lines)"
                    )
                stats.bad_rows += len(bad)
                room = MAX_BAD_LINES_NAMED - len(stats.first_bad)
                stats.first_bad.extend(bad[: max(room, 0)])
            stats.good_rows += block.label.size
            if block.label.size:
                yield data, first_line, block
    stats.lines = line_index
    stats.sha256 = digest.hexdigest()
    if stats.good_rows == 0:
        raise DataError(f"{path}: no usable rows ({stats.bad_rows} malformed lines)")
