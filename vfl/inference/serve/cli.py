"""`python -m leader serve` and `python -m follower serve`: long-running parties that score ids online (docs/serving.md).

    python -m follower serve --config follower.yaml [--run RUN_DIR] [--new-rows PATH] [--rows-per-s 100000]
                             [--max-rows 1024]
    python -m leader serve --config leader.yaml [--run RUN_DIR] [--new-rows PATH] [--http 127.0.0.1:8080]
                           [--deadline-ms 1000] [--max-connections 64] [--max-per-address 16] [--read-timeout-s 10]

The arguments and the guarded run of both; what each role runs is its serve() (leader/serve.py, follower/serve.py).
Each party loads its final (selected) checkpoint and its prepared shard, and with --new-rows the rows of ids it has
not prepared (vfl/inference/serve/serving_rows.py); they talk over CurveZMQ with the training
keys (network.bind / network.connect, the same YAML); the leader listens for clients on --http (127.0.0.1 by
default: the endpoint has no authentication of its own, so it stays local unless --http names another address).
"""

from __future__ import annotations

import os


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


def serve_main(argv: list[str] | None, role: str, serve) -> int:
    """Parse, load the config, run the role's serve(cfg, args, log, state) under run_party (one-line errors, ABORT to
    the peers), and close what it started."""
    from vfl.cli import abort_peers, run_party, trained_party_config
    from vfl.obs.logs import RunLog

    args = _arguments(role).parse_intermixed_args(argv)
    args.endpoint = args.bind if role == "leader" else args.connect
    loaded = trained_party_config(args, role, "serve")
    if isinstance(loaded, int):
        return loaded
    cfg, found = loaded
    log = RunLog(os.path.join(cfg.output.dir, f"{cfg.party}_serve.log"), cfg.party)
    if found:
        log(f"{cfg.party}: from --run {args.run}: {', '.join(found)}")
    state: dict = {}
    try:
        return run_party(cfg, log, lambda: serve(cfg, args, log, state), lambda reason: abort_peers(state, reason))
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
