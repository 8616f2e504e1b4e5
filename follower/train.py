"""`python -m follower --config follower.yaml`: a feature party's training, from its checked shard to the leader's DONE."""

from __future__ import annotations


def _feature_shard(cfg):
    """This party's own shard, checked to hold no labels and to be this party's, before connecting."""
    from vfl.cli import check_own_shard
    from vfl.data.errors import DataError
    from vfl.data.shards import PartyShard
    from vfl.models.registry import dry_run_models

    shard = PartyShard(cfg.data.path)
    if shard.has_labels:
        raise DataError(
            f"data.path {cfg.data.path} holds labels (it is the leader's shard {shard.name!r}); a follower must never read labels"
        )
    check_own_shard(cfg, shard)
    dry_run_models(cfg, shard)  # the party's own module (model.bottom.import) on a dummy batch, before connecting
    return shard


def train(cfg, log, state: dict) -> None:
    """Train with the leader: shard, PSI, handshake, the steps the leader asks for (the channel and the ranks' context
    in state, for the caller to abort and close; state["steps"]: the steps trained)."""
    from follower.channel import connect
    from follower.psi import intersect
    from follower.trainer import FollowerTrainer
    from vfl.cli import check_rank_options, party_keys
    from vfl.config.schema import ConfigError
    from vfl.distributed.context import start_ranks
    from vfl.distributed.launch import rank_env
    from vfl.session.link_probe import LinkCheckDone, follower_link_check
    from vfl.training.party import BottomParty, resolve_device, set_threads
    from vfl.training.precision import warn_if_emulated
    from vfl.training.table_defaults import shard_rows, size_table_run
    from vfl.training.trained_model import training_model

    env = state.get("ranks") or rank_env()
    check_rank_options(cfg, env.distributed)
    if env.distributed and cfg.debug.record_gradients:
        raise ConfigError("debug.record_gradients records one process's view; run it with --ranks 1")
    keys = party_keys(cfg)
    set_threads(cfg.train.threads, 2 * env.local_ranks)
    shard = _feature_shard(cfg)
    # the table recipe's model (a resumed checkpoint's own), before the handshake says its cut
    cfg, trained_bottom = training_model(cfg, shard_rows(shard.manifest))
    device = resolve_device(cfg.train.device)
    ctx = state["ctx"] = start_ranks(cfg, env, device, log)
    channel = state["channel"] = connect(cfg, env, keys, len(shard.all_ids()), log)
    intersect(cfg, env, ctx, channel, keys, shard, log)
    cfg, _ = size_table_run(cfg, shard, log, trained_bottom)  # the leader's batch size: the intersection's rows
    party = BottomParty(cfg, shard, device, trained_bottom)
    warn_if_emulated(cfg.train.precision, party.device, log)
    trainer = FollowerTrainer(cfg, channel, party, log, cfg.output.dir, ctx=ctx)
    try:
        welcome, done = trainer.handshake(), None
    except LinkCheckDone as e:
        welcome, done = None, e
    line = follower_link_check(done, state.get("check_link", False), cfg.party)  # a mismatch: PeerAbort
    if done is not None:
        log(line)
        ctx.close()
        return
    log(f"follower {cfg.party}: joined run {channel.run} ({welcome.epochs} epochs x {welcome.steps_per_epoch} steps)")
    if trainer.session.link is not None:
        log(f"follower {cfg.party}: link to the leader, as the leader timed it: {trainer.session.link.describe()}")
    with ctx.collectives("training (DistributedDataParallel's gradient all-reduce)"):
        trainer.run()
    state["steps"] = trainer.steps
    ctx.close()
    log(f"follower {cfg.party}: done after {trainer.steps} steps")
