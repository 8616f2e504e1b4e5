"""The leader's side of the private set intersection: with whom, over which ranks, and what it reports.

The protocol's leader driver is vfl/align/psi/leader_side.py; this module runs it for training (every follower, rank r
on bucket r, a reused agreement where no side's ids changed) and for prediction (the new rows' ids).
"""

from __future__ import annotations


def intersect(cfg, env, ctx, channel, keys, shard, log):
    """PSI with every follower (N ranks: rank r intersects bucket r, and the party gathers the buckets; a reused
    agreement where neither side's ids changed); the shard is restricted to the intersection. Returns the report."""
    from vfl.align.psi.buckets import intersect_on_ranks, psi_caches
    from vfl.align.psi.leader_side import leader_psi
    from vfl.align.psi.protocol import check_minimum

    caches = psi_caches(cfg, keys, env.rank, env.ranks)
    followers = list(cfg.network.followers)
    common, psi = intersect_on_ranks(
        ctx,
        shard.all_ids(),
        lambda ids, total: leader_psi(
            channel, followers, ids, log, cfg.data.psi_max_peer_ids, caches, env, total, cfg.data.psi_verify
        ),
        cfg.party,
    )
    log(
        f"leader {cfg.party}: PSI intersection {psi.intersection} ids (leader {psi.own_ids}, followers {psi.peer_ids}, "
        f"pairwise {psi.pairwise}), {psi.timing('the followers')}, {psi.bytes_sent + psi.bytes_received} bytes"
        + (f", reused with {psi.reused}" if psi.reused else "")
    )
    check_minimum(psi, cfg.data.min_intersection, cfg.party)
    shard.restrict(common)
    return psi


def new_ids_intersection(cfg, channel, log):
    """PSI of prediction's new ids with every follower: ids -> (the common ids, the report)."""
    from vfl.align.psi.leader_side import leader_psi

    def psi(ids):
        common, report = leader_psi(
            channel, list(cfg.network.followers), ids, log, cfg.data.psi_max_peer_ids, verify=cfg.data.psi_verify
        )
        log(
            f"leader {cfg.party}: PSI: {report.intersection} of {report.own_ids} new ids, {report.timing('the followers')}"
        )
        return common, report

    return psi
