"""What ties a checkpoint to its training run, and the fingerprint the parties compare before they predict together.

Every checkpoint a party writes during training records (`run_record`) the training run's id (a hash of every
party's HELLO nonce, vfl/session/handshake.py), the global step whose weights it holds (`model_step`: the step early
stopping selected once it restored it), the parties, the cut widths, a digest of the party's own model config and the
fingerprints of the CurveZMQ public keys the run was trained under (its own and its peers', as far as it knows them).

Before prediction each party checks its own checkpoint against its config and keys (`check_own`: one-line error),
then a follower announces its checkpoint's run and step and `pair_fingerprint` of (run, step, leader and follower
party names, their key fingerprints, the follower's cut width); the leader computes the same from its own checkpoint
and refuses any difference with one line naming both sides. Neither side can forge agreement with a checkpoint of
another run: the run id binds every party's nonce of that run.
"""

from __future__ import annotations

import hashlib
import json

from vfl.config.schema import PartyConfig

FINGERPRINT_DOMAIN = "vfl-predict-fingerprint/v1"


def key_fingerprints(cfg: PartyConfig) -> dict:
    """The fingerprints of the CurveZMQ public keys this party's config names: {"self": its own, "leader": the
    leader's} on a follower, {"self": its own, "followers": {follower: its key}} on the leader."""
    from vfl.wire.curve_keys import fingerprint, load_public_key, load_secret_key

    net = cfg.network
    out: dict = {"self": fingerprint(load_secret_key(net.secret_key_file)[0]) if net.secret_key_file else ""}
    if cfg.is_leader:
        out["followers"] = {
            f: fingerprint(load_public_key(net.follower_keys[f])) for f in net.followers if f in net.follower_keys
        }
    else:
        out["leader"] = fingerprint(load_public_key(net.leader_key_file)) if net.leader_key_file else ""
    return out


def model_digest(cfg: PartyConfig) -> str:
    """sha256 of this party's model config (bottom, and the top on the leader), as JSON."""
    doc = cfg.model.model_dump(mode="json")
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def run_record(cfg: PartyConfig, run: str, model_step: int, cut_dims: dict[str, int], keys: dict) -> dict:
    """What a training checkpoint records for prediction (its `extra["run"]`)."""
    return {
        "run": run,
        "model_step": int(model_step),
        "party": cfg.party,
        "leader": cfg.party if cfg.is_leader else None,
        "parties": [cfg.party, *cfg.network.followers] if cfg.is_leader else [cfg.party],
        "cut_dims": dict(cut_dims),
        "model": model_digest(cfg),
        "keys": keys,
    }


def check_own(record: dict | None, cfg: PartyConfig, path: str, keys: dict) -> dict:
    """The run record of this party's checkpoint at `path`, checked against its config and keys now (one line)."""
    if not isinstance(record, dict) or not record.get("run"):
        raise ValueError(
            f"checkpoint {path} records no training run (written by an older version, or a checkpoint taken before "
            "the handshake): prediction needs a checkpoint of a training run of this version"
        )
    if record.get("party") != cfg.party:
        raise ValueError(f"checkpoint {path} is party {record.get('party')!r}'s, not {cfg.party!r}'s")
    if record.get("model") != model_digest(cfg):
        raise ValueError(
            f"checkpoint {path} was trained with another model config than {cfg.party}'s config now "
            f"(model digest {record.get('model')} vs {model_digest(cfg)}): predict with the config it was trained with"
        )
    if cfg.is_leader and list(record.get("parties") or []) != [cfg.party, *cfg.network.followers]:
        raise ValueError(
            f"checkpoint {path} was trained with parties {record.get('parties')}, this config names "
            f"{[cfg.party, *cfg.network.followers]}"
        )
    saved, now = record.get("keys") or {}, keys
    pairs = [("self", cfg.party), ("leader", "the leader")] + [(f, f) for f in (now.get("followers") or {})]
    changed = []
    for key, who in pairs:
        was = (saved.get("followers") or {}).get(key) if key not in ("self", "leader") else saved.get(key)
        is_ = (now.get("followers") or {}).get(key) if key not in ("self", "leader") else now.get(key)
        if was and is_ and was != is_:
            changed.append(f"{who} ({was} then, {is_} now)")
    if changed:
        raise ValueError(
            f"checkpoint {path} was trained under other CurveZMQ keys: {', '.join(changed)}; predict with the run's keys"
        )
    return record


def pair_fingerprint(record: dict, follower: str, cut_dim: int, leader_side: bool) -> str:
    """The fingerprint a follower and the leader must agree on, from either side's checkpoint record: (training run,
    model step, the leader's key, the follower's name and key, its cut width), hex."""
    keys = record.get("keys") or {}
    if leader_side:
        leader_key, follower_key = keys.get("self", ""), (keys.get("followers") or {}).get(follower, "")
    else:
        leader_key, follower_key = keys.get("leader", ""), keys.get("self", "")
    doc = [
        FINGERPRINT_DOMAIN,
        record["run"],
        int(record["model_step"]),
        leader_key,
        follower,
        follower_key,
        int(cut_dim),
    ]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32]


def checkpoint_hello_problems(mine: dict, f: str, hello, checkpoint: str | None, protocol: int) -> list[str]:
    """Every disagreement of a follower's hello (PREDICT_HELLO or SERVE_HELLO: protocol, run, step, cut_dim,
    fingerprint) with the leader's checkpoint record `mine`, as sentences naming both sides. They reach the follower
    (the leader's ABORT): `checkpoint` is a name for the leader's checkpoint that may (never its path; None: no
    name), the leader logs its path itself."""
    if hello.protocol != protocol:
        return [f"{f} speaks protocol {hello.protocol}, the leader speaks {protocol}"]
    if (hello.run, hello.step) != (mine["run"], mine["model_step"]):
        return [
            f"{f}'s checkpoint is of training run {hello.run[:12]} step {hello.step}, the leader's"
            f"{f' ({checkpoint})' if checkpoint else ''} of run {mine['run'][:12]} step {mine['model_step']}: give "
            "every party its checkpoint of the same run (checkpoints/<party>_final.pt)"
        ]
    want_cut = int(mine["cut_dims"].get(f, -1))
    want = pair_fingerprint(mine, f, want_cut, leader_side=True)
    if hello.cut_dim != want_cut or hello.fingerprint != want:
        return [
            f"{f}'s checkpoint of run {hello.run[:12]} step {hello.step} has fingerprint {hello.fingerprint[:12]} "
            f"(cut {hello.cut_dim}), the leader's record of it {want[:12]} (cut {want_cut}): its keys or model "
            "differ from the training run's"
        ]
    return []
