"""`python -m follower --config follower.yaml`: run a feature party."""
from __future__ import annotations

import sys

from vfl.cli import party_main


def body(cfg, log, state: dict) -> None:
    from follower.trainer import FollowerTrainer
    from vfl.cli import party_keys
    from vfl.data.reader import DataError
    from vfl.data.shards import PartyShard
    from vfl.party import BottomParty, resolve_device, set_threads
    from vfl.wire import FollowerChannel
    from vfl.psi.protocol import MAX_FRAME_BYTES as PSI_MAX_FRAME_BYTES
    from vfl.psi.protocol import check_minimum, follower_psi
    from vfl.wire.frames import MAX_HEADER_BYTES

    keys = party_keys(cfg)
    set_threads(cfg.train.threads, 2)
    shard = PartyShard(cfg.data.path)
    if shard.has_labels:
        raise DataError(f"data.path {cfg.data.path} holds labels (it is the leader's shard {shard.name!r}); a follower must never read labels")
    if shard.name != cfg.party:  # the shard records the party it was prepared for
        raise DataError(f"data.path {cfg.data.path} is the shard of party {shard.name!r}, not of {cfg.party!r}; "
                        f"give each party its own directory OUT/<party> of `python -m vfl.data prepare`")
    shard.check_columns(cfg.data.dense, cfg.data.categorical)
    # the largest frame the leader may send: the gradient of one training batch at this party's cut, or a PSI chunk
    max_frame = max(cfg.train.batch_size * cfg.model.bottom.cut_dim * 4 + MAX_HEADER_BYTES + 1024, PSI_MAX_FRAME_BYTES)
    channel = state["channel"] = FollowerChannel(cfg.network.connect, cfg.party, keys, cfg.network.timeout_s,
                                                 max_frame_bytes=max_frame)
    log(f"follower {cfg.party}: connecting to {cfg.network.connect}; private set intersection of {len(shard.all_ids())} ids")
    common, psi = follower_psi(channel, shard.all_ids(), log)
    log(f"follower {cfg.party}: PSI intersection {psi.intersection} ids (this party {psi.own_ids}, leader {psi.peer_ids['leader']}, "
        f"shared pairwise {psi.pairwise['leader']}), {psi.seconds:.1f} s, {psi.bytes_sent + psi.bytes_received} bytes")
    check_minimum(psi, cfg.data.min_intersection, cfg.party)
    shard.restrict(common)
    from vfl.training.precision import warn_if_emulated

    party = BottomParty(cfg, shard, resolve_device(cfg.train.device))
    warn_if_emulated(cfg.train.precision, party.device, log)
    trainer = FollowerTrainer(cfg, channel, party, log, cfg.output.dir)
    welcome = trainer.handshake()
    log(f"follower {cfg.party}: joined run {channel.run} ({welcome.get('epochs')} epochs x {welcome.get('steps_per_epoch')} steps)")
    trainer.run()
    state["steps"] = trainer.steps
    log(f"follower {cfg.party}: done after {trainer.steps} steps")


def abort(state: dict, reason: str) -> None:
    if "channel" in state:
        state["channel"].abort(reason)


def main(argv: list[str] | None = None) -> int:
    return party_main(argv, "follower", "--connect", body, abort)


if __name__ == "__main__":
    sys.exit(main())
