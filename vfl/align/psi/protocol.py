"""The PSI exchange over the parties' CurveZMQ channel, before training: PSI messages with deadlines and size bounds.

Leader L (ids X, fresh secret a per follower) and follower F (ids Y, secret b), every step driven by L:

    F -> L  PSI hello  {suite, n: |Y|}                 L -> F  PSI hello {suite, n: |X|}
    for each chunk of F's shuffled Y:
      L -> F  PSI mask {start, stop}                   F -> L  PSI mask {start, stop} + H(y)^b
      L -> F  PSI double {start, stop} + (H(y)^b)^a    (F keeps them)
    for each chunk of L's shuffled X:
      L -> F  PSI leader {start, stop} + H(x)^a         F -> L  PSI leader {start, stop} + (H(x)^a)^b
    L matches H(x)^ab with H(y)^ab, intersects over all followers, then
      L -> F  PSI result {start, stop, total} + positions (in F's shuffled order) of the final intersection
      L -> F  PSI done {size}

F checks that every position L names is a match by its own computation (H(y)^ab among the H(x)^ab it
made), so L cannot make F train on an id outside the intersection. L compares the H(y)^ab it computed with
the (H(x)^a)^b that F returns, which F alone computes: a malicious F can return a copy of some H(y_j)^ab for
leader row i and claim a match that is not there (a hostile review; before this suite too). That poisons the
alignment (row x_i trained against y_j), and with several followers a follower claiming every row learns how many
of the leader's ids the others hold. The fix is a proof that each reply is its input raised to one b (a batched
Chaum-Pedersen DLEQ proof against a published g^b), not yet built. Both sides shuffle with the OS's randomness, so a position says nothing about an id's
rank. Each side learns the other's set size, and the intersection (F: its ids at the positions L names;
L: its ids whose H(x)^ab matched). A point is a 32-byte ristretto255 encoding (the suite, named in
both HELLOs, is in ecdh.py; carried as 4 int64), a message at most CHUNK_POINTS points; a set above
MAX_IDS ids is refused before anything is computed. Every receive has the channel's deadline; the
leader sends WAIT to followers that wait for their turn.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import numpy as np

from vfl.align.psi.ecdh import (
    SUITE,
    PointError,
    SodiumUnavailable,
    as_wire,
    from_wire,
    hash_ids,
    mask_ids,
    new_exponent,
    point_set,
    raise_to,
    sodium,
)
from vfl.wire.frames import MAX_HEADER_BYTES, WireError
from vfl.wire.messages import Wait
from vfl.wire.psi_messages import PSI_CHUNK_POINTS, PSI_MAX_IDS, PSI_RESULT_CHUNK, Psi

CHUNK_POINTS = PSI_CHUNK_POINTS  # 256 KiB of points per message: a chunk's exponentiations stay well inside a deadline
MAX_IDS = PSI_MAX_IDS  # ids per party (134 M; the Kaggle Criteo set has 45.8 M)
MAX_PSI_MESSAGE_BYTES = CHUNK_POINTS * 32 + MAX_HEADER_BYTES + 1024  # the largest PSI message


class PSIError(WireError):
    """The intersection cannot be agreed: a bad PSI message, a set too large, or an intersection too small."""


@dataclass
class PSIReport:
    """What a party learned and spent."""

    intersection: int = 0  # size of the final (all-party) intersection
    own_ids: int = 0
    peer_ids: dict[str, int] = field(default_factory=dict)  # the other side's set size(s)
    pairwise: dict[str, int] = field(default_factory=dict)  # leader: |X & Y_f| per follower; follower: |X & Y|
    seconds: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0

    def as_dict(self) -> dict:
        return {
            "suite": SUITE,
            "intersection": self.intersection,
            "own_ids": self.own_ids,
            "peer_ids": self.peer_ids,
            "pairwise": self.pairwise,
            "seconds": round(self.seconds, 3),
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }


class _Progress:
    """A progress line (points done, rate, ETA) at most every 10 s, for long intersections."""

    def __init__(self, log, what: str, total: int):
        self.log, self.what, self.total = log, what, total
        self.done, self.t0, self.last = 0, time.monotonic(), time.monotonic()

    def add(self, k: int) -> None:
        self.done += k
        now = time.monotonic()
        if self.log is not None and now - self.last >= 10.0:
            rate = self.done / max(now - self.t0, 1e-9)
            self.log(
                f"PSI {self.what}: {self.done}/{self.total} points, {rate:.0f}/s, "
                f"ETA {(self.total - self.done) / max(rate, 1e-9):.0f} s"
            )
            self.last = now


def _chunks(n: int):
    return [(i, min(i + CHUNK_POINTS, n)) for i in range(0, n, CHUNK_POINTS)]


def _shuffle(n: int) -> np.ndarray:
    return np.random.default_rng(secrets.randbits(128)).permutation(n)


def _range(msg: Psi, who: str, n: int, want: tuple[int, int] | None = None) -> tuple[int, int]:
    """The chunk a mask / double / leader message names (a chunk of 1..CHUNK_POINTS by parse), within a set of n."""
    start, stop = msg.start, msg.stop
    if stop > n or (want is not None and (start, stop) != want):
        raise PSIError(
            f"PSI {msg.op} from {who}: range {start}..{stop} "
            + (f"is not the requested {want[0]}..{want[1]}" if want else f"is not a chunk of 1..{CHUNK_POINTS} of {n}")
        )
    return start, stop


def _points(msg: Psi, who: str) -> np.ndarray:
    """The message's points (int64 (stop - start, 4) when present, by parse) as bytes."""
    if msg.payload is None:
        raise PSIError(f"PSI {msg.op} from {who}: expected 1 tensor, got 0")
    return from_wire(msg.payload)


def _op(msg: Psi, who: str, want: str) -> None:
    if msg.op != want:
        raise PSIError(f"expected PSI {want} from {who}, got PSI {msg.op!r}")


def _size(msg: Psi, who: str) -> int:
    if msg.suite != SUITE:
        raise PSIError(f"{who} runs PSI suite {msg.suite[:80]!r}, this party runs {SUITE!r}")
    return msg.n


def _check_ids(ids: np.ndarray, who: str) -> np.ndarray:
    try:
        sodium()
    except SodiumUnavailable as e:
        raise PSIError(f"{who}: {e}") from None
    ids = np.asarray(ids)
    if ids.dtype.kind != "i" or ids.dtype.itemsize != 8:  # a uint64 or float array would wrap or truncate silently
        raise PSIError(f"{who}'s ids must be int64 (vfl/data/ids.py), got {ids.dtype}")
    if ids.size == 0 or ids.size > MAX_IDS:
        raise PSIError(f"{who} holds {ids.size} ids; PSI needs 1..{MAX_IDS}")
    if np.unique(ids).size != ids.size:
        raise PSIError(f"{who}'s ids are not unique (re-run `python -m vfl.data prepare`, which refuses duplicates)")
    return ids


# -- follower ------------------------------------------------------------------------------------------
def follower_psi(ch, ids: np.ndarray, log=None) -> tuple[np.ndarray, PSIReport]:
    """Run F's side over a FollowerChannel; return the ids of the final intersection (ascending) and the report."""
    t0, sent0, recv0 = time.perf_counter(), ch.bytes_sent, ch.bytes_received
    ids = _check_ids(ids, ch.me)
    y = ids[_shuffle(ids.size)]
    ch.post(Psi.hello(SUITE, y.size))
    run = _FollowerPSI(ch, y, _size(_recv(ch, "hello"), "the leader"), log)
    pos, pairwise = run.checked_positions(run.answer_until_done())
    final = np.sort(y[pos])
    report = PSIReport(
        int(final.size),
        int(y.size),
        {"leader": run.n_leader},
        {"leader": pairwise},
        time.perf_counter() - t0,
        ch.bytes_sent - sent0,
        ch.bytes_received - recv0,
    )
    return final, report


class _FollowerPSI:
    """F's side: answers the leader's PSI steps by op (a table of handlers) until DONE, then checks every position
    the leader names against the intersection this party computed itself."""

    def __init__(self, ch, y: np.ndarray, n_leader: int, log):
        self.ch, self.y, self.n_leader = ch, y, n_leader
        self.b = new_exponent()
        self.y_ab = np.zeros((y.size, 32), np.uint8)
        self.got = np.zeros(y.size, bool)
        self.x_ab = np.zeros((n_leader, 32), np.uint8)
        self.x_got = np.zeros(n_leader, bool)
        self.positions: list[np.ndarray] = []
        self.expected_positions = 0
        self.progress = _Progress(log, "with the leader", y.size + n_leader)

    def answer_until_done(self) -> int:
        """Answer mask / double / leader / result until DONE; the size DONE announces."""
        handlers = {
            "mask": self._on_mask,
            "double": self._on_double,
            "leader": self._on_leader,
            "result": self._on_result,
        }
        while True:
            msg = _recv(self.ch, None)
            if msg.op == "done":
                return msg.size
            if msg.op not in handlers:
                raise PSIError(f"unexpected PSI {msg.op} from the leader")
            handlers[msg.op](msg)

    def _on_mask(self, msg: Psi) -> None:
        start, stop = _range(msg, "the leader", self.y.size)
        self.ch.post(Psi.chunk("mask", start, stop, as_wire(mask_ids(self.y[start:stop], self.b))))
        self.progress.add(stop - start)

    def _on_double(self, msg: Psi) -> None:
        start, stop = _range(msg, "the leader", self.y.size)
        self.y_ab[start:stop] = _points(msg, "the leader")
        self.got[start:stop] = True

    def _on_leader(self, msg: Psi) -> None:
        start, stop = _range(msg, "the leader", self.n_leader)
        try:
            out = raise_to(_points(msg, "the leader"), self.b)
        except PointError as e:
            raise PSIError(f"PSI leader chunk {start}..{stop} from the leader: {e}") from None
        self.x_ab[start:stop] = out
        self.x_got[start:stop] = True
        self.ch.post(Psi.chunk("leader", start, stop, as_wire(out)))
        self.progress.add(stop - start)

    def _on_result(self, msg: Psi) -> None:  # positions int64 (stop - start,), start < stop <= total (by parse)
        if msg.start != self.expected_positions or msg.total > self.y.size:
            raise PSIError(
                f"PSI result from the leader: chunk {msg.start}..{msg.stop} of {msg.total} out of order or malformed"
            )
        self.positions.append(msg.payload.copy())
        self.expected_positions = msg.stop

    def checked_positions(self, size: int) -> tuple[np.ndarray, int]:
        """The positions the leader named, each checked to be an id this party found shared; and the pairwise
        intersection's size."""
        pos = np.concatenate(self.positions) if self.positions else np.empty(0, np.int64)
        if pos.size != size:
            raise PSIError(f"PSI done from the leader announces {size} ids but named {pos.size} positions")
        if not self.got.all() or not self.x_got.all():
            raise PSIError("the leader ended the PSI before every chunk was exchanged")
        if pos.size and (pos.min() < 0 or pos.max() >= self.y.size or np.any(np.diff(pos) <= 0)):
            raise PSIError(
                "PSI result from the leader: positions must be strictly increasing indices of this party's set"
            )
        theirs = point_set(self.x_ab)
        pairwise = sum(1 for k in point_set(self.y_ab) if k in theirs)
        raw = self.y_ab.tobytes()
        for p in pos:
            if raw[32 * p : 32 * p + 32] not in theirs:
                raise PSIError(
                    f"the leader named position {int(p)} as shared, but that id is not in the intersection "
                    f"this party computed; refused"
                )
        return pos, pairwise


def _recv(ch, op: str | None) -> Psi:
    while True:
        msg = ch.expect(
            Psi,
            Wait,
            what=f"PSI {op or 'step'} from the leader at {ch.endpoint}"
            + (" (is the leader running?)" if op == "hello" else ""),
        )
        if isinstance(msg, Wait):
            continue
        if op is not None:
            _op(msg, "the leader", op)
        return msg


# -- leader --------------------------------------------------------------------------------------------
def peer_limit(own: int, max_peer_ids: int | None) -> int:
    """The most ids a follower may declare: data.psi_max_peer_ids, else max(16 x the leader's, 2**20). Every
    declared id costs the leader 32 bytes and an exponentiation, and lets a malicious follower test one id of
    its choice for membership in the leader's set, so the leader bounds it."""
    return min(MAX_IDS, max_peer_ids if max_peer_ids is not None else max(16 * own, 1 << 20))


def _distinct(points: np.ndarray, what: str) -> None:
    """Refuse repeated points: each stands for one id, and a repeat would match several rows to one."""
    rows = np.ascontiguousarray(points, dtype=np.uint8).reshape(-1, 32)
    if np.unique(rows.view(np.dtype((np.void, 32))).ravel()).size != rows.shape[0]:
        raise PSIError(f"{what} holds repeated points (one id each is the protocol)")


def leader_psi(
    ch, followers: list[str], ids: np.ndarray, log=None, max_peer_ids: int | None = None
) -> tuple[np.ndarray, PSIReport]:
    """Run L's side with every follower in turn; return the ids every party holds (ascending) and the report."""
    t0, sent0, recv0 = time.perf_counter(), ch.bytes_sent, ch.bytes_received
    run = _LeaderPSI(ch, followers, _check_ids(ids, ch.me), log)
    sizes = run.agree_sizes(max_peer_ids)
    matched = {f: run.match_with(f, sizes[f]) for f in followers}  # follower -> (leader rows, follower positions)
    keep = np.ones(run.ids.size, bool)
    for rows, _ in matched.values():
        hit = np.zeros(run.ids.size, bool)
        hit[rows] = True
        keep &= hit
    for f, (rows, pos) in matched.items():
        run.send_result(f, np.sort(pos[keep[rows]]))
    final = np.sort(run.ids[keep])
    report = PSIReport(
        int(final.size),
        int(run.ids.size),
        sizes,
        {f: int(matched[f][0].size) for f in followers},
        time.perf_counter() - t0,
        ch.bytes_sent - sent0,
        ch.bytes_received - recv0,
    )
    return final, report


class _LeaderPSI:
    """L's side of the protocol with its followers, one at a time: the hashes of its ids (computed once, chunk by
    chunk) and a WAIT to every follower not being served, so none times out."""

    def __init__(self, ch, followers: list[str], ids: np.ndarray, log):
        self.ch, self.followers, self.ids, self.log = ch, followers, ids, log
        self.keepalive_every = ch.timeout_s / 4
        self.last = {f: time.monotonic() for f in followers}
        self.hashed = np.empty((ids.size, 32), np.uint8)  # H(x): a public function of the ids
        self.is_hashed = np.zeros(ids.size, bool)

    def agree_sizes(self, max_peer_ids: int | None) -> dict[str, int]:
        """Every follower's HELLO (its set size, within this leader's limit), then this leader's HELLO to each."""
        sizes = {}
        for f in self.followers:
            sizes[f] = _size(_leader_recv(self.ch, f, "hello", " (is it running and pointed at this leader?)"), f)
            limit = peer_limit(self.ids.size, max_peer_ids)
            if sizes[f] > limit:
                raise PSIError(
                    f"{f} declares {sizes[f]} ids, above this leader's limit of {limit} "
                    f"(data.psi_max_peer_ids; default max(16 x the leader's {self.ids.size} ids, 2**20))"
                )
        for f in self.followers:
            self.ch.post(f, Psi.hello(SUITE, self.ids.size))
            self.last[f] = time.monotonic()
        return sizes

    def hashes(self, rows: np.ndarray) -> np.ndarray:
        todo = rows[~self.is_hashed[rows]]
        if todo.size:
            self.hashed[todo] = hash_ids(self.ids[todo])
            self.is_hashed[todo] = True
        return self.hashed[rows]

    def keepalive(self, current: str) -> None:
        now = time.monotonic()
        for g in self.followers:
            if g != current and now - self.last[g] >= self.keepalive_every:
                self.ch.post(g, Wait())
                self.last[g] = now

    def match_with(self, f: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The protocol with follower f (n ids): (this leader's rows, f's positions) of the ids both hold."""
        a = new_exponent()
        progress = _Progress(self.log, f"with {f}", n + self.ids.size)
        y_ab = self._double_masks(f, n, a, progress)
        perm = _shuffle(self.ids.size)
        x_ab = np.empty((self.ids.size, 32), np.uint8)
        for start, stop in _chunks(self.ids.size):
            self.ch.post(f, Psi.chunk("leader", start, stop, as_wire(raise_to(self.hashes(perm[start:stop]), a))))
            msg = _leader_recv(self.ch, f, "leader")
            _range(msg, f, self.ids.size, (start, stop))
            x_ab[start:stop] = _points(msg, f)
            self.keepalive(f)
            progress.add(stop - start)
        _distinct(y_ab, f"PSI mask values of {f}")
        _distinct(x_ab, f"PSI leader replies of {f}")
        theirs = point_set(y_ab)
        raw = x_ab.tobytes()
        rows, pos = [], []
        for i in range(self.ids.size):
            j = theirs.get(raw[32 * i : 32 * i + 32])
            if j is not None:
                rows.append(perm[i])
                pos.append(j)
        return np.asarray(rows, np.int64), np.asarray(pos, np.int64)

    def _double_masks(self, f: str, n: int, a, progress) -> np.ndarray:
        """f's masked hashes H(y)^b, chunk by chunk, raised to a and returned to f: H(y)^ab, in f's order."""
        y_ab = np.empty((n, 32), np.uint8)
        for start, stop in _chunks(n):
            self.ch.post(f, Psi.chunk("mask", start, stop))
            msg = _leader_recv(self.ch, f, "mask")
            _range(msg, f, n, (start, stop))
            try:
                y_ab[start:stop] = raise_to(_points(msg, f), a)
            except PointError as e:
                raise PSIError(f"PSI mask chunk {start}..{stop} from {f}: {e}") from None
            self.ch.post(f, Psi.chunk("double", start, stop, as_wire(y_ab[start:stop])))
            self.keepalive(f)
            progress.add(stop - start)
        return y_ab

    def send_result(self, f: str, final_pos: np.ndarray) -> None:
        """f's positions of the ids every party holds (ascending), in chunks, then DONE with their count."""
        for start in range(0, final_pos.size, PSI_RESULT_CHUNK):
            stop = min(start + PSI_RESULT_CHUNK, final_pos.size)
            self.ch.post(f, Psi.result(start, stop, final_pos.size, final_pos[start:stop]))
        self.ch.post(f, Psi.done(final_pos.size))


def _leader_recv(ch, peer: str, op: str, hint: str = "") -> Psi:
    msg = ch.expect(peer, Psi, what=f"PSI {op} from follower {peer}{hint}")
    _op(msg, peer, op)
    return msg


def check_minimum(report: PSIReport, minimum: int, me: str) -> None:
    """Refuse to train on an intersection smaller than data.min_intersection."""
    if report.intersection < minimum:
        raise PSIError(
            f"{me}: the private set intersection holds {report.intersection} ids, below data.min_intersection="
            f"{minimum}; refusing to train (do the parties hold the same kind of ids?)"
        )
