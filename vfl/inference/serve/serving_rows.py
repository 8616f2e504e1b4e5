"""New customers in online scoring: a party's rows of ids it has not prepared.

They are read from a file or a directory of files it names (`serve --new-rows PATH`), through its frozen training-time
transforms, and reloaded when they change.

Each file (CSV, TSV, .gz or Parquet with the party's training columns; a label column is ignored) goes through
vfl/inference/predict/new_rows.NewRows, the very path batch prediction takes: the transforms training fitted, nothing
refitted (an unseen category gets the out-of-vocabulary id, a missing number its missing flag). A directory is every
such file directly in it. An id is looked up in the party's prepared table first and in the new rows only when it is not
there: a prepared id keeps the row the model was trained and evaluated on.

A background thread checks the files' names, sizes and modification times every `poll_s` seconds; on a change it
loads them all into a new table and swaps it in whole, so a request never sees half a load and never waits for one.
A load that fails (a malformed file, an id held twice) keeps the previous table and logs one warning naming the file;
at start the first load's failure is the command's error.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import numpy as np

from vfl.data.errors import DataError
from vfl.data.shards import ShardSplit
from vfl.inference.party_model import RowTable

NEW_ROW_SUFFIXES = (".csv", ".tsv", ".txt", ".gz", ".parquet", ".pq")
POLL_S = 1.0


def source_files(source: str) -> list[str]:
    """The files of a --new-rows source: the file itself, or a directory's files with NEW_ROW_SUFFIXES (sorted)."""
    if os.path.isfile(source):
        return [source]
    if os.path.isdir(source):
        names = sorted(n for n in os.listdir(source) if n.lower().endswith(NEW_ROW_SUFFIXES) and not n.startswith("."))
        return [os.path.join(source, n) for n in names if os.path.isfile(os.path.join(source, n))]
    raise DataError(f"--new-rows {source!r} is neither a file nor a directory of CSV/TSV/Parquet files")


def signature(files: list[str]) -> tuple:
    """What identifies one version of the files (a change of name, size or modification time is a new version)."""
    out = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((path, st.st_size, st.st_mtime_ns))
    return tuple(out)


def load_new_rows(shard_dir: str, files: list[str], work_dir: str, log) -> RowTable | None:
    """One table of every file's rows through the frozen transforms (None: no file); DataError naming a bad one."""
    from vfl.inference.party_model import ModelLoadError

    parts = []
    try:  # a failed load leaves no spill behind (a partial copy of the file, the leader's label column included)
        for k, path in enumerate(files):
            parts.append(new_rows_of(shard_dir, path, os.path.join(work_dir, f"{k:04d}"), log))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    if not parts:
        return None
    try:
        return RowTable(parts=parts, where=f"the new rows of {', '.join(files)}")
    except ModelLoadError as e:
        raise DataError(str(e)) from None


def new_rows_of(shard_dir: str, path: str, work_dir: str, log) -> ShardSplit:
    """The rows of one file of new rows, in memory (ids, features as the prepared shard holds them)."""
    from vfl.inference.predict.new_rows import NewRows

    rows = NewRows(shard_dir, path, work_dir, log)
    try:
        load = lambda name: np.array(np.load(rows._p(name)))  # noqa: E731  (copied: the work dir goes)
        return ShardSplit(np.array(rows.ids), load("dense"), load("dense_missing"), load("cat"), None)
    finally:
        rows.close()


class Snapshot:
    """The prepared table and one load of the new rows, seen as one table (prepared rows first: row >= len(prepared)
    is a new row)."""

    def __init__(self, prepared: RowTable, new: RowTable | None):
        self.prepared, self.new = prepared, new
        self.offset = len(prepared)

    def __len__(self) -> int:
        return self.offset + (len(self.new) if self.new is not None else 0)

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The row of each id: its prepared row, else its new row, else -1."""
        ids = np.asarray(ids, np.int64)
        rows = self.prepared.rows_of(ids)
        if self.new is not None:
            lack = np.flatnonzero(rows < 0)
            found = self.new.rows_of(ids[lack])
            rows[lack] = np.where(found >= 0, found + self.offset, -1)
        return rows

    def features(self, rows: np.ndarray):
        import torch

        rows = np.asarray(rows, np.int64)
        out = self.prepared.arrays(np.where(rows < self.offset, rows, -1))
        newer = np.flatnonzero(rows >= self.offset)
        if newer.size:
            for o, a in zip(out, self.new.arrays(rows[newer] - self.offset)):
                o[newer] = a
        return tuple(torch.from_numpy(o) for o in out)


class ServingRows:
    """What a serving party answers from: its prepared table and the new rows of `source` (None: prepared only),
    kept current by a background thread (`start`, `close`). `snapshot()` is the table one request is answered from."""

    def __init__(self, prepared: RowTable, source: str | None, shard_dir: str, work_root: str, log, poll_s=POLL_S):
        self.prepared, self.source, self.shard_dir = prepared, source, shard_dir
        self.work_root, self.log, self.poll_s = work_root, log, float(poll_s)
        self.loads = 0
        self._current = Snapshot(prepared, None)
        self._signature: tuple = ()
        self._attempted: tuple = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._current)

    def snapshot(self) -> Snapshot:
        return self._current

    def start(self) -> None:
        """The first load (its failure raises), then the thread that reloads on a change."""
        if self.source is None:
            return
        self.reload()
        self._thread = threading.Thread(target=self._watch, name="new-rows", daemon=True)
        self._thread.start()

    def reload(self) -> bool:
        """Load the source again if its files changed (True: a new table is in use); DataError on a bad file."""
        files = source_files(self.source)
        sig = signature(files)
        if sig == self._signature and self.loads:
            return False
        self._attempted = sig  # a failed load is retried when the files differ from what this load read
        t0 = time.perf_counter()
        self.loads += 1
        work = os.path.join(self.work_root, f".serve-new-rows-{os.getpid()}-{self.loads}")
        new = load_new_rows(self.shard_dir, files, work, lambda *a, **k: None)
        prepared = int(np.count_nonzero(self.prepared.rows_of(new.sorted_ids) >= 0)) if new is not None else 0
        self._current, self._signature = Snapshot(self.prepared, new), sig
        self.log(
            f"new rows: {len(new) if new is not None else 0} rows of {len(files)} file(s) in {self.source} through "
            f"the frozen transforms in {time.perf_counter() - t0:.2f} s"
            + (f"; {prepared} of their ids are prepared rows, which are served as prepared" if prepared else "")
        )
        return True

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.reload()
            except Exception as e:  # any failure of a load (a reader's too): the previous load is served
                # retried when the files change again, not every poll: the signature is the one taken before the
                # load, so a file that a writer finished after the load read it is loaded at the next poll
                self._signature = self._attempted
                why = str(e) if isinstance(e, (DataError, OSError)) else f"{type(e).__name__}: {e}"
                self.log.warning(f"new rows: {self.source} not reloaded, the previous load is served: {why}")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
