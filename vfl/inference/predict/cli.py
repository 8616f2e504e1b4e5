"""`python -m leader predict` and `python -m follower predict`: score a file of new rows with a trained split model.

    python -m follower predict --config follower.yaml --rows new_follower.csv --run RUN [--keys K] [--connect EP]
    python -m leader predict --config leader.yaml --rows new_leader.csv --run RUN [--out DIR] [--keys K] [--bind EP]

Each party reads its own checkpoint (default RUN/checkpoints/<party>_final.pt: the model training selected), its
shard's saved transforms (data.path, as in training) and its own file of new rows; the leader writes
DIR/predictions.parquet, DIR/predictions.csv and DIR/predict.json (default DIR: RUN/predict). docs/predict.md.
"""

from __future__ import annotations

import argparse
import os


def _arguments(role: str) -> argparse.ArgumentParser:
    from vfl.command_name import command_name

    ap = argparse.ArgumentParser(
        prog=f"{command_name(role)} predict",
        description="Score new rows with the model a training run selected, across parties (docs/predict.md).",
        epilog="Any config key can be set after the flags as key.path=value.",
    )
    ap.add_argument("--config", required=True, help="the party YAML of the training run")
    ap.add_argument("--rows", required=True, help="this party's file of new rows (the training file's columns)")
    ap.add_argument(
        "--run",
        default=None,
        help="the training run's output directory (default: output.dir); its shards/<party> and keys/ are used "
        "unless --data / --keys say otherwise",
    )
    ap.add_argument("--checkpoint", default=None, help="checkpoint (default: RUN/checkpoints/<party>_final.pt)")
    ap.add_argument("--out", default=None, help="where the leader writes predictions (default: RUN/predict)")
    ap.add_argument("--data", default=None, help="this party's shard directory, for its transforms (data.path)")
    ap.add_argument("--keys", default=None, metavar="DIR", help="CurveZMQ key directory (as for training)")
    ap.add_argument("--timeout", type=float, default=None, help="overrides network.timeout_s")
    ap.add_argument("--batch-rows", type=int, default=None, help="rows per request (train.eval_batch_size)")
    ap.add_argument("--strict", action="store_true", help="a malformed row is an error (default: skipped, counted)")
    ap.add_argument("-q", "--quiet", action="store_true", help="console: warnings and errors only")
    if role == "leader":
        ap.add_argument("--bind", dest="endpoint", default=None, help="CurveZMQ endpoint (overrides network.bind)")
    else:
        ap.add_argument("--connect", dest="endpoint", default=None, help="the leader's endpoint (network.connect)")
    ap.add_argument("overrides", nargs="*", metavar="key.path=value", help="set any config key")
    return ap


def predict_main(argv: list[str], role: str, body, abort) -> int:
    """Parse, load the config, run body(cfg, args, log, state) under run_party (one-line errors, ABORT to peers)."""
    from vfl.cli import config_or_exit, fail, run_party
    from vfl.config.schema import ConfigError
    from vfl.data.errors import DataError
    from vfl.inference.run_layout import apply_run, check_shard_path
    from vfl.obs.logs import RunLog, set_verbosity
    from vfl.training.table_defaults import table_model_of_shard

    args = _arguments(role).parse_intermixed_args(argv)
    set_verbosity(args.quiet, False)
    if args.batch_rows is not None:
        if args.batch_rows < 1:
            return fail(f"--batch-rows must be >= 1, got {args.batch_rows}", 2)
        args.overrides.append(f"train.eval_batch_size={args.batch_rows}")
    args.predictions_out = args.out  # --out names the predictions' directory; output.dir is the run's (--run)
    try:
        found = apply_run(args)  # --run RUN: its shard and keys unless --data / --keys say otherwise
    except ConfigError as e:
        return fail(str(e), 2)
    args.out, args.epochs, args.resume, args.set_pairs = args.run, None, None, []
    cfg = config_or_exit(args, "bind" if role == "leader" else "connect")
    if isinstance(cfg, int):
        return cfg
    if cfg.role != role:
        return fail(f"{args.config} has role {cfg.role!r}; python -m {role} predict needs role: {role}", 2)
    try:
        check_shard_path(cfg, f"python -m {role} predict")
    except DataError as e:
        return fail(str(e), 2)
    cfg = table_model_of_shard(cfg)  # the model the training run resolved from this shard (the table recipe's)
    out_dir = _out_dir(args, cfg)
    os.makedirs(out_dir, exist_ok=True)
    log = RunLog(os.path.join(out_dir, f"{cfg.party}_predict.log"), cfg.party)
    state: dict = {"out_dir": out_dir}
    if found:
        log(f"{cfg.party}: from --run {args.run}: {', '.join(found)}")
    try:
        return run_party(cfg, log, lambda: body(cfg, args, log, state), lambda reason: abort(state, reason))
    finally:
        if "channel" in state:
            state["channel"].close()
        if "rows" in state:
            state["rows"].close()
        log.close()


def _out_dir(args, cfg) -> str:
    given = getattr(args, "predictions_out", None)
    return given or os.path.join(cfg.output.dir, "predict")


def checkpoint_of(args, cfg) -> str:
    from vfl.inference.fingerprint import default_checkpoint

    return args.checkpoint or default_checkpoint(cfg, cfg.output.dir)
