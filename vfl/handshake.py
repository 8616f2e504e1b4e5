"""Handshake checks: what a follower's HELLO must agree on with the leader before any batch moves."""
from __future__ import annotations

from vfl.config import PartyConfig
from vfl.data.shards import SPLITS, PartyShard
from vfl.wire import PROTOCOL_VERSION


def hello_meta(cfg: PartyConfig, shard: PartyShard, resume_step: int = 0) -> dict:
    """What a party announces about itself (followers send it; the leader compares with its own)."""
    return {
        "party": cfg.party,
        "protocol": PROTOCOL_VERSION,
        "id_digest": shard.id_digest,
        "rows": {s: len(shard.split(s)) for s in SPLITS},
        "batch_size": cfg.train.batch_size,
        "seed": cfg.train.seed,
        "cut_dim": cfg.model.bottom.cut_dim,
        "resume_step": resume_step,
        "timeout_s": cfg.network.timeout_s,  # the leader keeps long preparation shorter than this
    }


def hello_problems(peer: str, theirs: dict, ours: dict) -> list[str]:
    """Every disagreement between a follower's HELLO and the leader's own view, as sentences."""
    problems = []
    if theirs.get("protocol") != PROTOCOL_VERSION:
        problems.append(f"{peer} speaks protocol {theirs.get('protocol')!r}, the leader speaks {PROTOCOL_VERSION}")
    if theirs.get("party") != peer:
        problems.append(f"{peer} introduced itself as {theirs.get('party')!r}")
    for split in SPLITS:
        a, b = (ours.get("id_digest") or {}).get(split), (theirs.get("id_digest") or {}).get(split)
        if a != b:
            problems.append(
                f"{peer}'s {split} sample ids differ from the leader's (digest {str(b)[:12]} vs {str(a)[:12]}, "
                f"rows {(theirs.get('rows') or {}).get(split)} vs {ours['rows'][split]}): the shards are not aligned; "
                f"prepare every party from the same `python -m vfl.data prepare` run")
    if theirs.get("resume_step") != ours.get("resume_step"):
        problems.append(f"{peer} resumes at global step {theirs.get('resume_step')!r} but the leader at "
                        f"{ours.get('resume_step')!r}; resume every party from checkpoints of the same step")
    for key in ("batch_size", "seed"):
        if theirs.get(key) != ours.get(key):
            problems.append(f"{peer} has train.{key}={theirs.get(key)!r} but the leader has train.{key}={ours.get(key)!r}")
    cut = theirs.get("cut_dim")
    if isinstance(cut, bool) or not isinstance(cut, int) or not 2 <= cut <= 4096:
        problems.append(f"{peer} announced cut_dim={cut!r}; allowed: an integer in [2, 4096]")
    return problems
