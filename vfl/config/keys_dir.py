"""Which key files `--keys DIR` names for a party: its own secret key, and its peers' public keys by party name.

DIR is laid out by `python -m vfl.keys new PARTY --dir DIR`: `<party>.key` (public) and `<party>.key_secret`. The
leader names its followers (network.followers), so it reads `DIR/<follower>.key`. A follower's YAML does not name
the leader, so its pinned `network.leader_key_file` is found in this order:
1. `DIR/leader.key` (a leader party named `leader`, or a copy under that name);
2. the only public key in DIR that is not the follower's own;
3. the run's layout: DIR is `RUN/keys` of `scripts/run_table_local.sh`, and exactly one of DIR's other keys is the
   party whose shard `RUN/shards/<party>` holds the labels (the leader's);
otherwise a one-line ConfigError lists the candidates and names the fix (`network.leader_key_file=DIR/<leader>.key`).
Pinning a wrong key is never silent: the CurveZMQ handshake fails against any server that lacks its secret key.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from vfl.wire.curve_keys import PUBLIC_SUFFIX


class KeysDirError(ValueError):
    """DIR does not say which public key is the leader's (the text lists the candidates and the fix)."""


def _labelled_shard(run_dir: str, party: str) -> bool:
    """True when RUN/shards/<party> is a prepared shard that holds labels (the leader's)."""
    try:
        with open(os.path.join(run_dir, "shards", party, "manifest.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("party"), dict) and bool(doc["party"].get("has_labels"))


def leader_key_file(keys_dir: str, party: str) -> str:
    """The leader's public key file in keys_dir for follower `party` (the module docstring's order); KeysDirError."""
    named = os.path.join(keys_dir, "leader" + PUBLIC_SUFFIX)
    if os.path.isfile(named):
        return named
    others = sorted(
        os.path.basename(p)[: -len(PUBLIC_SUFFIX)]
        for p in glob.glob(os.path.join(glob.escape(keys_dir), "*" + PUBLIC_SUFFIX))
        if os.path.basename(p) != party + PUBLIC_SUFFIX
    )
    if len(others) == 1:
        return os.path.join(keys_dir, others[0] + PUBLIC_SUFFIX)
    run_dir = os.path.dirname(os.path.abspath(keys_dir))
    leaders = [p for p in others if _labelled_shard(run_dir, p)]
    if len(leaders) == 1:
        return os.path.join(keys_dir, leaders[0] + PUBLIC_SUFFIX)
    fix = f"network.leader_key_file={os.path.join(keys_dir, '<leader>' + PUBLIC_SUFFIX)}"
    if not others:
        raise KeysDirError(
            f"--keys {keys_dir}: no public key of a leader there (no leader.key, and no <party>.key but {party}'s "
            f"own): copy the leader's public key file into it, or set {fix}"
        )
    raise KeysDirError(
        f"--keys {keys_dir}: which public key is the leader's? it holds {', '.join(o + PUBLIC_SUFFIX for o in others)} "
        f"besides {party}'s own and no leader.key: set {fix} (e.g. --set network.leader_key_file="
        f"{os.path.join(keys_dir, others[0] + PUBLIC_SUFFIX)})"
    )


def keys_overrides(doc: dict, keys_dir: str, explicit: dict[str, Any] | None = None) -> dict[str, Any]:
    """The key files DIR names for the party of YAML `doc`, as dotted overrides. `explicit`: the overrides given
    besides (a network.leader_key_file there wins, so the leader's key is not looked for)."""
    party, net = doc.get("party"), doc.get("network")
    followers = net.get("followers") if isinstance(net, dict) else None
    out: dict[str, Any] = {"network.secret_key_file": os.path.join(keys_dir, f"{party}.key_secret")}
    if doc.get("role") == "leader":
        names = followers if isinstance(followers, list) else []
        out["network.follower_keys"] = {f: os.path.join(keys_dir, f"{f}.key") for f in names if isinstance(f, str)}
    elif "network.leader_key_file" not in (explicit or {}):
        out["network.leader_key_file"] = leader_key_file(keys_dir, str(party))
    return out
