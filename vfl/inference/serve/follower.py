"""What a serving follower answers (`python -m follower serve`): the cuts of the ids the leader asks for, rate-limited.

The follower connects to the leader over CurveZMQ with its training keys (the leader admits only the keys of
network.follower_keys; the follower pins network.leader_key_file), introduces its trained model (SERVE_HELLO:
checkpoint step and run fingerprint, cut width, limits), and then answers each SERVE_IDS with the cut of those ids,
looked up by id in its own prepared table (every split of its shard) and, with `--new-rows`, in the new rows it
serves (vfl/inference/serve/serving_rows.py); an id in neither is `unknown` (a zero cut). It never receives a score or a
label.

A leader could ask about any id it likes (an honest-but-curious one probing who is a customer here), so the
follower logs every id it answers (`<output.dir>/<party>_served_ids.log`: time, request, rows, the ids) before it
answers, and rate-limits them: a token bucket of `--rows-per-s` ids per second with a burst of one second's worth; a
request beyond it gets SERVE_REFUSED with the wait before the next one is answered. A refused request teaches the
leader nothing about its ids, so its line holds their count and digest only (a leader flooding refused requests
cannot fill the disk at wire speed). The log is bounded: it rotates every 100 MB, and when the logs reach
`--id-log-mb` the follower stops serving rather than answer what it cannot log.
"""

from __future__ import annotations

import glob
import hashlib
import os
import time
from dataclasses import dataclass

import numpy as np

from vfl.inference.party_model import current_rows
from vfl.wire.serve_messages import MAX_SERVE_ROWS, ServeCut, ServeIds, ServeRefused

DEFAULT_ROWS_PER_S = 100_000.0
DEFAULT_ID_LOG_MB = 10_000.0  # the id logs' disk budget (1 MB = 10^6 bytes)
ROTATE_BYTES = 100_000_000  # an id log file is renamed <name>.<N> (N = 1, 2, ...: oldest first) past this size
STOPPED = "stopped serving"  # the end of the ABORT reason of a leader that stops on purpose (SIGTERM, Ctrl-C)


@dataclass
class ServeLimits:
    """What a follower answers: at most `max_rows` ids a request and `rows_per_s` ids a second (burst: 1 s)."""

    max_rows: int = 1024
    rows_per_s: float = DEFAULT_ROWS_PER_S
    id_log_mb: float = DEFAULT_ID_LOG_MB

    def check(self) -> None:
        if not 1 <= self.max_rows <= MAX_SERVE_ROWS:
            raise ValueError(f"--max-rows must be in [1, {MAX_SERVE_ROWS}], got {self.max_rows}")
        if not self.rows_per_s > 0:
            raise ValueError(f"--rows-per-s must be > 0, got {self.rows_per_s}")
        if not self.id_log_mb > 0:
            raise ValueError(f"--id-log-mb must be > 0, got {self.id_log_mb}")

    @property
    def id_log_bytes(self) -> int:
        return int(self.id_log_mb * 1e6)


class TokenBucket:
    """At most `rate` units a second on average, `burst` at once; time from `clock` (monotonic seconds)."""

    def __init__(self, rate: float, burst: float, clock=time.monotonic):
        self.rate, self.burst, self.clock = float(rate), float(burst), clock
        self.tokens, self.stamp = float(burst), clock()

    def take(self, n: int) -> float:
        """0.0 when n units are taken now; otherwise the seconds until they could be (nothing is taken)."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if n <= self.tokens:
            self.tokens -= n
            return 0.0
        return (n - self.tokens) / self.rate


class IdLogFull(OSError):
    """The id logs reached their disk budget: the follower stops serving (it never answers what it cannot log)."""


class IdLog:
    """An append-only text log of the ids a leader asked about, one line per request (flushed per line): an answered
    request's ids, a refused one's count and digest. `budget_bytes` bounds the log files together (those of earlier
    runs in the same place included); past `rotate_bytes` the file is renamed `<path>.<N>` and a new one started."""

    def __init__(self, path: str, budget_bytes: int, rotate_bytes: int = ROTATE_BYTES):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path, self.budget, self.rotate_bytes = path, int(budget_bytes), int(rotate_bytes)
        self.spent = sum(os.path.getsize(p) for p in [path, *self._rotated()] if os.path.exists(p))
        self._f = open(path, "a", buffering=1 << 16)

    def _rotated(self) -> list[str]:
        return [p for p in glob.glob(glob.escape(self.path) + ".*") if p.rsplit(".", 1)[1].isdigit()]

    def write(self, request: int, ids: np.ndarray, outcome: str) -> None:
        """The line of a request about to be answered: every id (IdLogFull, and nothing written, past the budget)."""
        self._line(f"request={request} rows={ids.size} {outcome} ids={','.join(map(str, ids.tolist()))}")

    def refused(self, request: int, ids: np.ndarray, outcome: str) -> None:
        """The line of a refused request: the count and the digest of its ids (BLAKE2b-64 of their int64 bytes)."""
        digest = hashlib.blake2b(np.ascontiguousarray(ids, "<i8").tobytes(), digest_size=8).hexdigest()
        self._line(f"request={request} rows={ids.size} {outcome} ids_blake2b64={digest}")

    def _line(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"
        line = f"{stamp} {text}\n"
        if self.spent + len(line) > self.budget:
            raise IdLogFull(
                f"the id logs ({self.path} and its rotated files) reached --id-log-mb {self.budget / 1e6:g}: "
                f"serving stopped (move the logs away or raise --id-log-mb, then start it again)"
            )
        if self._f.tell() + len(line) > self.rotate_bytes and self._f.tell() > 0:
            self._f.close()
            numbers = [int(p.rsplit(".", 1)[1]) for p in self._rotated()]
            os.rename(self.path, f"{self.path}.{max(numbers, default=0) + 1}")
            self._f = open(self.path, "a", buffering=1 << 16)
        self._f.write(line)
        self._f.flush()
        self.spent += len(line)

    def close(self) -> None:
        self._f.close()


class FollowerServer:
    """Answers SERVE_IDS with cuts from the party's own table; rate-limited, every id logged. `bottom` computes the
    cut from the table's features: the torch module, or onnxruntime in its place (onnx_engine.fast_forward)."""

    def __init__(
        self, bottom, table, cut_dim: int, limits: ServeLimits, id_log: IdLog, clock=time.monotonic, cut_release=None
    ):
        self.bottom, self.table, self.cut_dim = bottom, table, cut_dim
        self.cut_release = cut_release  # privacy.embedding_dp: a vfl.session.cut_release.CutRelease (None: off)
        self.limits = limits
        self.bucket = TokenBucket(limits.rows_per_s, max(limits.rows_per_s, limits.max_rows), clock)
        self.id_log = id_log
        self.answered = self.refused = self.rows = 0

    def answer(self, msg: ServeIds) -> ServeCut | ServeRefused:
        """The reply to one request (logged whatever the outcome: the ids of an answered one, before it is answered)."""
        import torch

        from vfl.session.cut_release import ReleaseCapError

        if msg.rows > self.limits.max_rows:
            self.id_log.refused(msg.request, msg.ids, "refused:max_rows")
            self.refused += 1
            return ServeRefused(
                msg.request, f"{msg.rows} ids exceed this follower's --max-rows {self.limits.max_rows}", 0
            )
        wait = self.bucket.take(msg.rows)
        if wait > 0:
            self.id_log.refused(msg.request, msg.ids, "refused:rate")
            self.refused += 1
            return ServeRefused(
                msg.request,
                f"rate limit: this follower answers at most {self.limits.rows_per_s:g} ids/s",
                max(1, int(np.ceil(wait * 1000))),
            )
        table = current_rows(self.table)  # one load of the new rows for the whole request
        rows = table.rows_of(msg.ids)
        unknown = np.flatnonzero(rows < 0).astype(np.int64)
        held = rows >= 0
        with torch.inference_mode():
            cut = self.bottom(*table.features(rows)).float().numpy()
        if self.cut_release is not None and self.cut_release.on and held.any():
            try:  # clipped, keyed-noised, charged per (id, value) before it leaves: a repeated value is free
                cut[held] = self.cut_release.release(torch.from_numpy(cut[held]), "serve", ids=msg.ids[held])
            except ReleaseCapError as e:  # embedding DP: a new value of an id past the model's scoring cap
                self.id_log.refused(msg.request, msg.ids, "refused:embedding_dp")
                self.refused += 1
                return ServeRefused(msg.request, str(e), 0)
        self.id_log.write(msg.request, msg.ids, f"answered unknown={unknown.size}")
        if unknown.size:
            cut[unknown] = 0.0  # nothing of a row this party does not hold
        self.answered += 1
        self.rows += msg.rows
        return ServeCut(msg.request, np.ascontiguousarray(cut, np.float32), unknown)
