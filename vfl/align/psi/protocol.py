"""The PSI exchange over the parties' CurveZMQ channel, before training: PSI messages with deadlines and size bounds.

Leader L (ids X, fresh secret a per follower) and follower F (ids Y, secret b), every step driven by L:

    F -> L  PSI hello  {suite, n: |Y|, [rank, ranks], [verify]} [+ reuse offer]
    L -> F  PSI hello  {suite, n: |X|, [rank, ranks], [verify], [key: a G]} [+ reuse proof: then only the result
            and DONE follow]
    for each chunk of F's shuffled Y (up to PSI_WINDOW masks asked before their doubles return):
      L -> F  PSI mask {start, stop}                   F -> L  PSI mask {start, stop} + H(y)^b
      L -> F  PSI double {start, stop, [proof]} + (H(y)^b)^a    (F keeps them)
    for each chunk of L's shuffled X (up to PSI_WINDOW chunks before their replies return):
      L -> F  PSI leader {start, stop} + H(x)^a
      F -> L  PSI leader {start, stop, [key: b G, first chunk only], [proof]} + (H(x)^a)^b
    L matches H(x)^ab with H(y)^ab, intersects over all followers, then
      L -> F  PSI ticket + T (32 random bytes: the key of the next run's reuse, vfl/align/psi/reuse.py)
      L -> F  PSI result {start, stop, total} + positions (in F's shuffled order) of the final intersection
      L -> F  PSI done {size}

[verify], [key] and [proof] travel only with data.psi_verify: verify in the hello of a party that checks the other's
proofs, the other's key and the RFC 9497 proof of each of its chunks (below; vfl/align/psi/dleq.py).

The window streams the chunks over a long round trip (the time is about bytes / bandwidth plus a few RTTs, and each
side computes while the other's chunks travel), never chunks x RTT. F takes L's steps in exactly this order, each
chunk once (a repeated mask request would show which slots are padding,
fresh each time; a double after L's chunks would replace values L committed to with ones it made to match), refuses
repeated H(y)^ab (a copy of a matching value would match a second id), and checks that every position L names is a
match by its own computation (H(y)^ab among the H(x)^ab it made). Without a proof that every double is its input
raised to one a, L can still move F's values between slots, or raise some to a second exponent a' and send H(x)^a'
for ids x it holds among its own rows: a slot y_i then matches when another slot holds such an x, so F accepts an id
L does not hold. L compares the H(y)^ab it computed with the (H(x)^a)^b that F returns, which F alone computes: a
malicious F can return a copy of some H(y_j)^ab for leader row i and claim a match that is not there. That poisons
the alignment (row x_i trained against y_j), and with several followers a follower claiming every row learns how
many of the leader's ids the others hold; under N ranks, by claiming every row, it counts the leader's real ids in
its bucket (the padding rows are never named back), which the padding is meant to hide.

Verified PSI (data.psi_verify, per party: "check the other's proofs"; vfl/align/psi/dleq.py) closes both. A party
that checks says so in its hello (verify); the prover commits to its key k G before any value it proves (L in its
hello, F with its first leader reply), and every double of L (k = a) or leader reply of F (k = b) carries the RFC 9497
batched DLEQ proof that each of its values is the chunk it answers raised to k; a chunk whose proof fails is refused
in one line naming it, and the chunks keep streaming (one proof per chunk). What stays unproven, and why that is
enough: L's own rows H(x)^a and F's masks H(y)^b are each party's input (choosing them is choosing one's set); with
L's doubles bound to a, a slot y_i matches only a row a H(y_i), which L can make only from y_i itself (computing it
from H(y_i)^b would solve CDH); with F's replies bound to b, L's row of x matches only a slot whose mask F sent as
b H(x), before L's rows arrived, so only for an id x F chose to include. The known attacks are in
tests/align/test_psi_verified.py, and the cost, and why verification is not the default, in docs/psi.md. Both sides
shuffle with the OS's randomness, so a position says nothing about an id's rank. Each side learns the other's set
size, and the intersection (F: its ids at the positions L names; L: its ids whose H(x)^ab matched). A point is a
32-byte ristretto255 encoding (the suite, named in both HELLOs, is in ecdh.py; carried as 4 int64), a message at most
CHUNK_POINTS points; a set above MAX_IDS ids is refused before anything is computed. Every receive has the channel's
deadline; the leader sends WAIT to followers that wait for their turn. Under N ranks per party, rank r of each party
runs this on bucket r of its ids (vfl/align/psi/buckets.py); both hellos name the rank, and a peer of another rank
count or rank is refused before any id is hashed. Reuse of an unchanged pair of sets, and why it keeps these
guarantees: vfl/align/psi/reuse.py. This module holds what both sides share (the bounds, the report, the checks of each step received, the wait);
F's side is follower_side.py, L's side leader_side.py.
"""

from __future__ import annotations

import contextvars
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vfl.align.psi.ecdh import (
    SUITE,
    SodiumUnavailable,
    from_wire,
    mask_slots,
    slot_messages,
    sodium,
)
from vfl.align.psi.reuse import Agreement, PSICache
from vfl.distributed.launch import RankEnv
from vfl.distributed.pairing import rank_problems
from vfl.wire.frames import MAX_HEADER_BYTES, WireError
from vfl.wire.messages import Wait
from vfl.wire.psi_messages import PSI_CHUNK_POINTS, PSI_MAX_IDS, Psi

CHUNK_POINTS = PSI_CHUNK_POINTS  # 256 KiB of points per message: a chunk's exponentiations stay well inside a deadline
MAX_IDS = PSI_MAX_IDS  # ids per party (134 M; the Kaggle Criteo set has 45.8 M)
MAX_PSI_MESSAGE_BYTES = CHUNK_POINTS * 32 + MAX_HEADER_BYTES + 1024  # the largest PSI message
PSI_WINDOW = 4  # chunks the leader asks for before the first reply returns: 1 MiB in flight, within RCVHWM (4)
ONE_RANK = RankEnv()


class PSIError(WireError):
    """The intersection cannot be agreed: a bad PSI message, a set too large, or an intersection too small."""


@dataclass
class PSIReport:
    """What a party learned and spent."""

    intersection: int = 0  # size of the final (all-party) intersection
    own_ids: int = 0
    peer_ids: dict[str, int] = field(default_factory=dict)  # the other side's set size(s)
    pairwise: dict[str, int] = field(default_factory=dict)  # leader: |X & Y_f| per follower; follower: |X & Y|
    seconds: float = 0.0  # all of it: the wait for the peers' hellos and the work
    bytes_sent: int = 0
    bytes_received: int = 0
    reused: list[str] = field(default_factory=list)  # peers whose earlier agreed intersection was reused
    wait_seconds: float = 0.0  # of `seconds`, waiting for the peers' PSI hellos (a peer started later, say)

    @property
    def work_seconds(self) -> float:
        """PSI's own seconds: all of it but the wait for the peers to say hello."""
        return max(self.seconds - self.wait_seconds, 0.0)

    def timing(self, peers: str) -> str:
        """`12.3 s (10.1 s of work, 2.2 s waiting for PEERS to start)` for a log line."""
        return f"{self.seconds:.1f} s ({self.work_seconds:.1f} s of work, {self.wait_seconds:.1f} s waiting for {peers} to start)"

    def as_dict(self) -> dict:
        return {
            "suite": SUITE,
            "intersection": self.intersection,
            "own_ids": self.own_ids,
            "peer_ids": self.peer_ids,
            "pairwise": self.pairwise,
            "seconds": round(self.seconds, 3),
            "work_seconds": round(self.work_seconds, 3),
            "wait_seconds": round(self.wait_seconds, 3),
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "reused": self.reused,
        }


class Progress:
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


def chunks(n: int):
    return [(i, min(i + CHUNK_POINTS, n)) for i in range(0, n, CHUNK_POINTS)]


def shuffled_order(n: int) -> np.ndarray:
    return np.random.default_rng(secrets.randbits(128)).permutation(n)


def checked_range(msg: Psi, who: str, n: int, want: tuple[int, int] | None = None) -> tuple[int, int]:
    """The chunk a mask / double / leader message names (a chunk of 1..CHUNK_POINTS by parse), within a set of n."""
    start, stop = msg.start, msg.stop
    if stop > n or (want is not None and (start, stop) != want):
        raise PSIError(
            f"PSI {msg.op} from {who}: range {start}..{stop} "
            + (f"is not the requested {want[0]}..{want[1]}" if want else f"is not a chunk of 1..{CHUNK_POINTS} of {n}")
        )
    return start, stop


def points_of(msg: Psi, who: str) -> np.ndarray:
    """The message's points (int64 (stop - start, 4) when present, by parse) as bytes."""
    if msg.payload is None:
        raise PSIError(f"PSI {msg.op} from {who}: expected 1 tensor, got 0")
    return from_wire(msg.payload)


def expect_op(msg: Psi, who: str, want: str) -> None:
    if msg.op != want:
        raise PSIError(f"expected PSI {want} from {who}, got PSI {msg.op!r}")


def peer_size(msg: Psi, who: str, env: RankEnv, me: str) -> int:
    """The set size a PSI hello declares, once its suite and rank are this party's."""
    if msg.suite != SUITE:
        raise PSIError(f"{who} runs PSI suite {msg.suite[:80]!r}, this party runs {SUITE!r}")
    problems = rank_problems(who, msg, env, me)
    if problems:
        raise PSIError(problems[0])
    return msg.n


def padded_size(total: int, ranks: int) -> int:
    """The size each rank declares for its bucket of a party's `total` ids under N ranks: a bucket count's mean plus
    8 standard deviations plus 8 (it is Binomial(total, 1/N)), so the declared sizes are a function of the whole set
    size alone, never of which bucket holds which ids. A bucket above it: never for 8 ids or fewer, else at most
    exp(-t^2 / (2 (var + t/3))) by Bernstein's inequality, below 1e-13 from 10^4 ids. One rank: the set size."""
    if ranks == 1:
        return total
    p = 1.0 / ranks
    return min(MAX_IDS, math.ceil(total * p + 8 * math.sqrt(total * p * (1 - p)) + 8))


def declared_size(n: int, total: int | None, env: RankEnv, who: str) -> int:
    """What this rank's PSI hello declares for its n ids: n for one rank, else padded_size(total, N)."""
    m = padded_size(n if total is None else total, env.ranks)
    if n > m:
        raise PSIError(
            f"{who}: rank {env.rank} of {env.ranks} holds {n} of the party's {total} ids, above the padded bucket size "
            f"{m} that hides which bucket holds which ids (an event of probability below 1e-13); run fewer ranks"
        )
    return m


def padded_slots(ids: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """ids in m shuffled slots (OS randomness) and which slots are real; the others carry random padding points."""
    order = shuffled_order(m)
    y, real = np.zeros(m, np.int64), np.zeros(m, bool)
    y[order[: ids.size]] = ids
    real[order[: ids.size]] = True
    return y, real


def masked(ids: np.ndarray, real: np.ndarray, exponent: bytes) -> np.ndarray:
    """H(id)^exponent in the real slots, R^exponent for a fresh random element R in the padding slots, all in one
    call: the same SHA-512, element derivation and scalar multiplication per slot, on the same workers
    (ecdh.slot_messages), so their timing does not count the padding."""
    return mask_slots(slot_messages(ids, real), exponent)


def distinct(points: np.ndarray, what: str) -> None:
    """Refuse repeated points: each stands for one id, and a repeat would match several rows to one."""
    rows = np.ascontiguousarray(points, dtype=np.uint8).reshape(-1, 32)
    if np.unique(rows.view(np.dtype((np.void, 32))).ravel()).size != rows.shape[0]:
        raise PSIError(f"{what} holds repeated points (one id each is the protocol)")


def check_ids(ids: np.ndarray, who: str) -> np.ndarray:
    try:
        sodium()
    except SodiumUnavailable as e:
        raise PSIError(f"{who}: {e}") from None
    ids = np.asarray(ids)
    if ids.dtype.kind != "i" or ids.dtype.itemsize != 8:  # a uint64 or float array would wrap or truncate silently
        raise PSIError(f"{who}'s ids must be int64 (vfl/data/ids.py), got {ids.dtype}")
    if ids.size == 0 or ids.size > MAX_IDS:
        raise PSIError(f"{who} holds {ids.size} ids; PSI needs 1..{MAX_IDS}")
    ordered = np.sort(ids)  # numpy 2's np.unique takes 1 s for 10^6 ids, a sort 0.01 s
    if np.any(ordered[1:] == ordered[:-1]):
        raise PSIError(f"{who}'s ids are not unique (re-run `python -m vfl.data prepare`, which refuses duplicates)")
    return ids


def load_agreement(cache: PSICache | None, ids: np.ndarray, peer: str, log) -> Agreement | None:
    """This party's cached agreement with peer when its ids are unchanged; None (and why, in the log) else."""
    agreed = cache.load(ids) if cache is not None else None
    if cache is not None and agreed is None and log is not None:
        log(f"PSI with {peer}: nothing to reuse ({cache.refused})")
    return agreed


# The party's ranks' AND of a reuse decision (set by vfl/align/psi/buckets.intersect_on_ranks around each rank's PSI):
# one rank's bucket reused while another's runs would tell the peer which buckets of this party's set changed.
RANKS_AGREE: contextvars.ContextVar[Callable[[bool], bool] | None] = contextvars.ContextVar("psi_ranks_agree")


def on_every_rank(flag: bool, what: str, log) -> bool:
    """flag when it holds on every rank of this party (one rank: flag), so the peer sees one reuse bit per run."""
    agree = RANKS_AGREE.get(None)
    every = flag if agree is None else agree(flag)
    if flag and not every and log is not None:
        log(f"PSI: {what} on this rank, but not on every rank of this party; running the PSI on all of them")
    return every


WAIT_BASE_S = 3600.0  # the longest run of WAITs a follower takes from the leader: 1 h, plus per leader id
WAIT_PER_LEADER_ID_S = 1e-3  # ~10 other followers of the leader's size at 100 core-us per id and side (docs/psi.md)


def wait_limit(n_leader: int = 0) -> float:
    """How long a follower keeps taking WAITs in a row (the leader serves other followers meanwhile): a leader that
    keeps sending them holds it no longer than this (each WAIT would otherwise renew the channel's deadline)."""
    return WAIT_BASE_S + WAIT_PER_LEADER_ID_S * n_leader


def receive_step(ch, op: str | None, wait_s: float | None = None) -> Psi:
    t0, limit = time.monotonic(), wait_limit() if wait_s is None else wait_s
    while True:
        msg = ch.expect(
            Psi,
            Wait,
            what=f"PSI {op or 'step'} from the leader at {ch.endpoint}"
            + (" (is the leader running?)" if op == "hello" else ""),
        )
        if isinstance(msg, Wait):
            if time.monotonic() - t0 > limit:
                raise PSIError(
                    f"the leader has sent only WAIT for {time.monotonic() - t0:.0f} s, above this follower's limit of "
                    f"{limit:.0f} s for its turn in the PSI (1 h + 1 ms per leader id); refused"
                )
            continue
        if op is not None:
            expect_op(msg, "the leader", op)
        return msg


def check_minimum(report: PSIReport, minimum: int, me: str) -> None:
    """Refuse to train on an intersection smaller than data.min_intersection."""
    if report.intersection < minimum:
        raise PSIError(
            f"{me}: the private set intersection holds {report.intersection} ids, below data.min_intersection="
            f"{minimum}; refusing to train (do the parties hold the same kind of ids?)"
        )
