"""The follower's side of the ECDH-PSI (vfl/align/psi/protocol.py describes the exchange): answer the leader's steps.

F answers each of L's steps in the protocol's order, each chunk once, refuses repeated doubles, checks every position
L names against its own matches, checks L's DLEQ proofs under data.psi_verify and proves its own replies when L asks;
with a reused agreement (vfl/align/psi/reuse.py) only the final positions travel.
"""

from __future__ import annotations

import time

import numpy as np

from vfl.align.psi import dleq
from vfl.align.psi.ecdh import (
    SUITE,
    PointError,
    as_wire,
    new_exponent,
    point_set,
    raise_to,
    sodium,
)
from vfl.align.psi.protocol import (
    MAX_IDS,
    ONE_RANK,
    Progress,
    PSIError,
    PSIReport,
    check_ids,
    checked_range,
    chunks,
    declared_size,
    distinct,
    load_agreement,
    masked,
    on_every_rank,
    padded_size,
    padded_slots,
    peer_size,
    points_of,
    receive_step,
    wait_limit,
)
from vfl.align.psi.reuse import PSICache, ticket_from_wire
from vfl.distributed.launch import RankEnv
from vfl.wire.psi_messages import Psi


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
    hello = receive_step(ch, "hello")  # the leader answers once every follower said hello: the wait for the parties
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
    while (msg := receive_step(ch, None, wait_limit(n_leader))).op != "done":
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
        while (msg := receive_step(self.ch, None, wait_limit(self.n_leader))).op == "result":
            self.positions.add(msg)
        if msg.op != "done":
            raise PSIError(f"PSI {msg.op} from the leader out of order: expected result or done after the ticket")
        return msg.size

    def _masks_and_doubles(self, parts: list[tuple[int, int]]) -> None:
        """Every chunk's mask request, then its double, in chunk order; masks may run ahead of doubles."""
        asked, doubled = 0, 0
        while doubled < len(parts):
            msg = receive_step(self.ch, None, wait_limit(self.n_leader))
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
        msg = receive_step(self.ch, None, wait_limit(self.n_leader))
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
