"""`python -m follower --config follower.yaml`: run a feature party."""
from __future__ import annotations

import os
import sys

from vfl.cli import config_or_exit, fail, party_arguments, run_party


def main(argv: list[str] | None = None) -> int:
    args = party_arguments("python -m follower", "--connect").parse_args(argv)
    cfg = config_or_exit(args, "connect")
    if isinstance(cfg, int):
        return cfg
    if cfg.role != "follower":
        return fail(f"{args.config} has role {cfg.role!r}; python -m follower needs role: follower", 2)

    from follower.trainer import FollowerTrainer
    from vfl.config import read_secret
    from vfl.data.reader import DataError
    from vfl.data.shards import PartyShard
    from vfl.metrics import RunLog
    from vfl.party import BottomParty, resolve_device, set_threads
    from vfl.wire import FollowerChannel

    log = RunLog(os.path.join(cfg.output.dir, f"{cfg.party}.log"))
    state: dict = {}

    def body() -> None:
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

    def abort(reason: str) -> None:
        if "channel" in state:
            state["channel"].abort(reason)

    try:
        return run_party(cfg, log, body, abort)
    finally:
        if "channel" in state:
            state["channel"].close()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
