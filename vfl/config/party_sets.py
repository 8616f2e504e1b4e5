"""Which role takes a `--set KEY=VALUE` of a multi-party launch script: the leader only, the followers only, or all.

A launch script that starts every party (scripts/run_table_local.sh) passes each of its `--set` overrides to the
parties whose role takes the key, and says so, so that a leader-only key (`train.early_stopping.patience`) is not
refused by a follower (vfl/config/role_rules.py refuses those keys on the other role; tests keep the two in step).

    python -m vfl.config.party_sets KEY=VALUE ...   ->  one line per override: ROLE<TAB>KEY=VALUE (all|leader|follower)
"""

from __future__ import annotations

import sys

LEADER_ONLY = (  # the leader holds the labels, the validation metrics and the top model
    "data.schema.label",
    "network.bind",
    "network.followers",
    "network.follower_keys",
    "model.top",
    "train.early_stopping",
    "train.task",
    "train.loss",
    "train.staleness_leader_bottom",
    "privacy.label_dp",
)
FOLLOWER_ONLY = ("network.connect", "network.rank_endpoints", "network.leader_key_file", "debug.record_gradients")


def role_of(key: str) -> str:
    """'leader', 'follower' or 'all': the parties whose role takes the config key (a dotted path)."""
    for prefixes, role in ((LEADER_ONLY, "leader"), (FOLLOWER_ONLY, "follower")):
        if any(key == p or key.startswith(p + ".") for p in prefixes):
            return role
    return "all"


def main(argv: list[str]) -> int:
    for kv in argv:
        key, sep, _ = kv.partition("=")
        if not sep or not key:
            print(f"error: --set {kv!r}: allowed: KEY=VALUE (e.g. train.lr=0.003)", file=sys.stderr)
            return 2
        print(f"{role_of(key.strip())}\t{kv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
