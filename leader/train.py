"""`python -m leader --config leader.yaml`: the label party's training, from its checked shard to metrics.json."""

from __future__ import annotations

import os


def _labelled_shard(cfg):
    """The leader's own labelled shard, checked against the config before any follower connects."""
    from vfl.cli import check_own_shard
    from vfl.data.errors import DataError
    from vfl.data.shards import PartyShard
    from vfl.labeldp.release import leader_task
    from vfl.models.registry import dry_run_models

    shard = PartyShard(cfg.data.path)
    if not shard.has_labels:
        raise DataError(
            f"data.path {cfg.data.path} is the shard of {shard.name!r}, which holds no labels; the leader needs the labelled shard"
        )
    check_own_shard(cfg, shard)
    leader_task(cfg.train.task, shard)  # train.task against the data
    dry_run_models(cfg, shard)  # the party's own modules (model.*.import) on a dummy batch, before listening
    return shard


def _label_key(cfg, env, ctx, shard):
    """The leader's label-DP key and ledger (None without label DP), opened before any follower connects."""
    from vfl.labeldp.ranks import open_label_key_ranks
    from vfl.labeldp.release import LabelDPRelease, leader_task, open_label_key

    ld = cfg.privacy.label_dp
    if ld is None:
        return None
    if env.distributed:  # rank 0 creates the key and writes the ledger; the others only read the key
        key = open_label_key_ranks(ctx, ld.store_dir, ld.key_file, shard)
    else:
        key = open_label_key(ld.store_dir, ld.key_file, shard)
    # a release over privacy.label_dp.budget is refused here, before any follower connects (and again before the draw)
    LabelDPRelease.from_config(ld, leader_task(cfg.train.task, shard)).check_budget(key)
    return key


def train(cfg, log, state: dict) -> None:
    """Train with every follower: shard, label key, PSI, handshake, the epochs, metrics (the peers' channel and the
    ranks' context in state, for the caller to abort and close; state["check_link"]: measure the links and stop)."""
    from leader.channel import listen
    from leader.psi import intersect
    from leader.trainer import LeaderTrainer
    from vfl.cli import check_rank_options, party_keys
    from vfl.config.schema import ConfigError
    from vfl.distributed.context import start_ranks
    from vfl.distributed.launch import rank_env
    from vfl.obs.curves import preload_tensorboard
    from vfl.obs.metrics import final_line, write_json
    from vfl.session.link_probe import LinkCheckDone
    from vfl.session.rejoin import REJOIN_ERRORS
    from vfl.training.party import BottomParty, resolve_device, set_threads
    from vfl.training.precision import warn_if_emulated
    from vfl.training.run_size import run_size_warnings
    from vfl.training.table_defaults import shard_rows, size_table_run
    from vfl.training.trained_model import training_model

    env = state.get("ranks") or rank_env()
    if state.get("check_link") and env.distributed:
        raise ConfigError("--check-link measures one process's links: run it with --ranks 1")
    if env.distributed and cfg.privacy.label_dp is not None and cfg.privacy.label_dp.mechanism == "rr_prior":
        raise ConfigError(
            "privacy.label_dp.mechanism rr_prior (LP-2ST) runs on one rank only; use rr with --ranks N, or --ranks 1"
        )
    check_rank_options(cfg, env.distributed)
    keys = party_keys(cfg)
    if env.is_main:
        preload_tensorboard()
    set_threads(cfg.train.threads, (1 + len(cfg.network.followers)) * env.local_ranks)
    shard = _labelled_shard(cfg)
    # the table recipe's model (a resumed checkpoint's own), before the handshake says its cut
    cfg, trained_bottom = training_model(cfg, shard_rows(shard.manifest))
    device = resolve_device(cfg.train.device)
    ctx = state["ctx"] = start_ranks(cfg, env, device, log)
    label_key = _label_key(cfg, env, ctx, shard)
    channel = state.get("channel")  # --resume auto: the leader's socket of its run before this one, kept
    if channel is None:
        channel = state["channel"] = listen(cfg, env, keys, len(shard.all_ids()), log)
    else:
        log(f"leader {cfg.party}: listening again on {cfg.network.bind}, waiting for {list(cfg.network.followers)}")
    if state.get("auto"):  # a follower still in the run this leader continues is told where it starts again
        channel.rejoin_step = state["resume_step"]
    psi = intersect(cfg, env, ctx, channel, keys, shard, log)
    cfg, sized = size_table_run(cfg, shard, log, trained_bottom)  # a table's unset schedule and model, from its rows
    if env.is_main:
        for line in run_size_warnings(cfg.train.batch_size, cfg.train.epochs, len(shard.split("train"))):
            log.warning(f"leader {cfg.party}: {line}")
    party = BottomParty(cfg, shard, device, trained_bottom)
    warn_if_emulated(cfg.train.precision, party.device, log)
    trainer = LeaderTrainer(cfg, channel, party, log, cfg.output.dir, label_key=label_key, ctx=ctx)
    trainer.rejoin_auto = bool(state.get("auto"))  # --resume auto (vfl/session/rejoin.py)
    try:
        trainer.handshake(check_link=state.get("check_link", False))
    except LinkCheckDone as done:
        log(f"leader {cfg.party}: {done}")
        ctx.close()
        return
    log(f"leader {cfg.party}: run {channel.run} with {list(cfg.network.followers)}")
    try:
        with ctx.collectives("training (DistributedDataParallel's gradient all-reduce)"):
            trainer.prepare()
            trainer.train()
    except REJOIN_ERRORS:  # --resume auto starts the run again: this run's curves end here, undrawn
        if trainer.loop is not None and trainer.loop.curves is not None:
            trainer.loop.curves.abandon()
        raise
    trainer.finish(trainer.loop.history[-1]["epoch"], trainer.loop.global_step)
    if trainer.loop.curves is not None:
        # the PNG is drawn after the followers are released, not while they wait
        trainer.loop.curves.close(trainer.loop.final["model_step"], shard.manifest.get("bayes_test_auc"))
    metrics = trainer.metrics()
    ctx.close()
    if env.is_main:  # rank 0 writes the party's metrics (the per-rank figures were gathered in metrics())
        metrics["psi"] = psi.as_dict()
        if sized:
            metrics["defaults"] = sized
        write_json(os.path.join(cfg.output.dir, "metrics.json"), metrics)
    log(final_line(metrics))
