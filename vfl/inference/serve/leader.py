"""`python -m leader serve`'s scoring core: one worker thread that owns the CurveZMQ channel to the followers.

Client requests (a few ids each, with a deadline) wait in a queue; the worker takes the oldest and every other one
that is already queued, up to --max-rows ids in all (dynamic batching: under load a batch fills, idle it is one
request), sends each follower one SERVE_IDS of the ids the leader's own table holds (no other id can be scored, so
no follower hears of it), runs the leader's own bottom on its rows meanwhile, awaits every follower's SERVE_CUT
until the earliest deadline of the batch, runs the top and answers each request. Scores stay here: followers
receive ids only.

Failures are answers, never hangs:
- a follower whose connection dropped is `down`: every later request fails at once with that reason (503);
- a follower that does not answer by the deadline fails the batch (504); its late answer is read and dropped before
  the next request is sent to it;
- a follower's SERVE_REFUSED (its rate limit) fails the batch with its reason and retry time (429);
- an id that the leader's or a follower's table lacks gets no score (listed in `missing`); a party's table is its
  prepared rows and the new rows it serves (`--new-rows`, vfl/inference/serve/serving_rows.py).
While idle, the worker sends WAIT before a follower's deadline passes. Which followers are down, their keepalive and
a restarted follower's hello are vfl/inference/serve/follower_links.py's.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from vfl.inference.party_model import current_rows
from vfl.inference.serve.follower_links import FollowerLinks
from vfl.wire.serve_messages import ServeCut, ServeIds, ServeRefused

MAX_QUEUED = 256  # requests waiting for the scorer; one more gets 503 at once
DOWN_RETRY_MS = 1000  # a 503 while a follower is down or the queue is full: retry after this long (Retry-After)


class ServeError(RuntimeError):
    """A request that gets no scores: `status` is the HTTP status it maps to, the text one line."""

    def __init__(self, status: int, text: str, retry_ms: int | None = None):
        super().__init__(text)
        self.status, self.retry_ms = status, retry_ms


@dataclass(eq=False)  # compared by identity (its ids are an array)
class ScoreRequest:
    ids: np.ndarray  # int64 (n,)
    deadline: float  # the worker's clock() after which the client no longer waits
    future: Future = field(default_factory=Future)


@dataclass
class Scored:
    """The answer to one request: a score per id (None where missing) and which got none, with why."""

    scores: list
    missing: dict  # position in the request -> reason


class _OfLinks:
    """An attribute of the worker's FollowerLinks, read (and, when settable, set) as the worker's own."""

    def __init__(self, doc: str, settable: bool = True):
        self.__doc__, self.settable = doc, settable

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, worker, owner=None):
        return self if worker is None else getattr(worker.links, self.name)

    def __set__(self, worker, value) -> None:
        if not self.settable:
            raise AttributeError(f"{self.name} is read-only")
        setattr(worker.links, self.name, value)


class ScoringWorker:
    """The worker: batches queued requests, fetches the followers' cuts, scores with the leader's model."""

    def __init__(
        self, channel, followers: list[str], cut_dims: dict[str, int], model, table, task, max_rows: int, *, clock=None
    ):
        self.ch, self.followers, self.cut_dims = channel, list(followers), dict(cut_dims)
        self.model, self.table, self.task = model, table, task
        # what computes the leader's cut and the score: the torch modules, or onnxruntime (onnx_engine.fast_forward)
        self.bottom_fn, self.head_fn = model.bottom, model.head
        self.max_rows = int(max_rows)
        self.queue: queue.Queue[ScoreRequest | None] = queue.Queue()
        self.max_queued = MAX_QUEUED
        self.request_no = 0
        self.batches = self.rows = 0
        self.clock = clock or time.monotonic  # deadlines and keepalives (monotonic seconds; a test's fixed clock)
        # which followers are down, the answers still on their way, keepalives, a restarted follower's hello
        self.links = FollowerLinks(channel, self.followers, self.cut_dims, self.clock)
        self._thread = threading.Thread(target=self._run, name="leader-scorer", daemon=True)
        self._held: ScoreRequest | None = None
        self._rows = table  # the table of the batch being scored (current_rows)
        self.failed: BaseException | None = None

    # -- the followers' state (vfl/inference/serve/follower_links.py), set and read as the worker's own ------------
    down = _OfLinks("follower -> why it is down", settable=False)
    late = _OfLinks("follower -> request number of an answer still on its way", settable=False)
    keepalive_every = _OfLinks("Seconds of silence after which an idle worker sends every follower that is up WAIT.")
    check_hello = _OfLinks(
        "(f, hello) -> problems, for a follower that connects again (sent to it: no path); None: none."
    )
    log = _OfLinks("The serving log (RunLog), or None.")

    # -- the client side (HTTP threads) --------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, ids: np.ndarray, deadline_s: float) -> Future:
        """Queue a request; its future gets a Scored or a ServeError."""
        req = ScoreRequest(np.asarray(ids, np.int64), self.clock() + deadline_s)
        if self.failed is not None:
            req.future.set_exception(ServeError(503, f"the scorer stopped: {self.failed}"))
        elif self.queue.qsize() >= self.max_queued:
            req.future.set_exception(
                ServeError(503, f"the scorer's queue is full ({self.max_queued} requests)", DOWN_RETRY_MS)
            )
        else:
            self.queue.put(req)
        return req.future

    def stop(self) -> None:
        self.queue.put(None)
        self._thread.join(timeout=5)

    # -- the worker ----------------------------------------------------------------------------------
    def _next_batch(self) -> list[ScoreRequest] | None:
        """The oldest request and every one queued behind it, up to max_rows ids (None: stop; queue.Empty: idle)."""
        first = self._held or self.queue.get(timeout=max(0.05, self.keepalive_every / 2))
        self._held = None
        if first is None:
            return None
        batch, rows = [first], first.ids.size
        while rows < self.max_rows:
            try:
                nxt = self.queue.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                self.queue.put(None)  # stop after this batch
                break
            if rows + nxt.ids.size > self.max_rows:
                self._held = nxt  # the next batch starts with it
                break
            batch.append(nxt)
            rows += nxt.ids.size
        return batch

    def _run(self) -> None:
        try:
            while True:
                try:
                    batch = self._next_batch()
                except queue.Empty:
                    self.links.readmit()
                    self.links.keepalive()
                    continue
                if batch is None:
                    return
                self.links.readmit()
                try:
                    self._score(batch)
                except Exception as e:  # a bug or an unforeseen input: this batch fails, serving goes on
                    self._fail(batch, e)
        except BaseException as e:  # the channel itself broke: every waiting request learns why
            self.failed = e
            if self.log is not None:
                self.log.error(f"leader: the scorer stopped ({type(e).__name__}: {e}); every request fails (503)")
            while True:
                try:
                    req = self.queue.get_nowait()
                except queue.Empty:
                    break
                if req is not None and not req.future.done():
                    req.future.set_exception(ServeError(503, f"the scorer stopped: {e}"))

    def _fail(self, batch: list[ScoreRequest], e: Exception) -> None:
        from vfl.wire import WireError

        for r in batch:
            if not r.future.done():
                r.future.set_exception(ServeError(500, f"scoring failed: {type(e).__name__}: {e}"))
        if isinstance(e, WireError):
            self.links.peer_error(e)  # raises an error of the channel's own: the scorer stops
        elif self.log is not None:
            import traceback

            self.log.file_only(traceback.format_exc())

    def _post(self, f: str, message) -> None:
        """Send f a message (follower_links.FollowerLinks.post: a connection that is gone marks f down)."""
        self.links.post(f, message)

    def _score(self, batch: list[ScoreRequest]) -> None:

        live = [r for r in batch if not r.future.done() and r.deadline > self.clock()]
        for r in batch:
            if r not in live and not r.future.done():
                r.future.set_exception(ServeError(504, "the request's deadline passed while it was queued"))
        if not live:
            return
        try:
            self._check_up()
            ids = np.concatenate([r.ids for r in live])
            self._rows = current_rows(self.table)  # one load of the new rows for the whole batch
            own_rows = self._rows.rows_of(ids)
            known = np.flatnonzero(own_rows >= 0)  # only these are scored, and only these go to the followers
            missing = {int(i): "unknown to the leader" for i in np.flatnonzero(own_rows < 0)}
            values: list = [None] * ids.size
            if known.size:
                for i, v in zip(known.tolist(), self._score_known(ids[known], own_rows[known], live, missing, known)):
                    values[i] = v
        except ServeError as e:
            for r in live:
                r.future.set_exception(e)
            return
        self.batches += 1
        self.rows += ids.size
        start = 0
        for r in live:
            gone = {i - start: why for i, why in missing.items() if start <= i < start + r.ids.size}
            part = values[start : start + r.ids.size]
            r.future.set_result(Scored([None if j in gone else v for j, v in enumerate(part)], gone))
            start += r.ids.size

    def _score_known(self, ids, own_rows, live, missing: dict, known: np.ndarray) -> list:
        """The scores of ids the leader holds (rows own_rows of its table); a follower's unknown ones go to missing
        (by position in the batch: known[i])."""
        import torch

        deadline = min(r.deadline for r in live)
        self.request_no += 1
        number = self.request_no
        budget_ms = max(1, int((deadline - self.clock()) * 1000))
        for f in self.followers:
            self._settle_late(f, deadline)
            self._post(f, ServeIds(number, ids, budget_ms))
            if f not in self.down:
                self.late[f] = number  # until its answer is read
        self._check_up()
        self.links.last_sent = self.clock()
        with torch.inference_mode():
            own = self.bottom_fn(*self._rows.features(own_rows))
        cuts = []
        for f in self.followers:
            cut, unknown = self._await_cut(f, number, deadline, ids.size)
            cuts.append(torch.from_numpy(cut))
            for i in unknown.tolist():
                missing.setdefault(int(known[i]), f"unknown to {f}")
        with torch.inference_mode():
            return self.head_fn(own, torch.cat(cuts, dim=1) if cuts else own[:, :0]).numpy().tolist()

    def _check_up(self) -> None:
        if self.down:
            f, why = next(iter(self.down.items()))
            raise ServeError(503, why, DOWN_RETRY_MS)  # a restarted follower greets again (Retry-After)

    def _settle_late(self, f: str, deadline: float) -> None:
        """Read and drop the answer to an earlier request that timed out, before asking `f` again."""
        if f not in self.late or f in self.down:
            return
        self._receive(f, self.late.pop(f), deadline, keep=False)

    def _await_cut(self, f: str, number: int, deadline: float, rows: int) -> tuple[np.ndarray, np.ndarray]:
        msg = self._receive(f, number, deadline, keep=True)
        if isinstance(msg, ServeRefused):
            raise ServeError(429, f"{f} refused: {msg.reason}", msg.retry_ms)
        if msg.cut.shape != (rows, self.cut_dims[f]):
            raise ServeError(502, f"SERVE_CUT from {f}: expected ({rows}, {self.cut_dims[f]}), got {msg.cut.shape}")
        return msg.cut, msg.unknown

    def _receive(self, f: str, number: int, deadline: float, keep: bool):
        """The answer of `f` to request `number` (older answers are dropped), by the deadline."""
        from vfl.wire import WireError
        from vfl.wire.endpoint import PeerLost, PeerTimeout

        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise ServeError(504, f"{f} did not answer within the request's deadline")
            self.ch.timeout_s = remaining
            try:
                msg = self.ch.expect(f, ServeCut, ServeRefused, what=f"SERVE_CUT from {f}")
            except PeerTimeout:
                raise ServeError(504, f"{f} did not answer within the request's deadline") from None
            except PeerLost as e:  # some follower's connection dropped (perhaps not f's)
                self.links.mark_lost(e)
                self._check_up()
                continue
            except WireError as e:  # an ABORT or a broken message, of f's or another follower's: that one is down
                self.links.peer_error(e)
                self._check_up()
                continue
            if msg.request == number:
                self.late.pop(f, None)
                return msg
            if msg.request > number:
                raise ServeError(502, f"{f} answered request {msg.request} before {number} was asked")
            if not keep and msg.request >= number:
                return msg
