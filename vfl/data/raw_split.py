"""The local simulation's first step: one combined raw Criteo file -> one raw file per party, as each organisation would hold it.

OUT/<party>.tsv has a header line `id<TAB>columns...[<TAB>label]`: the sample id (the combined
file's leading id column, or its 0-based line number), the party's own raw columns as text, and the
label only in the labelled party's file. A party's `drop_fraction` leaves out that share of ids
(chosen by id with the public uniform_from_ids), so the parties' id sets overlap without being
equal, and the private set intersection at training time has something to find. The combined
file's truth probabilities (INPUT.truth.npy) travel to the labelled party only, row for row
(<leader>.tsv.truth.npy). Nothing is half-written: files are fsynced and renamed into place when complete (privacy/durable_files.py).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import numpy as np

from privacy.durable_files import PendingFile
from privacy.public_hash import uniform_from_ids
from vfl.data.errors import DataError
from vfl.data.parties import PartyColumns
from vfl.data.presets.criteo import CATEGORICAL_COLUMNS, DENSE_COLUMNS, LABEL
from vfl.data.readers.criteo_tsv import read_raw_blocks
from vfl.data.readers.read_stats import ReadStats, warn_bad_lines

_DROP_SALT = 0xD0D0
ID_COLUMN = "id"


def hash_name(name: str) -> int:
    """A stable integer per party name (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def party_file(out_dir: str, party: PartyColumns) -> str:
    return os.path.join(out_dir, f"{party.name}.tsv")


def split_raw(
    input_path: str,
    out_dir: str,
    parties: list[PartyColumns],
    seed: int = 0,
    strict: bool = False,
    truth_path: str | None = None,
    num_classes: int = 2,
) -> dict:
    """Write OUT/<party>.tsv for every party (and the labelled party's truth file); return a summary."""
    t0 = time.perf_counter()
    if truth_path is None and os.path.exists(input_path + ".truth.npy"):
        truth_path = input_path + ".truth.npy"
    if truth_path is not None and not os.path.exists(truth_path):
        raise DataError(f"truth file not found: {truth_path}")
    os.makedirs(out_dir, exist_ok=True)
    stats = ReadStats()
    paths = {p.name: party_file(out_dir, p) for p in parties}
    pending = {n: PendingFile(path) for n, path in paths.items()}  # fsynced and renamed into place when complete
    tmp = {n: f.tmp for n, f in pending.items()}
    truth_file: list[PendingFile] = []  # the labelled party's truth probabilities, where given
    files = {}
    kept_lines: list[np.ndarray] = []
    label_party = next(p for p in parties if p.label)
    rows = {p.name: 0 for p in parties}
    try:
        for p in parties:
            files[p.name] = open(tmp[p.name], "w", encoding="utf-8", errors="surrogateescape", newline="\n")
            files[p.name].write("\t".join([ID_COLUMN, *p.dense, *p.categorical, *([LABEL] if p.label else [])]) + "\n")
        total = os.path.getsize(input_path) if os.path.isfile(input_path) else 0
        last_note = time.perf_counter()
        for data, first_line, block in read_raw_blocks(input_path, strict, stats, num_classes=num_classes):
            last_note = _say_progress(input_path, stats, total, t0, last_note)
            for p, held in zip(parties, _write_block(data, first_line, block, parties, files, seed)):
                rows[p.name] += int(held.sum())
                if p is label_party:
                    kept_lines.append(block.line_index[held])
        for f in files.values():
            f.close()
        warn_bad_lines(input_path, stats)
        if truth_path is not None:
            truth = np.load(truth_path, mmap_mode="r")
            lines_kept = np.concatenate(kept_lines) if kept_lines else np.empty(0, np.int64)
            if lines_kept.size and lines_kept.max() >= truth.shape[0]:
                raise DataError(f"truth file {truth_path} has {truth.shape[0]} rows but {input_path} has more lines")
            truth_file.append(PendingFile(paths[label_party.name] + ".truth.npy"))
            np.save(truth_file[0].tmp, np.asarray(truth[lines_kept]))
        elif os.path.exists(paths[label_party.name] + ".truth.npy"):
            os.unlink(paths[label_party.name] + ".truth.npy")
        for file in [*truth_file, *pending.values()]:
            file.commit()
    except BaseException:
        for f in files.values():
            f.close()
        for file in [*truth_file, *pending.values()]:
            file.discard()
        raise
    return {
        "files": paths,
        "rows": rows,
        "source": {
            "path": os.path.abspath(input_path),
            "sha256": stats.sha256,
            "bytes": stats.bytes_read,
            "lines": stats.lines,
            "good_rows": stats.good_rows,
            "malformed_rows_skipped": stats.bad_rows,
        },
        "sample_ids": "leading id column" if stats.has_id_column else "0-based line number of the input",
        "seconds": time.perf_counter() - t0,
    }


def _say_progress(input_path: str, stats: ReadStats, total: int, t0: float, last_note: float) -> float:
    """Every 10 s, the bytes read, the rate and the ETA on stderr (not for .gz, whose size says nothing); returns
    when it last spoke."""
    now = time.perf_counter()
    if now - last_note < 10.0 or input_path.endswith(".gz"):
        return last_note
    rate = stats.bytes_read / (now - t0)
    print(
        f"split: {stats.bytes_read / 2**20:.0f}/{total / 2**20:.0f} MiB, {rate / 2**20:.1f} MiB/s, "
        f"ETA {(total - stats.bytes_read) / max(rate, 1):.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return now


def _write_block(data: bytes, first_line: int, block, parties: list[PartyColumns], files: dict, seed: int) -> list:
    """Append one parsed block's good lines to each party's file (its columns, the rows its drop rule keeps);
    returns each party's kept-row mask, in the order of parties."""
    lines = data.decode("utf-8", errors="surrogateescape").replace("\r\n", "\n").split("\n")
    offsets = block.line_index - first_line
    ids = block.sample_id if block.sample_id is not None else block.line_index
    off = int(block.sample_id is not None)
    fields = [lines[int(o)].split("\t") for o in offsets]
    kept = []
    for p in parties:
        held = uniform_from_ids(ids, seed, _DROP_SALT + hash_name(p.name)) >= p.drop_fraction
        cols = (
            [off + 1 + DENSE_COLUMNS.index(c) for c in p.dense]
            + [off + 1 + len(DENSE_COLUMNS) + CATEGORICAL_COLUMNS.index(c) for c in p.categorical]
            + ([off] if p.label else [])
        )
        buf = [str(int(ids[r])) + "\t" + "\t".join([fields[r][c] for c in cols]) for r in np.flatnonzero(held)]
        if buf:
            files[p.name].write("\n".join(buf) + "\n")
        kept.append(held)
    return kept
