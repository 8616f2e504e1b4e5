"""`python -m follower --config follower.yaml`: run a feature party."""

from __future__ import annotations

import sys

from vfl.cli import party_main


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


def _connect(cfg, env, keys, n_ids: int, log):
    """The follower's CurveZMQ channel to the leader, its messages capped at what the leader may send."""
    from vfl.align.psi.protocol import MAX_PSI_MESSAGE_BYTES
    from vfl.distributed.pairing import rank_endpoint
    from vfl.wire import FollowerChannel
    from vfl.wire.frames import MAX_HEADER_BYTES

    # the largest message the leader may send: the gradient of one training batch at this party's cut, or a PSI chunk
    max_message = max(
        cfg.train.batch_size * cfg.model.bottom.cut_dim * 4 + MAX_HEADER_BYTES + 1024, MAX_PSI_MESSAGE_BYTES
    )
    connect = rank_endpoint(cfg.network.connect, env.rank, env.ranks, cfg.network.rank_endpoints)
    channel = FollowerChannel(
        connect, cfg.party, keys, cfg.network.timeout_s, max_message_bytes=max_message, notice=log
    )
    log(
        f"follower {cfg.party}: connecting to {connect}; "
        + f"private set intersection of {n_ids} ids"
        + (f" (this rank: bucket {env.rank} of {env.ranks})" if env.distributed else "")
    )
    return channel


def _intersect(cfg, env, ctx, channel, keys, shard, log) -> None:
    """PSI with the leader (N ranks: rank r intersects bucket r, and the party gathers the buckets; a reused
    agreement where neither side's ids changed); the shard is restricted to the intersection."""
    from vfl.align.psi.buckets import intersect_on_ranks, psi_caches
    from vfl.align.psi.protocol import check_minimum, follower_psi

    cache = psi_caches(cfg, keys, env.rank, env.ranks).get("leader")
    common, psi = intersect_on_ranks(
        ctx,
        shard.all_ids(),
        lambda ids, total: follower_psi(
            channel, ids, log, cache, env, total, cfg.data.psi_max_peer_ids, cfg.data.psi_verify
        ),
        cfg.party,
    )
    log(  # the counts are the positions the leader's answers matched: a cut leaves only for rows whose ids it names
        f"follower {cfg.party}: PSI intersection {psi.intersection} ids as the leader's answers matched them (this party "
        f"{psi.own_ids}, leader {psi.peer_ids['leader']} declared, pairwise {psi.pairwise['leader']}; every cut the "
        f"leader asks for must name its rows' id digest), {psi.timing('the leader')}, {psi.bytes_sent + psi.bytes_received} bytes"
        + (", reused" if psi.reused else "")
    )
    check_minimum(psi, cfg.data.min_intersection, cfg.party)
    shard.restrict(common)


def body(cfg, log, state: dict) -> None:
    from follower.trainer import FollowerTrainer
    from vfl.cli import check_rank_options, party_keys
    from vfl.config.schema import ConfigError
    from vfl.distributed.context import start_ranks
    from vfl.distributed.launch import rank_env
    from vfl.session.link_probe import LinkCheckDone, follower_link_check
    from vfl.training.party import BottomParty, resolve_device, set_threads
    from vfl.training.precision import warn_if_emulated
    from vfl.training.table_defaults import shard_rows, size_table_run, table_model

    env = state.get("ranks") or rank_env()
    check_rank_options(cfg, env.distributed)
    if env.distributed and cfg.debug.record_gradients:
        raise ConfigError("debug.record_gradients records one process's view; run it with --ranks 1")
    keys = party_keys(cfg)
    set_threads(cfg.train.threads, 2 * env.local_ranks)
    shard = _feature_shard(cfg)
    cfg = table_model(cfg, shard_rows(shard.manifest))  # the table recipe's model, before the handshake says its cut
    device = resolve_device(cfg.train.device)
    ctx = state["ctx"] = start_ranks(cfg, env, device, log)
    channel = state["channel"] = _connect(cfg, env, keys, len(shard.all_ids()), log)
    _intersect(cfg, env, ctx, channel, keys, shard, log)
    cfg, _ = size_table_run(cfg, shard, log)  # the same batch size as the leader's: the intersection's rows
    party = BottomParty(cfg, shard, device)
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


def predict_body(cfg, args, log, state: dict) -> None:
    """`python -m follower predict`: answer the leader's requests for cuts of the new rows of --rows."""
    from vfl.align.psi.protocol import follower_psi
    from vfl.cli import party_keys
    from vfl.distributed.launch import rank_env
    from vfl.inference.predict.cli import checkpoint_of
    from vfl.inference.predict.follower import FollowerPredictor
    from vfl.training.party import resolve_device, set_threads

    keys = party_keys(cfg)
    set_threads(cfg.train.threads, 2)
    device = resolve_device(cfg.train.device)
    predictor = FollowerPredictor(cfg, checkpoint_of(args, cfg), args.rows, log, device, strict=args.strict)
    predictor.report_dir = state["out_dir"]  # <party>_predict_embedding_dp.json beside the predictions
    state["rows"] = predictor.rows
    channel = state["channel"] = _connect(cfg, rank_env(), keys, len(predictor.rows), log)

    def psi(ids):
        common, report = follower_psi(channel, ids, log, verify=cfg.data.psi_verify)
        log(
            f"follower {cfg.party}: PSI: {report.intersection} of {report.own_ids} new ids, {report.timing('the leader')}"
        )
        return common, report

    state["summary"] = predictor.run(channel, psi)


def abort(state: dict, reason: str) -> None:
    if "channel" in state:
        state["channel"].abort(reason)


def main(argv: list[str] | None = None) -> int:
    from vfl.inference.serve.cli import inference_subcommand

    code = inference_subcommand(sys.argv[1:] if argv is None else argv, "follower")  # export, serve
    if code is not None:
        return code
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "predict":
        from vfl.inference.predict.cli import predict_main

        return predict_main(args[1:], "follower", predict_body, abort)
    return party_main(argv, "follower", "--connect", body, abort)


if __name__ == "__main__":
    sys.exit(main())
