"""PSI across ranks: rank r of every party intersects the ids in bucket r of a public hash, and the party gathers them.

An id's bucket is splitmix64(id XOR a fixed salt) mod N (privacy/public_hash.py), a public function every party
computes alike, so ids equal across parties fall in the same bucket and the intersection of the whole sets is the
union over r of the intersections of bucket r (the buckets partition every set the same way). Rank r of a party
holds a channel to rank r of every other party (vfl/distributed/pairing.py), runs the ordinary PSI there on its
bucket, and the party's ranks all-gather their parts: the result is the one-rank PSI's, id for id (tests).

What this adds to what each side learns: nothing against an honest peer. Each rank declares, and sends points for, padded_size(n, N) slots
(protocol.py: a bucket's binomial mean + 8 sd + 8, a function of the party's whole set size n alone), its real ids
in random slots and, in the others, R^e for a fresh uniformly random element R (RFC 9496 derivation of 64 random
bytes), which matches nothing and which the peer cannot tell from a masked id (DDH, as for any id it does not hold);
each slot costs the same SHA-512, derivation and scalar multiplication in one call (ecdh.slot_messages), so neither
the values nor their timing count the padding; so a peer learns N x padded_size(n, N), a function of
the n the one-rank PSI reveals, and not how the ids fall into buckets (their counts would be a statistic of the set
under a public hash). A malicious follower widens this through the known gap of protocol.py: answering every leader
row with a distinct copy of one of its own double-masked values, it is named back exactly the leader's real rows and
so counts the leader's ids in its bucket, unless the leader checks its proofs (data.psi_verify). Padding costs about 8 sqrt(n N) points in all (1.1% at 10^6 ids on 2 ranks). The leader's bound
on a follower's declared size is padded alike, so N ranks let a follower probe at most that many more ids. Each
rank keeps its own reuse cache (vfl/align/psi/reuse.py), bound to its rank and N, and a party reuses on all its ranks
or none (an all-reduce of each rank's decision before its hello), so a peer learns one bit per run, never which
buckets changed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from privacy.public_hash import splitmix64
from vfl.align.psi.protocol import RANKS_AGREE, PSIError, PSIReport
from vfl.align.psi.reuse import CACHE_DIR, PSICache

_BUCKET_SALT = np.uint64(0x7073692D72616E6B)  # "psi-rank": buckets independent of every other public hash's draws


def bucket_of(ids: np.ndarray, ranks: int) -> np.ndarray:
    """The rank (0..ranks-1) whose bucket holds each int64 id."""
    h = splitmix64(np.asarray(ids, np.int64).view(np.uint64) ^ _BUCKET_SALT)
    return (h % np.uint64(ranks)).astype(np.int64)


def rank_share(ids: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """The ids rank `rank` of `ranks` brings to its PSI (all of them for one rank)."""
    ids = np.asarray(ids)
    return ids if ranks == 1 else ids[bucket_of(ids, ranks) == rank]


def intersect_on_ranks(ctx, ids: np.ndarray, run: Callable, me: str) -> tuple[np.ndarray, PSIReport]:
    """run(this rank's bucket of ids, the party's whole set size) -> (its intersection, report) on every rank; the
    party's whole intersection (ascending, on every rank) and the report summed over ranks."""
    part = rank_share(ids, ctx.rank, ctx.ranks)
    if part.size == 0:
        raise PSIError(
            f"{me}: rank {ctx.rank} of {ctx.ranks} has no ids in its PSI bucket ({len(ids)} ids in all); "
            f"run fewer ranks"
        )
    if ctx.ranks == 1:
        return run(part, len(ids))
    token = RANKS_AGREE.set(lambda flag: ctx.total(float(flag)) == ctx.ranks)  # reuse: all ranks or none
    try:
        common, report = run(part, len(ids))
    finally:
        RANKS_AGREE.reset(token)
    everything = np.sort(ctx.gather_ids(np.asarray(common, np.int64)))
    return everything, _summed(ctx, report, everything.size)


def _summed(ctx, r: PSIReport, intersection: int) -> PSIReport:
    """The ranks' reports as one: sizes and bytes summed, the slowest rank's seconds (and work: the rest is the
    wait for the peers), peers reused on every rank."""
    peers = sorted(r.peer_ids)
    total = [ctx.total(v) for v in (r.own_ids, r.bytes_sent, r.bytes_received)]
    seconds, work = max(ctx.per_rank(r.seconds)), max(ctx.per_rank(r.work_seconds))
    return PSIReport(
        intersection,
        int(total[0]),
        {p: int(ctx.total(r.peer_ids[p])) for p in peers},
        {p: int(ctx.total(r.pairwise[p])) for p in peers},
        seconds,
        int(total[1]),
        int(total[2]),
        [p for p in peers if ctx.total(float(p in r.reused)) == ctx.ranks],
        max(seconds - work, 0.0),
    )


def psi_caches(cfg, keys, rank: int, ranks: int) -> dict[str, PSICache]:
    """This party's reuse cache with each peer (the leader: every follower; a follower: the leader), under
    <data.path>/psi_cache; none when data.psi_reuse is false."""
    if not cfg.data.psi_reuse:
        return {}
    directory = os.path.join(cfg.data.path, CACHE_DIR)
    if cfg.is_leader:
        peers = {name: key for key, name in keys.followers.items()}
    else:
        peers = {"leader": keys.leader}
    verified = cfg.data.psi_verify
    return {p: PSICache(directory, keys.secret, cfg.party, p, key, rank, ranks, verified) for p, key in peers.items()}
