"""`python -m leader serve` and `python -m follower serve`: long-running parties that score ids online (docs/serving.md).

    python -m follower serve --config follower.yaml [--run RUN_DIR] [--new-rows PATH] [--rows-per-s 100000]
                             [--max-rows 1024]
    python -m leader serve --config leader.yaml [--run RUN_DIR] [--new-rows PATH] [--http 127.0.0.1:8080]
                           [--deadline-ms 1000] [--max-connections 64] [--max-per-address 16] [--read-timeout-s 10]

Each party loads its final (selected) checkpoint and its prepared shard, and with --new-rows the rows of ids it has
not prepared (vfl/inference/serve/serving_rows.py); they talk over CurveZMQ with the training
keys (network.bind / network.connect, the same YAML); the leader listens for clients on --http (127.0.0.1 by
default: the endpoint has no authentication of its own, so it stays local unless --http names another address).
"""

from __future__ import annotations

import os
import signal
import threading


def _arguments(role: str):
    from vfl.command_name import command_name
    from vfl.inference.party_model import run_arguments
    from vfl.inference.serve.follower import DEFAULT_ID_LOG_MB, DEFAULT_ROWS_PER_S
    from vfl.inference.serve.http_clients import (
        DEFAULT_MAX_CONNECTIONS,
        DEFAULT_MAX_PER_ADDRESS,
        DEFAULT_READ_TIMEOUT_S,
    )

    ap = run_arguments(
        f"{command_name(role)} serve",
        "Score ids online: the leader asks each follower for the cuts of the ids (docs/serving.md).",
    )
    ap.add_argument("--timeout", type=float, default=None, help="overrides network.timeout_s (the idle deadline)")
    ap.add_argument(
        "--new-rows",
        default=None,
        metavar="PATH",
        help="this party's rows of ids it has not prepared (new customers): a CSV/TSV/Parquet file with its training "
        "columns, or a directory of them; transformed with the frozen training-time transforms, reloaded on change",
    )
    ap.add_argument("--max-rows", type=int, default=1024, help="ids in one request (and one batch) at most")
    ap.add_argument(
        "--engine",
        choices=("onnx", "torch"),
        default="onnx",
        help="what runs the model: onnxruntime on its ONNX export (checked against torch at start) or torch",
    )
    if role == "leader":
        ap.add_argument("--bind", default=None, help="CurveZMQ endpoint for the followers (overrides network.bind)")
        ap.add_argument("--http", default="127.0.0.1:8080", help="HOST:PORT of the JSON endpoint (port 0: any free)")
        ap.add_argument("--deadline-ms", type=int, default=1000, help="a request's deadline unless it sets one")
        ap.add_argument(
            "--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, help="HTTP client connections at once"
        )
        ap.add_argument(
            "--max-per-address",
            type=int,
            default=DEFAULT_MAX_PER_ADDRESS,
            help="HTTP client connections at once from one client address",
        )
        ap.add_argument(
            "--read-timeout-s",
            type=float,
            default=DEFAULT_READ_TIMEOUT_S,
            help="seconds an HTTP client has to send a whole request, from its connect or its previous answer",
        )
    else:
        ap.add_argument("--connect", default=None, help="the leader's endpoint (overrides network.connect)")
        ap.add_argument("--rows-per-s", type=float, default=DEFAULT_ROWS_PER_S, help="ids answered per second")
        ap.add_argument(
            "--id-log-mb",
            type=float,
            default=DEFAULT_ID_LOG_MB,
            help="disk budget of the served-ids logs (MB); serving stops when they reach it",
        )
    ap.add_argument("overrides", nargs="*", metavar="key.path=value", help="set any config key")
    return ap


def serve_main(argv: list[str] | None, role: str) -> int:
    from vfl.cli import config_or_exit, fail, run_party
    from vfl.config.schema import ConfigError
    from vfl.data.errors import DataError
    from vfl.inference.run_layout import apply_run, check_shard_path
    from vfl.obs.logs import RunLog
    from vfl.training.table_defaults import table_model_of_shard

    args = _arguments(role).parse_intermixed_args(argv)
    try:
        found = apply_run(args)  # --run RUN: its shard and keys unless --data / --keys say otherwise
    except ConfigError as e:
        return fail(str(e), 2)
    args.out, args.epochs, args.resume, args.set_pairs = args.run, None, None, []
    args.endpoint = args.bind if role == "leader" else args.connect
    cfg = config_or_exit(args, "bind" if role == "leader" else "connect")
    if isinstance(cfg, int):
        return cfg
    if cfg.role != role:
        return fail(f"{args.config} has role {cfg.role!r}; python -m {role} serve needs role: {role}", 2)
    try:
        check_shard_path(cfg, f"python -m {role} serve")
    except DataError as e:
        return fail(str(e), 2)
    cfg = table_model_of_shard(cfg)  # the model the training run resolved from this shard (the table recipe's)
    log = RunLog(os.path.join(cfg.output.dir, f"{cfg.party}_serve.log"), cfg.party)
    if found:
        log(f"{cfg.party}: from --run {args.run}: {', '.join(found)}")
    state: dict = {}
    body = _leader_body if role == "leader" else _follower_body

    def abort(reason: str) -> None:
        if "channel" in state:
            (state["channel"].abort_all if role == "leader" else state["channel"].abort)(reason)

    try:
        return run_party(cfg, log, lambda: body(cfg, args, log, state), abort)
    finally:
        for key in ("http", "worker"):
            if key in state:
                (state[key].server_close if key == "http" else state[key].stop)()
        if "channel" in state:
            state["channel"].close()
        if "id_log" in state:
            state["id_log"].close()
        release = state.get("cut_release")
        if release is not None and release.on and release.scope is not None:  # what serving's sends spent
            release.write_report(cfg.output.dir, f"{cfg.party}_serve_embedding_dp.json")
            log(release.summary())
        if "new_rows" in state:
            state["new_rows"].close()
        log.close()


def _follower_body(cfg, args, log, state: dict) -> None:
    from vfl.cli import party_keys
    from vfl.inference.serve.follower import ServeLimits, serve_follower

    limits = ServeLimits(args.max_rows, args.rows_per_s, args.id_log_mb)
    limits.check()  # a bad limit is refused before the keys are read
    serve_follower(cfg, party_keys(cfg), limits, args.checkpoint, log, state, args.engine, args.new_rows)


def _leader_body(cfg, args, log, state: dict) -> None:
    from vfl.inference.serve.follower import STOPPED
    from vfl.inference.serve.http_clients import ClientLimits

    limits = ClientLimits(args.max_connections, args.max_per_address, args.read_timeout_s)
    http = start_leader(
        cfg, args.http, args.max_rows, args.deadline_ms, args.checkpoint, log, state, args.engine, limits, args.new_rows
    )
    stop = threading.Event()

    def on_signal(signum, frame) -> None:
        stop.set()
        threading.Thread(target=http.shutdown, daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    http.serve_forever(poll_interval=0.5)
    if stop.is_set():
        state["channel"].abort_all(f"{cfg.party} {STOPPED}")
        log(f"leader {cfg.party}: stopped after {state['worker'].batches} batches, {state['worker'].rows} rows")


def start_leader(
    cfg,
    http: str,
    max_rows: int,
    deadline_ms: int,
    checkpoint: str | None,
    log,
    state: dict,
    engine: str = "onnx",
    limits=None,
    new_rows: str | None = None,
):
    """Load the leader's model and table (and the new rows of `new_rows`, a file or directory), greet every follower,
    start the worker; returns the HTTP server (not yet serving) bounding its clients by `limits` (a ClientLimits;
    None: the defaults)."""
    import numpy as np
    import torch

    from vfl.cli import party_keys
    from vfl.data.shards import PartyShard
    from vfl.inference.export.onnx_engine import fast_forward, head_module
    from vfl.inference.fingerprint import checkpoint_hello_problems
    from vfl.inference.party_model import RowTable, load_party_model, scorer, top_in_dim
    from vfl.inference.serve.http_clients import ClientLimits
    from vfl.inference.serve.http_endpoint import ScoreHTTPServer
    from vfl.inference.serve.leader import ScoringWorker
    from vfl.inference.serve.serving_rows import ServingRows
    from vfl.session.leader import HandshakeError, LeaderSession
    from vfl.training.party import set_threads
    from vfl.wire import PROTOCOL_VERSION, LeaderChannel
    from vfl.wire.serve_messages import MAX_SERVE_ROWS, ServeHello, ServeWelcome, follower_message_bytes

    if not 1 <= max_rows <= MAX_SERVE_ROWS:
        raise ValueError(f"--max-rows must be in [1, {MAX_SERVE_ROWS}], got {max_rows}")
    limits = limits or ClientLimits()
    limits.check()
    host, _, port = http.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--http must be HOST:PORT, got {http!r}")
    keys = party_keys(cfg)
    set_threads(cfg.train.threads or 1, 1)
    shard = PartyShard(cfg.data.path)
    if not shard.has_labels:
        raise ValueError(f"data.path {cfg.data.path} holds no labels: the leader serves its labelled shard")
    checkpoint = checkpoint or os.path.join(cfg.output.dir, "checkpoints", f"{cfg.party}_final.pt")
    bottom, top, ckpt, record = load_party_model(cfg, shard, checkpoint)
    model = scorer(bottom, top, shard.task)
    table = state["new_rows"] = ServingRows(RowTable(shard), new_rows, cfg.data.path, cfg.output.dir, log)
    table.start()
    step = int(record["model_step"])
    channel = state["channel"] = LeaderChannel(
        cfg.network.bind,
        cfg.network.followers,
        keys,
        cfg.network.timeout_s,
        cfg.party,
        max_message_bytes=follower_message_bytes(0, {}),  # a SERVE_HELLO; raised to a batch's SERVE_CUT below
        notice=log,
    )
    log(f"leader {cfg.party}: serving step {step} ({len(table)} rows by id); waiting for {list(cfg.network.followers)}")
    session = LeaderSession(cfg, channel)

    def check(f: str, hello: ServeHello) -> list[str]:  # its sentences reach f: no path of the leader's in them
        return checkpoint_hello_problems(record, f, hello, "its checkpoint", PROTOCOL_VERSION)

    hellos = session.greet(
        ServeHello, check, lambda f: f"SERVE_HELLO from {f} (start `python -m follower serve` there)", "serving refused"
    )
    for f, link in session.links.items():  # a request's latency is at least one round trip to every follower
        log(f"leader {cfg.party}: link to {f}: {link.describe()} (timed at its SERVE_HELLO)")
    width = sum(session.cut_dims[f] for f in cfg.network.followers) + cfg.model.bottom.cut_dim
    if width != top_in_dim(top):
        raise HandshakeError(
            f"serving refused: the cuts are {width} wide ({session.cut_dims}), the top model reads {top_in_dim(top)}"
        )
    session.start_run({f: h.nonce for f, h in hellos.items()}, lambda f: ServeWelcome(channel.run, hellos[f].nonce))
    rows = min([max_rows, *(h.max_rows for h in hellos.values())])
    channel.max_message_bytes = follower_message_bytes(rows, session.cut_dims)
    worker = state["worker"] = ScoringWorker(
        channel, list(cfg.network.followers), session.cut_dims, model, table, shard.task, rows
    )
    sample = table.snapshot().features(np.arange(min(256, len(table))))
    worker.bottom_fn = fast_forward(model.bottom, ["dense", "dense_missing", "cat"], sample, engine, log)
    with torch.no_grad():
        own = model.bottom(*sample)
    cuts = torch.randn(own.shape[0], width - own.shape[1], generator=torch.Generator().manual_seed(0))
    worker.head_fn = fast_forward(head_module(model), ["own_cut", "follower_cuts"], (own, cuts), engine, log)
    worker.keepalive_every = session.keepalive_every
    worker.check_hello, worker.log = check, log
    worker.start()
    server = state["http"] = ScoreHTTPServer((host, int(port)), worker, rows, deadline_ms, step, log, limits)
    address = f"http://{server.server_address[0]}:{server.server_address[1]}"
    log(
        f"leader {cfg.party}: scoring on {address} (POST /score, GET /health; run {channel.run}; at most {rows} ids; "
        f"a follower's message at most {channel.max_message_bytes} bytes; at most {limits.max_connections} clients, "
        f"{limits.max_per_address} from one address, {limits.read_timeout_s:g} s to send a request)"
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            f"leader {cfg.party}: --http {http} is reachable beyond this host; the endpoint has no authentication"
        )
    return server


SUBCOMMANDS = ("export", "serve")


def inference_subcommand(argv: list[str], role: str) -> int | None:
    """Run `python -m leader|follower export|serve ...` (None: argv is not one of those, training goes on)."""
    if not argv or argv[0] not in SUBCOMMANDS:
        return None
    if argv[0] == "export":
        from vfl.inference.export.cli import export_main

        return export_main(argv[1:], role)
    return serve_main(argv[1:], role)
