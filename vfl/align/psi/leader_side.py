"""The leader's side of the PSI: every follower in turn, then the intersection over all, named to each.

vfl/align/psi/protocol.py describes the exchange. A follower's PSI may be its reused agreement (vfl/align/psi/reuse.py).
With each follower the chunks stream: up to PSI_WINDOW requests are out before the first reply returns.
"""

from __future__ import annotations

import time

import numpy as np

from vfl.align.psi import dleq
from vfl.align.psi.ecdh import (
    SUITE,
    PointError,
    as_wire,
    hash_slots,
    new_exponent,
    point_set,
    raise_to,
    slot_messages,
)
from vfl.align.psi.protocol import (
    MAX_IDS,
    ONE_RANK,
    PSI_WINDOW,
    Progress,
    PSIError,
    PSIReport,
    check_ids,
    checked_range,
    chunks,
    declared_size,
    distinct,
    expect_op,
    load_agreement,
    on_every_rank,
    padded_size,
    peer_size,
    points_of,
    shuffled_order,
)
from vfl.align.psi.reuse import Agreement, PSICache, new_ticket, ticket_wire
from vfl.distributed.launch import RankEnv
from vfl.wire.messages import Wait
from vfl.wire.psi_messages import PSI_RESULT_CHUNK, Psi


def peer_limit(own: int, max_peer_ids: int | None) -> int:
    """The most ids a follower may declare: data.psi_max_peer_ids, else max(16 x the leader's, 2**20). Every
    declared id costs the leader 32 bytes and an exponentiation, and lets a malicious follower test one id of
    its choice for membership in the leader's set, so the leader bounds it."""
    return min(MAX_IDS, max_peer_ids if max_peer_ids is not None else max(16 * own, 1 << 20))


def leader_psi(
    ch,
    followers: list[str],
    ids: np.ndarray,
    log=None,
    max_peer_ids: int | None = None,
    caches: dict[str, PSICache] | None = None,
    env: RankEnv = ONE_RANK,
    total: int | None = None,
    verify: bool = False,
) -> tuple[np.ndarray, PSIReport]:
    """Run L's side with every follower in turn; return the ids every party holds (ascending) and the report.
    caches: this party's agreement with each follower (vfl/align/psi/reuse.py), reused when both sides prove it;
    env: this rank, whose bucket of ids (vfl/align/psi/buckets.py) each follower's same rank must intersect; total:
    the party's whole set size under N ranks (the bucket is padded to padded_size(total, N)); verify: ask every
    follower to commit to its key and prove every leader reply (data.psi_verify), refusing a chunk whose proof fails.
    A follower may ask this leader the same for its doubles; it then commits to its key and proves them."""
    t0, sent0, recv0 = time.perf_counter(), ch.bytes_sent, ch.bytes_received
    ids = check_ids(ids, ch.me)
    run = _LeaderPSI(ch, followers, ids, log, env, declared_size(ids.size, total, env, ch.me), verify)
    sizes, agreed = run.agree_sizes(peer_limit(ids.size if total is None else total, max_peer_ids), caches or {})
    # follower -> (leader rows, follower positions): positions in its shuffled set, or indices into its cached ids
    matched = {f: run.reused(f, agreed[f].shared) if f in agreed else run.match_with(f, sizes[f]) for f in followers}
    keep = np.ones(run.ids.size, bool)
    for rows, _ in matched.values():
        hit = np.zeros(run.ids.size, bool)
        hit[rows] = True
        keep &= hit
    tickets = {f: new_ticket() for f in followers if f not in agreed}
    for f, (rows, pos) in matched.items():
        if f in tickets:
            ch.post(f, Psi.ticket(ticket_wire(tickets[f])))
        final_pos = np.sort(pos[keep[rows]])
        run.send_result(f, final_pos, all_cached=f in agreed and final_pos.size == pos.size)
    for f, ticket in tickets.items():
        if caches and f in caches:
            caches[f].store(ticket, run.ids, run.ids[matched[f][0]], log)
    final = np.sort(run.ids[keep])
    report = PSIReport(
        int(final.size),
        int(run.ids.size),
        sizes,
        {f: int(matched[f][0].size) for f in followers},
        time.perf_counter() - t0,
        ch.bytes_sent - sent0,
        ch.bytes_received - recv0,
        sorted(agreed),
        run.waited,
    )
    return final, report


class _LeaderPSI:
    """L's side of the protocol with its followers, one at a time: the hashes of its ids (computed once, chunk by
    chunk) and a WAIT to every follower not being served, so none times out."""

    def __init__(self, ch, followers: list[str], ids: np.ndarray, log, env: RankEnv, m: int, verify: bool = False):
        self.ch, self.followers, self.ids, self.log, self.env = ch, followers, ids, log, env
        self.verify = verify  # check every follower's proofs of its leader replies
        self.exponent = {f: new_exponent() for f in followers}  # a fresh a per follower, drawn before the hellos
        self.proves_to: set[str] = set()  # followers that asked for this leader's proofs of its doubles
        self.m = m  # the size this leader declares: its ids and (under N ranks) random padding
        self.keepalive_every = ch.timeout_s / 4
        self.last = {f: time.monotonic() for f in followers}
        self.hashed = np.empty((m, 32), np.uint8)  # H(x): a public function of the ids; then the padding
        self.is_hashed = np.zeros(m, bool)
        self.waited = 0.0  # seconds spent waiting for the followers' hellos (their start), not PSI's work

    def agree_sizes(self, limit: int, caches: dict[str, PSICache]) -> tuple[dict, dict]:
        """Every follower's HELLO (its set size, within this leader's limit for its whole set, padded like a bucket
        under N ranks, and perhaps a reuse offer), then this leader's HELLO to each (with its own proof where it
        accepts the offer): the sizes and the agreements."""
        bucket_limit = padded_size(limit, self.env.ranks)
        sizes, agreed = {}, {}
        for f in self.followers:
            t0 = time.perf_counter()
            hello = _leader_recv(self.ch, f, "hello", " (is it running and pointed at this leader?)")
            self.waited += time.perf_counter() - t0
            sizes[f] = peer_size(hello, f, self.env, "the leader")
            if sizes[f] > bucket_limit:
                raise PSIError(
                    f"{f} declares {sizes[f]} ids, above this leader's limit of {bucket_limit} "
                    f"(data.psi_max_peer_ids; default max(16 x the leader's ids, 2**20)"
                    + (
                        f"; {limit} for the whole set, padded as a bucket of {self.env.ranks})"
                        if self.env.ranks > 1
                        else ")"
                    )
                )
            if hello.verify == 1:
                self.proves_to.add(f)
            if f in caches and (a := self._accept(f, hello.payload, caches[f])) is not None:
                agreed[f] = a
        for f in self.followers:  # in network.followers order on every rank
            if not on_every_rank(f in agreed, f"the reuse {f} offers is accepted", self.log):
                agreed.pop(f, None)
        for f in self.followers:
            offer = agreed[f].offer("leader") if f in agreed else None
            key = dleq.public_key(self.exponent[f]) if f in self.proves_to else None  # committed before any double
            self.ch.post(f, Psi.hello(SUITE, self.m, offer, self.env.rank, self.env.ranks, self.verify, key))
            self.last[f] = time.monotonic()
        return sizes, agreed

    def _accept(self, f: str, offer: np.ndarray | None, cache: PSICache) -> Agreement | None:
        """This leader's cached agreement with f when its own ids are unchanged and f's offer names and proves it."""
        agreed = load_agreement(cache, self.ids, f, self.log)
        if agreed is None or offer is None or not agreed.matches(offer, "follower"):
            if agreed is not None and self.log is not None:
                why = "offers none (its ids or its cache changed)" if offer is None else "offers another PSI or result"
                self.log(f"PSI with {f}: this leader's ids are unchanged, but {f} {why}; running the PSI")
            return None
        return agreed

    def reused(self, f: str, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(this leader's rows, indices into the cached ids) of the ids shared with f at their last agreed PSI."""
        order = np.argsort(self.ids, kind="stable")
        idx = np.searchsorted(self.ids[order], shared)
        if idx.size and (idx.max() >= self.ids.size or np.any(self.ids[order][idx] != shared)):
            raise PSIError(f"the cached intersection with {f} holds ids this party does not hold")  # own digest matched
        if self.log is not None:
            self.log(f"PSI with {f}: both sides' ids are unchanged; reusing the {shared.size} ids agreed before")
        return order[idx], np.arange(shared.size, dtype=np.int64)

    def hashes(self, rows: np.ndarray) -> np.ndarray:
        """H(x) of rows below len(ids), a random element (drawn once, like H(x) computed once for every follower)
        for the padding rows: the same SHA-512 and derivation per row in one call on the same workers
        (ecdh.slot_messages), and then the same scalar multiplication."""
        todo = rows[~self.is_hashed[rows]]
        real = todo < self.ids.size
        self.hashed[todo] = hash_slots(slot_messages(self.ids[np.where(real, todo, 0)], real))  # one call, as alike
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
        a = self.exponent[f]
        progress = Progress(self.log, f"with {f}", n + self.m)
        if self.log is not None and (self.verify or f in self.proves_to):
            self.log(
                f"PSI with {f}: "
                + " and ".join(
                    (["checking its DLEQ proof of every reply (data.psi_verify)"] if self.verify else [])
                    + ([f"proving every double ({f} checks them)"] if f in self.proves_to else [])
                )
            )
        y_ab = self._double_masks(f, n, a, progress)
        perm = shuffled_order(self.m)  # rows >= len(ids): random padding points, never matched
        x_ab = np.empty((self.m, 32), np.uint8)
        parts, sent = chunks(self.m), 0
        x_a = np.empty((self.m, 32), np.uint8) if self.verify else None  # what f's replies must raise
        key = None  # f's key, committed with its first reply
        for i, (start, stop) in enumerate(parts):
            while sent < min(len(parts), i + PSI_WINDOW):  # up to PSI_WINDOW chunks in flight
                s0, s1 = parts[sent]
                out = raise_to(self.hashes(perm[s0:s1]), a)
                if x_a is not None:
                    x_a[s0:s1] = out
                self.ch.post(f, Psi.chunk("leader", s0, s1, as_wire(out)))
                sent += 1
            msg = _leader_recv(self.ch, f, "leader")
            checked_range(msg, f, self.m, (start, stop))
            x_ab[start:stop] = points_of(msg, f)
            if x_a is not None:
                key = key or _follower_key(msg, f)
                _check_reply(msg, f, key, x_a[start:stop], x_ab[start:stop])
            self.keepalive(f)
            progress.add(stop - start)
        distinct(y_ab, f"PSI mask values of {f}")
        distinct(x_ab, f"PSI leader replies of {f}")
        theirs = point_set(y_ab)
        raw = x_ab.tobytes()
        rows, pos = [], []
        for i in range(self.m):
            j = theirs.get(raw[32 * i : 32 * i + 32])
            if j is not None and perm[i] < self.ids.size:
                rows.append(perm[i])
                pos.append(j)
        return np.asarray(rows, np.int64), np.asarray(pos, np.int64)

    def _double_masks(self, f: str, n: int, a, progress) -> np.ndarray:
        """f's masked hashes H(y)^b, chunk by chunk, raised to a and returned to f: H(y)^ab, in f's order."""
        y_ab = np.empty((n, 32), np.uint8)
        key = dleq.public_key(a) if f in self.proves_to else None  # f checks every double against it
        parts, asked = chunks(n), 0
        for i, (start, stop) in enumerate(parts):
            while asked < min(len(parts), i + PSI_WINDOW):  # up to PSI_WINDOW masks asked before a reply
                self.ch.post(f, Psi.chunk("mask", *parts[asked]))
                asked += 1
            msg = _leader_recv(self.ch, f, "mask")
            checked_range(msg, f, n, (start, stop))
            masks = points_of(msg, f)
            try:
                y_ab[start:stop] = raise_to(masks, a)
            except PointError as e:
                raise PSIError(f"PSI mask chunk {start}..{stop} from {f}: {e}") from None
            proof = dleq.generate_proof(a, key, masks, y_ab[start:stop]) if key is not None else None
            self.ch.post(f, Psi.chunk("double", start, stop, as_wire(y_ab[start:stop]), proof))
            self.keepalive(f)
            progress.add(stop - start)
        return y_ab

    def send_result(self, f: str, final_pos: np.ndarray, all_cached: bool = False) -> None:
        """f's positions of the ids every party holds (ascending), in chunks, then DONE with their count (all_cached:
        a reusing f keeps every id it cached, and DONE alone says so)."""
        for start in range(0, 0 if all_cached else final_pos.size, PSI_RESULT_CHUNK):
            stop = min(start + PSI_RESULT_CHUNK, final_pos.size)
            self.ch.post(f, Psi.result(start, stop, final_pos.size, final_pos[start:stop]))
        self.ch.post(f, Psi.done(final_pos.size))


def _follower_key(msg: Psi, f: str) -> bytes:
    """The key f commits to with its first leader reply, which every reply's proof must verify against."""
    if msg.key is None:
        raise PSIError(
            f"PSI leader reply {msg.start}..{msg.stop} from {f} commits to no public key, but this leader checks its "
            "followers' proofs (data.psi_verify); refused"
        )
    return bytes.fromhex(msg.key)


def _check_reply(msg: Psi, f: str, key: bytes, sent: np.ndarray, got: np.ndarray) -> None:
    """Refuse a leader reply of f unless its proof shows every value is this leader's raised to f's one exponent."""
    if msg.start > 0 and msg.key is not None and bytes.fromhex(msg.key) != key:
        raise PSIError(f"PSI leader reply {msg.start}..{msg.stop} from {f} names another key than its first; refused")
    proof = bytes.fromhex(msg.proof) if msg.proof is not None else b""
    if not dleq.verify_proof(key, sent, got, proof):
        raise PSIError(
            f"PSI leader reply {msg.start}..{msg.stop} from {f}: "
            + ("it carries no DLEQ proof" if msg.proof is None else "its DLEQ proof does not verify")
            + f" that every value is this leader's raised to the one exponent of the key {f} committed to; refused"
        )


def _leader_recv(ch, peer: str, op: str, hint: str = "") -> Psi:
    msg = ch.expect(peer, Psi, what=f"PSI {op} from follower {peer}{hint}")
    expect_op(msg, peer, op)
    return msg
