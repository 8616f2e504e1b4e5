"""PSI across ranks: rank r of each party intersects bucket r of a public hash, and the gathered buckets are the
one-rank PSI's intersection, id for id (the multi-process run is tests/test_ranks.py)."""

from __future__ import annotations

import threading

import numpy as np

from tests.test_psi import _channels, _in_thread
from vfl.align.psi.buckets import bucket_of, intersect_on_ranks, rank_share
from vfl.align.psi.leader_side import leader_psi
from vfl.align.psi.protocol import follower_psi
from vfl.distributed.launch import RankEnv

RNG = np.random.default_rng(7)
UNIVERSE = RNG.choice(2**62, size=9000, replace=False).astype(np.int64) - 2**61  # negative ids too


class _ThreadRanks:
    """N ranks of one party as threads: gather_ids / total / per_rank meet at a barrier (what torch.distributed's
    all_gather does across processes)."""

    def __init__(self, ranks: int):
        self.ranks, self.barrier, self.slots = ranks, threading.Barrier(ranks), [None] * ranks

    def view(self, rank: int):
        outer = self

        class View:
            def __init__(self):
                self.rank, self.ranks = rank, outer.ranks

            def _all(self, value):
                outer.slots[rank] = value
                outer.barrier.wait(30)
                got = list(outer.slots)
                outer.barrier.wait(30)
                return got

            def gather_ids(self, part):
                return np.concatenate(self._all(part))

            def per_rank(self, value):
                return [float(v) for v in self._all(value)]

            def total(self, value):
                return float(sum(self.per_rank(value)))

        return View()


def test_buckets_partition_every_set_alike_and_evenly():
    # Prepare
    ids = UNIVERSE[:6000]
    # Execute
    b3 = bucket_of(ids, 3)
    shares = [rank_share(RNG.permutation(ids), r, 3) for r in range(3)]
    # Assert: a function of the id alone (order-free), a partition, each bucket within 5 sd of 2000 (binomial sd 36.5;
    # a false failure has probability < 1e-5 for this fixed seed's draw, which is deterministic anyway)
    assert set(np.unique(b3)) == {0, 1, 2}
    np.testing.assert_array_equal(np.sort(np.concatenate(shares)), np.sort(ids))
    for r in range(3):
        np.testing.assert_array_equal(np.sort(shares[r]), np.sort(ids[b3 == r]))
        assert abs(shares[r].size - 2000) < 5 * 36.5
    np.testing.assert_array_equal(rank_share(ids, 0, 1), ids)


def test_two_ranks_per_party_give_the_one_rank_intersection_id_for_id(tmp_path):
    # Prepare: a leader and two followers, each party as 2 ranks (threads), rank r of each on its own channels
    lead = RNG.permutation(UNIVERSE[:7000])
    fol = {"follower0": RNG.permutation(UNIVERSE[1000:8000]), "follower1": RNG.permutation(UNIVERSE[::2])}
    want = np.intersect1d(np.intersect1d(lead, fol["follower0"]), fol["follower1"])
    ranks = {p: _ThreadRanks(2) for p in ("leader", *fol)}
    results: dict = {}
    # Execute: one-rank PSI first, then the 2-rank one
    one = _psi_one_rank(tmp_path / "one", lead, fol)
    threads = []
    for r in range(2):
        leader, follower = _channels(tmp_path / f"r{r}", tuple(fol))
        chans = {f: follower(f) for f in fol}
        for f, ids in fol.items():
            run = (lambda ch, env: lambda part: follower_psi(ch, part, None, None, env))(chans[f], RankEnv(r, 2))
            threads.append((f, r, _in_thread(intersect_on_ranks, ranks[f].view(r), ids, run, f), chans[f]))
        run = (lambda ch, env: lambda part: leader_psi(ch, list(fol), part, None, None, None, env))(
            leader, RankEnv(r, 2)
        )
        threads.append(
            ("leader", r, _in_thread(intersect_on_ranks, ranks["leader"].view(r), lead, run, "leader"), leader)
        )
    for party, r, (t, box), ch in threads:
        t.join(120)
        ch.close()
        assert "error" not in box, f"{party} rank {r}: {box.get('error')!r}"
        results[(party, r)] = box["value"]
    # Assert: every rank of every party holds the one-rank intersection; the reports sum the ranks' buckets
    np.testing.assert_array_equal(one, want)
    for (party, r), (common, report) in results.items():
        np.testing.assert_array_equal(common, want, err_msg=f"{party} rank {r}")
        assert report.intersection == want.size
    lead_report = results[("leader", 0)][1]
    assert lead_report.own_ids == lead.size
    assert lead_report.peer_ids == {f: ids.size for f, ids in fol.items()}
    assert lead_report.pairwise == {f: np.intersect1d(lead, ids).size for f, ids in fol.items()}
    assert results[("follower1", 1)][1].pairwise == {"leader": np.intersect1d(lead, fol["follower1"]).size}


def _psi_one_rank(tmp_path, lead, fol):
    leader, follower = _channels(tmp_path, tuple(fol))
    chans = {f: follower(f) for f in fol}
    try:
        threads = [_in_thread(follower_psi, chans[f], ids) for f, ids in fol.items()]
        common, _ = leader_psi(leader, list(fol), lead)
        for t, _ in threads:
            t.join(60)
    finally:
        for c in (leader, *chans.values()):
            c.close()
    return common
