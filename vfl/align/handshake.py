"""Handshake checks: what a follower's HELLO must agree on with the leader before any batch moves.

Freshness: each follower's HELLO carries a fresh random nonce, the leader's WELCOME echoes it, and
the run id is a hash of the leader's own nonce and every follower's, so a recorded session can
answer no new HELLO and no message of an old run fits a new one.
"""
from __future__ import annotations

import hashlib
import re
import secrets

from vfl.config.schema import PartyConfig
from vfl.data.shards import SPLITS, PartyShard
from vfl.wire import PROTOCOL_VERSION


MAX_CUT_DIM = 4096
_NONCE = re.compile(r"^[0-9a-f]{32}$")


def new_nonce() -> str:
    """128 random bits, hex."""
    return secrets.token_hex(16)


def run_id(leader_nonce: str, follower_nonces: dict[str, str]) -> str:
    """The run id bound to the leader's nonce and to every follower's HELLO nonce."""
    text = leader_nonce + "".join(f"|{p}={n}" for p, n in sorted(follower_nonces.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def nonce_problems(peer: str, theirs: dict) -> list[str]:
    """A HELLO that travelled the wire must carry a fresh nonce."""
    if isinstance(theirs.get("nonce"), str) and _NONCE.match(theirs["nonce"]):
        return []
    return [f"{peer}'s HELLO carries no valid nonce (32 hex digits)"]


def hello_meta(cfg: PartyConfig, shard: PartyShard, resume_step: int = 0, nonce: str = "") -> dict:
    """What a party announces about itself (followers send it; the leader compares with its own)."""
    return {
        "nonce": nonce,
        "party": cfg.party,
        "protocol": PROTOCOL_VERSION,
        "id_digest": shard.id_digest,
        "rows": {s: len(shard.split(s)) for s in SPLITS},
        "batch_size": cfg.train.batch_size,
        "seed": cfg.train.seed,
        "cut_dim": cfg.model.bottom.cut_dim,
        "microbatches": cfg.train.microbatches,  # every party cuts a batch into the same micro-batches
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
        a, b = _get(ours, "id_digest", split), _get(theirs, "id_digest", split)
        if a != b:
            problems.append(
                f"{peer}'s {split} sample ids after the private set intersection differ from the leader's (its digest "
                f"{str(b)[:12]}, rows {str(_get(theirs, 'rows', split))[:20]} vs {ours['rows'][split]}): the parties must "
                f"prepare with the same --seed, --test-fraction and --valid-fraction (a sample's split is a function of its id)")
    if theirs.get("resume_step") != ours.get("resume_step"):
        problems.append(f"{peer} resumes at global step {str(theirs.get('resume_step'))[:20]} but the leader at "
                        f"{ours.get('resume_step')!r}; resume every party from checkpoints of the same step")
    for key in ("batch_size", "seed", "microbatches"):
        if theirs.get(key) != ours.get(key):
            problems.append(f"{peer} has train.{key}={str(theirs.get(key))[:20]} but the leader has train.{key}={ours.get(key)!r}")
    cut = theirs.get("cut_dim")
    if isinstance(cut, bool) or not isinstance(cut, int) or not 2 <= cut <= MAX_CUT_DIM:
        problems.append(f"{peer} announced cut_dim={str(cut)[:20]}; allowed: an integer in [2, {MAX_CUT_DIM}]")
    return problems


def _get(meta: dict, key: str, sub: str):
    """meta[key][sub] when meta[key] is a mapping, else None (a peer's HELLO may hold anything)."""
    value = meta.get(key)
    return value.get(sub) if isinstance(value, dict) else None
