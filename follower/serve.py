"""`python -m follower serve`: answer a serving leader with the cuts of the ids it asks for (docs/serving.md).

The follower loads its final (selected) checkpoint and its prepared shard (with --new-rows, the rows of ids it has not
prepared), connects to the leader with its training keys, and answers each SERVE_IDS through its FollowerServer
(vfl/inference/serve/follower.py: the rate limit, the served-ids log, embedding DP) until the leader stops.
"""

from __future__ import annotations

import os


def serve(cfg, args, log, state: dict) -> None:
    """Serve the leader under the limits of --max-rows, --rows-per-s and --id-log-mb (state: the channel, the id log,
    the cut release and the new rows, for the caller to close and report)."""
    from vfl.cli import party_keys
    from vfl.inference.serve.follower import ServeLimits

    limits = ServeLimits(args.max_rows, args.rows_per_s, args.id_log_mb)
    limits.check()  # a bad limit is refused before the keys are read
    serve_follower(cfg, party_keys(cfg), limits, args.checkpoint, log, state, args.engine, args.new_rows)


def serve_follower(
    cfg, keys, limits, checkpoint: str | None, log, state: dict, engine: str = "onnx", new_rows=None
) -> None:
    """Load the model and the table (and the new rows of `new_rows`, a file or directory), connect with this party's
    CurveZMQ `keys` (vfl.cli.party_keys), greet, and answer the leader until it says goodbye or is lost."""
    import numpy as np

    from vfl.data.shards import PartyShard
    from vfl.inference.export.onnx_engine import fast_forward
    from vfl.inference.party_model import RowTable, load_party_model
    from vfl.inference.serve.follower import STOPPED, FollowerServer, IdLog
    from vfl.inference.serve.serving_rows import ServingRows
    from vfl.runs.record import pair_fingerprint
    from vfl.session.cut_release import CutRelease, lineage_scope, weights_digest
    from vfl.session.follower import FollowerSession
    from vfl.session.handshake import new_nonce
    from vfl.training.party import set_threads
    from vfl.wire import PROTOCOL_VERSION, FollowerChannel, PeerAbort
    from vfl.wire.frames import MAX_HEADER_BYTES
    from vfl.wire.serve_messages import MAX_SERVE_ROWS, ServeHello, ServeIds, ServeWelcome

    limits.check()
    set_threads(cfg.train.threads or 1, 1)
    shard = PartyShard(cfg.data.path)
    if shard.has_labels:
        raise ValueError(f"data.path {cfg.data.path} holds labels; a follower serves a feature shard")
    checkpoint = checkpoint or os.path.join(cfg.output.dir, "checkpoints", f"{cfg.party}_final.pt")
    bottom, _, ckpt, record = load_party_model(cfg, shard, checkpoint)
    model_digest = weights_digest(bottom.state_dict()) if cfg.privacy.embedding_dp is not None else None
    table = state["new_rows"] = ServingRows(RowTable(shard), new_rows, cfg.data.path, cfg.output.dir, log)
    table.start()
    sample = table.snapshot().features(np.arange(min(256, len(table))))
    bottom = fast_forward(bottom, ["dense", "dense_missing", "cat"], sample, engine, log)
    id_log = state["id_log"] = IdLog(os.path.join(cfg.output.dir, f"{cfg.party}_served_ids.log"), limits.id_log_bytes)
    cut_release = state["cut_release"] = CutRelease(
        cfg.privacy.embedding_dp, cfg.model.bottom.cut_dim, log, cfg.party, secret_key_file=cfg.network.secret_key_file
    )
    if cut_release.on:  # the model's scope of the send ledger, shared with batch prediction and every restart
        cut_release.plan_scoring(model_digest, lineage_scope(ckpt))
    server = FollowerServer(bottom, table, cfg.model.bottom.cut_dim, limits, id_log, cut_release=cut_release)
    channel = state["channel"] = FollowerChannel(
        cfg.network.connect,
        cfg.party,
        keys,
        cfg.network.timeout_s,
        max_message_bytes=MAX_SERVE_ROWS * 8 + MAX_HEADER_BYTES,
        notice=log,  # nothing listening, a leader key that does not match (vfl/wire/reach.py)
    )
    session = FollowerSession(cfg, channel)
    cut_dim = cfg.model.bottom.cut_dim
    hello = ServeHello(
        new_nonce(),
        cfg.party,
        PROTOCOL_VERSION,
        record["run"],
        int(record["model_step"]),
        pair_fingerprint(record, cfg.party, cut_dim, leader_side=False),
        cut_dim,
        float(cfg.network.timeout_s),
        limits.max_rows,
        float(limits.rows_per_s),
    )
    log(f"follower {cfg.party}: serving step {hello.step} ({len(table)} rows by id); connecting to {channel.endpoint}")
    welcome = session.greet(hello, ServeWelcome)
    session.join(welcome.run)
    log(
        f"follower {cfg.party}: serving the leader (run {welcome.run}); at most {limits.max_rows} ids a request and "
        f"{limits.rows_per_s:g} ids/s; every id answered is logged to {id_log.path} (--id-log-mb {limits.id_log_mb:g}, "
        f"{id_log.spent / 1e6:.1f} MB used)"
    )
    try:
        session.serve({ServeIds: lambda msg: channel.post(server.answer(msg))}, done=lambda: False)
    except PeerAbort as e:
        if not str(e).endswith(STOPPED):  # any other reason is an error (run_party reports it)
            raise
        log(f"follower {cfg.party}: the leader stopped serving; {server.answered} requests answered, {server.rows} ids")
