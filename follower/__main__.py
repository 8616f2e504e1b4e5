"""`python -m follower --config follower.yaml`: run a feature party."""
from __future__ import annotations

import sys

from vfl.cli import party_main


def body(cfg, log, state: dict) -> None:
    from follower.trainer import FollowerTrainer
    from vfl.config import read_secret
    from vfl.data.reader import DataError
    from vfl.data.shards import PartyShard
    from vfl.party import BottomParty, resolve_device, set_threads
    from vfl.wire import FollowerChannel

    key = read_secret(cfg.network)
    set_threads(cfg.train.threads, 2)
    shard = PartyShard(cfg.data.path)
    if shard.has_labels:
        raise DataError(f"data.path {cfg.data.path} holds labels (it is the leader's shard {shard.name!r}); a follower must never read labels")
    party = BottomParty(cfg, shard, resolve_device(cfg.train.device))
    channel = state["channel"] = FollowerChannel(cfg.network.connect, cfg.party, key, cfg.network.timeout_s)
    trainer = FollowerTrainer(cfg, channel, party, log, cfg.output.dir)
    log(f"follower {cfg.party}: connecting to {cfg.network.connect}")
    welcome = trainer.handshake()
    log(f"follower {cfg.party}: joined run {channel.run} ({welcome.get('epochs')} epochs x {welcome.get('steps_per_epoch')} steps)")
    trainer.run()
    log(f"follower {cfg.party}: done after {trainer.steps} steps")


def abort(state: dict, reason: str) -> None:
    if "channel" in state:
        state["channel"].abort(reason)


def main(argv: list[str] | None = None) -> int:
    return party_main(argv, "follower", "--connect", body, abort)


if __name__ == "__main__":
    sys.exit(main())
