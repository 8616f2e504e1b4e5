"""`python -m leader --config leader.yaml`: run the label party."""
from __future__ import annotations

import os
import secrets
import sys

from vfl.cli import party_main


def body(cfg, log, state: dict) -> None:
    from leader.trainer import LeaderTrainer
    from vfl.config import read_secret
    from vfl.data.reader import DataError
    from vfl.data.shards import PartyShard
    from vfl.metrics import write_json
    from vfl.party import BottomParty, resolve_device, set_threads
    from vfl.wire import LeaderChannel

    key = read_secret(cfg.network)
    set_threads(cfg.train.threads, 1 + len(cfg.network.followers))
    shard = PartyShard(cfg.data.path)
    if not shard.has_labels:
        raise DataError(f"data.path {cfg.data.path} is the shard of {shard.name!r}, which holds no labels; the leader needs the labelled shard")
    party = BottomParty(cfg, shard, resolve_device(cfg.train.device))
    channel = state["channel"] = LeaderChannel(cfg.network.bind, cfg.network.followers, key, cfg.network.timeout_s,
                                               cfg.party, secrets.token_hex(8))
    trainer = LeaderTrainer(cfg, channel, party, log, cfg.output.dir)
    log(f"leader {cfg.party}: run {channel.run}, listening on {cfg.network.bind}, waiting for {list(cfg.network.followers)}")
    trainer.handshake()
    trainer.prepare()
    trainer.train()
    trainer.finish(trainer.loop.history[-1]["epoch"], trainer.loop.global_step)
    metrics = trainer.metrics()
    write_json(os.path.join(cfg.output.dir, "metrics.json"), metrics)
    bayes = metrics.get("bayes_test_auc")
    log(f"final test_auc: {metrics['test_auc']:.6f} test_logloss: {metrics['test_logloss']:.6f}"
        + (f" (Bayes-optimal test AUC {bayes:.6f})" if bayes is not None else "")
        + f" samples/s: {metrics['samples_per_second']:.0f}")


def abort(state: dict, reason: str) -> None:
    if "channel" in state:
        state["channel"].abort_all(reason)


def main(argv: list[str] | None = None) -> int:
    return party_main(argv, "leader", "--bind", body, abort)


if __name__ == "__main__":
    sys.exit(main())
