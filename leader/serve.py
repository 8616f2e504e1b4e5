"""`python -m leader serve`: score ids online with the followers, behind a local HTTP JSON endpoint (docs/serving.md).

The leader loads its final (selected) checkpoint and its labelled shard (with --new-rows, the rows of ids it has not
prepared), greets every follower over CurveZMQ with the training keys, starts the scoring worker
(vfl/inference/serve/leader.py) and answers POST /score until SIGTERM or SIGINT (vfl/inference/serve/http_endpoint.py).
"""

from __future__ import annotations

import os
import signal
import threading


def serve(cfg, args, log, state: dict) -> None:
    """Start serving (start_leader) and answer clients until a signal stops it; the followers are told why (state:
    the channel, worker, HTTP server and new rows, for the caller to close)."""
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
    from vfl.cli import party_keys
    from vfl.inference.serve.http_clients import ClientLimits
    from vfl.inference.serve.http_endpoint import ScoreHTTPServer
    from vfl.wire.serve_messages import MAX_SERVE_ROWS

    if not 1 <= max_rows <= MAX_SERVE_ROWS:
        raise ValueError(f"--max-rows must be in [1, {MAX_SERVE_ROWS}], got {max_rows}")
    limits = limits or ClientLimits()
    limits.check()
    host, _, port = http.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--http must be HOST:PORT, got {http!r}")
    keys = party_keys(cfg)
    model, shard, table, record = _load(cfg, checkpoint, log, state, new_rows)
    worker = _greet_and_start(cfg, keys, (model, shard, table, record), max_rows, engine, log, state)
    server = state["http"] = ScoreHTTPServer(
        (host, int(port)), worker, worker.max_rows, deadline_ms, int(record["model_step"]), log, limits
    )
    address = f"http://{server.server_address[0]}:{server.server_address[1]}"
    log(
        f"leader {cfg.party}: scoring on {address} (POST /score, GET /health; run {state['channel'].run}; at most "
        f"{worker.max_rows} ids; a follower's message at most {state['channel'].max_message_bytes} bytes; at most "
        f"{limits.max_connections} clients, {limits.max_per_address} from one address, {limits.read_timeout_s:g} s to "
        "send a request)"
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            f"leader {cfg.party}: --http {http} is reachable beyond this host; the endpoint has no authentication"
        )
    return server


def _load(cfg, checkpoint: str | None, log, state: dict, new_rows: str | None):
    """The leader's scorer (bottom and top), its labelled shard, its table of rows by id (started) and the
    checkpoint's run record."""
    from vfl.data.shards import PartyShard
    from vfl.inference.party_model import RowTable, load_party_model, scorer
    from vfl.inference.serve.serving_rows import ServingRows
    from vfl.training.party import set_threads

    set_threads(cfg.train.threads or 1, 1)
    shard = PartyShard(cfg.data.path)
    if not shard.has_labels:
        raise ValueError(f"data.path {cfg.data.path} holds no labels: the leader serves its labelled shard")
    checkpoint = checkpoint or os.path.join(cfg.output.dir, "checkpoints", f"{cfg.party}_final.pt")
    bottom, top, _, record = load_party_model(cfg, shard, checkpoint)
    model = scorer(bottom, top, shard.task)
    table = state["new_rows"] = ServingRows(RowTable(shard), new_rows, cfg.data.path, cfg.output.dir, log)
    table.start()
    return model, shard, table, record


def _greet_and_start(cfg, keys, loaded: tuple, max_rows: int, engine: str, log, state: dict):
    """Listen, greet every follower (SERVE_HELLO checked against the checkpoint, the cuts against the top), welcome
    them and start the scoring worker on the engine's fast forward passes; returns the worker. loaded: _load's."""
    from vfl.inference.party_model import top_in_dim
    from vfl.inference.serve.leader import ScoringWorker
    from vfl.runs.record import checkpoint_hello_problems
    from vfl.session.leader import HandshakeError, LeaderSession
    from vfl.wire import PROTOCOL_VERSION, LeaderChannel
    from vfl.wire.serve_messages import ServeHello, ServeWelcome, follower_message_bytes

    model, shard, table, record = loaded
    channel = state["channel"] = LeaderChannel(
        cfg.network.bind,
        cfg.network.followers,
        keys,
        cfg.network.timeout_s,
        cfg.party,
        max_message_bytes=follower_message_bytes(0, {}),  # a SERVE_HELLO; raised to a batch's SERVE_CUT below
        notice=log,
    )
    step = int(record["model_step"])
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
    if width != top_in_dim(model.top):
        raise HandshakeError(
            f"serving refused: the cuts are {width} wide ({session.cut_dims}), the top model reads "
            f"{top_in_dim(model.top)}"
        )
    session.start_run({f: h.nonce for f, h in hellos.items()}, lambda f: ServeWelcome(channel.run, hellos[f].nonce))
    rows = min([max_rows, *(h.max_rows for h in hellos.values())])
    channel.max_message_bytes = follower_message_bytes(rows, session.cut_dims)
    worker = state["worker"] = ScoringWorker(
        channel, list(cfg.network.followers), session.cut_dims, model, table, shard.task, rows
    )
    _fast_forwards(worker, model, table, width, engine, log)
    worker.keepalive_every = session.keepalive_every
    worker.check_hello, worker.log = check, log
    worker.start()
    return worker


def _fast_forwards(worker, model, table, width: int, engine: str, log) -> None:
    """The worker's bottom and head passes on `engine` (ONNX checked against torch on a sample of the table)."""
    import numpy as np
    import torch

    from vfl.inference.export.onnx_engine import fast_forward, head_module

    sample = table.snapshot().features(np.arange(min(256, len(table))))
    worker.bottom_fn = fast_forward(model.bottom, ["dense", "dense_missing", "cat"], sample, engine, log)
    with torch.no_grad():
        own = model.bottom(*sample)
    cuts = torch.randn(own.shape[0], width - own.shape[1], generator=torch.Generator().manual_seed(0))
    worker.head_fn = fast_forward(head_module(model), ["own_cut", "follower_cuts"], (own, cuts), engine, log)
