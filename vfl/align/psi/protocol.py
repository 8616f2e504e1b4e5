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
guarantees: vfl/align/psi/reuse.py. This module holds the shared pieces and F's side; L's side is leader_side.py.
"""

from __future__ import annotations

import contextvars
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from vfl.align.psi import dleq
from vfl.align.psi.ecdh import (
    SUITE,
    PointError,
    SodiumUnavailable,
    as_wire,
    from_wire,
    mask_slots,
    new_exponent,
    point_set,
    raise_to,
    slot_messages,
    sodium,
)
from vfl.align.psi.reuse import Agreement, PSICache, ticket_from_wire
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


# -- follower ------------------------------------------------------------------------------------------
def follower_psi(
    ch,
    ids: np.ndarray,
    log=None,
    cache: PSICache | None = None,
    env: RankEnv = ONE_RANK,
    total: int | None = None,
    max_peer_ids: int | None = None,
    verify: bool = False,
) -> tuple[np.ndarray, PSIReport]:
    """Run F's side over a FollowerChannel; return the ids of the final intersection (ascending) and the report.
    cache: this party's agreement with the leader (vfl/align/psi/reuse.py), offered when its ids are unchanged;
    env: this rank, whose bucket of ids (vfl/align/psi/buckets.py) the leader's same rank must intersect; total: the
    party's whole set size under N ranks (the bucket is padded to padded_size(total, N)); max_peer_ids: the most ids
    the leader may declare (data.psi_max_peer_ids; unset: MAX_IDS), refused before anything is allocated for them;
    verify: ask the leader to commit to its key and prove every double (data.psi_verify), refusing a chunk whose
    proof fails. The leader may ask this follower the same for its leader replies; it then proves them."""
    t0, sent0, recv0 = time.perf_counter(), ch.bytes_sent, ch.bytes_received
    ids = check_ids(ids, ch.me)
    m = declared_size(ids.size, total, env, ch.me)
    agreed = load_agreement(cache, ids, "the leader", log)
    if not on_every_rank(agreed is not None, "this follower could offer reuse", log):
        agreed = None
    ch.post(Psi.hello(SUITE, m, agreed.offer("follower") if agreed else None, env.rank, env.ranks, verify))
    waited = time.perf_counter()
    hello = _recv(ch, "hello")  # the leader answers once every follower said hello: the wait for the parties
    waited = time.perf_counter() - waited
    n_leader = peer_size(hello, "the leader", env, "this follower")
    if n_leader > (limit := padded_size(MAX_IDS if max_peer_ids is None else max_peer_ids, env.ranks)):
        raise PSIError(
            f"the leader declares {n_leader} ids, above this follower's limit of {limit} (data.psi_max_peer_ids"
            + (f", padded as a bucket of {env.ranks})" if env.ranks > 1 else ")")
        )
    if hello.payload is not None:  # the leader accepts the offer and proves the same agreement
        if agreed is None or not agreed.matches(hello.payload, "leader"):
            raise PSIError("the leader's PSI hello claims a reuse that this party's cached PSI does not prove; refused")
        final, pairwise = agreed.shared[_reused_positions(ch, agreed.shared.size, n_leader)], agreed.shared.size
    else:
        y, real = padded_slots(ids, m)
        run = _FollowerPSI(ch, y, real, n_leader, log, leader_key(hello) if verify else None, hello.verify == 1)
        if log is not None and (verify or hello.verify == 1):
            log(
                "PSI with the leader: "
                + " and ".join(
                    (["checking its DLEQ proof of every double (data.psi_verify)"] if verify else [])
                    + (["proving every reply (the leader checks them)"] if hello.verify == 1 else [])
                )
            )
        pos, shared = run.checked_positions(run.answer_until_done())
        final, pairwise = np.sort(y[pos]), int(shared.sum())
        if cache is not None and run.ticket is not None:
            cache.store(run.ticket, ids, y[shared], log)
    report = PSIReport(
        int(final.size),
        int(ids.size),
        {"leader": n_leader},
        {"leader": int(pairwise)},
        time.perf_counter() - t0,
        ch.bytes_sent - sent0,
        ch.bytes_received - recv0,
        ["leader"] if hello.payload is not None else [],
        waited,
    )
    return final, report


def leader_key(hello: Psi) -> bytes:
    """The key the leader's hello commits to, which every proof of its doubles must verify against."""
    if hello.key is None:
        raise PSIError(
            "the leader's PSI hello commits to no public key, but this follower checks the leader's proofs "
            "(data.psi_verify); refused"
        )
    key = bytes.fromhex(hello.key)
    if sodium().crypto_core_ristretto255_is_valid_point(key) != 1 or not any(key):  # the identity proves nothing
        raise PSIError(
            f"the leader's PSI hello commits to key {hello.key[:16]}..., not a ristretto255 element other than the "
            "identity; refused"
        )
    return key


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


class _Positions:
    """The positions the leader names in PSI result chunks, in order, then checked against a set of n."""

    def __init__(self, n: int):
        self.n, self.parts, self.next = n, [], 0

    def add(self, msg: Psi) -> None:  # positions int64 (stop - start,), start < stop <= total (by parse)
        if msg.start != self.next or msg.total > self.n:
            raise PSIError(
                f"PSI result from the leader: chunk {msg.start}..{msg.stop} of {msg.total} out of order or malformed"
            )
        self.parts.append(msg.payload.copy())
        self.next = msg.stop

    def checked(self, size: int) -> np.ndarray:
        pos = np.concatenate(self.parts) if self.parts else np.empty(0, np.int64)
        if pos.size != size:
            raise PSIError(f"PSI done from the leader announces {size} ids but named {pos.size} positions")
        if pos.size and (pos.min() < 0 or pos.max() >= self.n or np.any(np.diff(pos) <= 0)):
            raise PSIError(
                "PSI result from the leader: positions must be strictly increasing indices of this party's set"
            )
        return pos


def _reused_positions(ch, n: int, n_leader: int) -> np.ndarray:
    """Reuse: the final ids as strictly increasing indices into this party's cached shared ids (n of them); DONE
    with no result before it names all n (the only n strictly increasing indices of n)."""
    positions = _Positions(n)
    while (msg := _recv(ch, None, wait_limit(n_leader))).op != "done":
        if msg.op != "result":
            raise PSIError(f"unexpected PSI {msg.op} from the leader after both agreed to reuse their intersection")
        positions.add(msg)
    if not positions.parts and msg.size == n:
        return np.arange(n, dtype=np.int64)
    return positions.checked(msg.size)


class _FollowerPSI:
    """F's side as a strict state machine: the leader's steps in the protocol's exact order, each chunk once (the
    mask request and its double for each chunk of F's set, then the leader chunks of L's set, then one ticket, the
    result chunks and DONE); anything else is refused in one line. Then every position the leader names is checked
    against the intersection this party computed itself."""

    def __init__(self, ch, y: np.ndarray, real: np.ndarray, n_leader: int, log, key=None, prove: bool = False):
        self.ch, self.y, self.real, self.n_leader = ch, y, real, n_leader
        self.b = new_exponent()
        self.leader_key = key  # the leader's committed key: every double's proof is checked against it
        self.own_key = dleq.public_key(self.b) if prove else None  # the leader asked: every leader reply is proven
        self.masks = np.zeros((y.size, 32), np.uint8) if key is not None else None  # what the doubles must raise
        try:
            self.y_ab, self.x_ab = np.zeros((y.size, 32), np.uint8), np.zeros((n_leader, 32), np.uint8)
        except MemoryError:
            raise PSIError(
                f"this follower cannot hold {y.size + n_leader} points of 32 bytes for its {y.size} and the leader's "
                f"{n_leader} ids; lower data.psi_max_peer_ids or free memory"
            ) from None
        self.positions = _Positions(y.size)
        self.ticket: bytes | None = None
        self.progress = Progress(log, "with the leader", y.size + n_leader)

    def answer_until_done(self) -> int:
        """Answer the steps in order until DONE; the size DONE announces. A chunk asked twice would let the leader
        tell padding from real slots (fresh padding each time) or, after its own chunks, replace the double-masked
        values it committed to with values it made to match; so each is taken once, in this order only. The leader
        may ask for the masks of up to PSI_WINDOW chunks before their doubles return (a window that streams over a
        long round trip): the masks come in chunk order, each double after its chunk's mask, also in order."""
        self._masks_and_doubles(chunks(self.y.size))
        distinct(self.y_ab, "the leader's PSI double values")  # a copy of a matching value would match a second id
        for want in chunks(self.n_leader):
            self._on_leader(self._step("leader", want))
        self.ticket = ticket_from_wire(self._step("ticket").payload)
        while (msg := _recv(self.ch, None, wait_limit(self.n_leader))).op == "result":
            self.positions.add(msg)
        if msg.op != "done":
            raise PSIError(f"PSI {msg.op} from the leader out of order: expected result or done after the ticket")
        return msg.size

    def _masks_and_doubles(self, parts: list[tuple[int, int]]) -> None:
        """Every chunk's mask request, then its double, in chunk order; masks may run ahead of doubles."""
        asked, doubled = 0, 0
        while doubled < len(parts):
            msg = _recv(self.ch, None, wait_limit(self.n_leader))
            if msg.op == "mask" and asked < len(parts):
                checked_range(msg, "the leader", self.y.size, parts[asked])
                self._on_mask(msg)
                asked += 1
            elif msg.op == "double" and doubled < asked:
                checked_range(msg, "the leader", self.y.size, parts[doubled])
                self._on_double(msg)
                doubled += 1
            else:
                wants = ([f"mask {parts[asked][0]}..{parts[asked][1]}"] if asked < len(parts) else []) + (
                    [f"double {parts[doubled][0]}..{parts[doubled][1]}"] if doubled < asked else []
                )
                raise PSIError(
                    f"PSI {msg.op} from the leader out of order: expected PSI {' or '.join(wants)} (each step once, "
                    "in order)"
                )

    def _step(self, op: str, want: tuple[int, int] | None = None) -> Psi:
        """The next PSI message, which must be op (for the chunk want)."""
        msg = _recv(self.ch, None, wait_limit(self.n_leader))
        if msg.op != op:
            where = f" {want[0]}..{want[1]}" if want else ""
            raise PSIError(
                f"PSI {msg.op} from the leader out of order: expected PSI {op}{where} (each step once, in order)"
            )
        if want is not None:
            checked_range(msg, "the leader", self.n_leader if op == "leader" else self.y.size, want)
        return msg

    def _on_mask(self, msg: Psi) -> None:
        start, stop = checked_range(msg, "the leader", self.y.size)
        out = masked(self.y[start:stop], self.real[start:stop], self.b)
        if self.masks is not None:
            self.masks[start:stop] = out
        self.ch.post(Psi.chunk("mask", start, stop, as_wire(out)))
        self.progress.add(stop - start)

    def _on_double(self, msg: Psi) -> None:
        start, stop = checked_range(msg, "the leader", self.y.size)
        points = points_of(msg, "the leader")
        if self.leader_key is not None:
            proof = bytes.fromhex(msg.proof) if msg.proof is not None else b""
            if not dleq.verify_proof(self.leader_key, self.masks[start:stop], points, proof):
                raise PSIError(
                    f"PSI double {start}..{stop} from the leader: "
                    + ("it carries no DLEQ proof" if msg.proof is None else "its DLEQ proof does not verify")
                    + " that every value is this follower's raised to the one exponent of the key the leader "
                    "committed to; refused"
                )
        self.y_ab[start:stop] = points

    def _on_leader(self, msg: Psi) -> None:
        start, stop = checked_range(msg, "the leader", self.n_leader)
        points = points_of(msg, "the leader")
        try:
            out = raise_to(points, self.b)
        except PointError as e:
            raise PSIError(f"PSI leader chunk {start}..{stop} from the leader: {e}") from None
        self.x_ab[start:stop] = out
        proof = dleq.generate_proof(self.b, self.own_key, points, out) if self.own_key is not None else None
        key = self.own_key if start == 0 else None  # committed once, with the first reply
        self.ch.post(Psi.chunk("leader", start, stop, as_wire(out), proof, key))
        self.progress.add(stop - start)

    def checked_positions(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The positions the leader named, each checked to be an id this party found shared; and which of this
        party's (shuffled) ids it found shared with the leader (its pairwise intersection, a bool mask)."""
        pos = self.positions.checked(size)
        theirs = point_set(self.x_ab)
        raw = self.y_ab.tobytes()
        shared = np.fromiter((raw[32 * i : 32 * i + 32] in theirs for i in range(self.y.size)), bool, self.y.size)
        shared &= self.real  # a padding slot is never shared (nor can a leader make it match without b)
        bad = pos[~shared[pos]] if pos.size else pos
        if bad.size:
            raise PSIError(
                f"the leader named position {int(bad[0])} as shared, but that id is not in the intersection "
                f"this party computed; refused"
            )
        return pos, shared


WAIT_BASE_S = 3600.0  # the longest run of WAITs a follower takes from the leader: 1 h, plus per leader id
WAIT_PER_LEADER_ID_S = 1e-3  # ~10 other followers of the leader's size at 100 core-us per id and side (docs/psi.md)


def wait_limit(n_leader: int = 0) -> float:
    """How long a follower keeps taking WAITs in a row (the leader serves other followers meanwhile): a leader that
    keeps sending them holds it no longer than this (each WAIT would otherwise renew the channel's deadline)."""
    return WAIT_BASE_S + WAIT_PER_LEADER_ID_S * n_leader


def _recv(ch, op: str | None, wait_s: float | None = None) -> Psi:
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
