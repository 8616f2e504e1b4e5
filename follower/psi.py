"""A follower's side of the private set intersection: with the leader, over which ranks, and what it reports.

The protocol's follower driver is vfl/align/psi/follower_side.py; this module runs it for training (rank r on bucket
r, a reused agreement where no side's ids changed) and for prediction (the new rows' ids).
"""

from __future__ import annotations


def intersect(cfg, env, ctx, channel, keys, shard, log) -> None:
    """PSI with the leader (N ranks: rank r intersects bucket r, and the party gathers the buckets; a reused
    agreement where neither side's ids changed); the shard is restricted to the intersection."""
    from vfl.align.psi.buckets import intersect_on_ranks, psi_caches
    from vfl.align.psi.follower_side import follower_psi
    from vfl.align.psi.protocol import check_minimum

    cache = psi_caches(cfg, keys, env.rank, env.ranks).get("leader")
    common, psi = intersect_on_ranks(
        ctx,
        shard.all_ids(),
        lambda ids, total: follower_psi(
            channel, ids, log, cache, env, total, cfg.data.psi_max_peer_ids, cfg.data.psi_verify
        ),
        cfg.party,
    )
    log(  # the counts are the positions the leader's answers matched: a cut leaves only for rows whose ids it names
        f"follower {cfg.party}: PSI intersection {psi.intersection} ids as the leader's answers matched them (this party "
        f"{psi.own_ids}, leader {psi.peer_ids['leader']} declared, pairwise {psi.pairwise['leader']}; every cut the "
        f"leader asks for must name its rows' id digest), {psi.timing('the leader')}, {psi.bytes_sent + psi.bytes_received} bytes"
        + (", reused" if psi.reused else "")
    )
    check_minimum(psi, cfg.data.min_intersection, cfg.party)
    shard.restrict(common)


def new_ids_intersection(cfg, channel, log):
    """PSI of prediction's new ids with the leader: ids -> (the common ids, the report)."""
    from vfl.align.psi.follower_side import follower_psi

    def psi(ids):
        common, report = follower_psi(channel, ids, log, verify=cfg.data.psi_verify)
        log(
            f"follower {cfg.party}: PSI: {report.intersection} of {report.own_ids} new ids, {report.timing('the leader')}"
        )
        return common, report

    return psi
