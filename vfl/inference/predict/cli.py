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
    from vfl.inference.party_model import run_arguments

    ap = run_arguments(
        f"{command_name(role)} predict",
        "Score new rows with the model a training run selected, across parties (docs/predict.md).",
    )
    ap.epilog = "Any config key can be set after the flags as key.path=value."
    ap.add_argument("--rows", required=True, help="this party's file of new rows (the training file's columns)")
    ap.add_argument("--out", default=None, help="where the leader writes predictions (default: RUN/predict)")
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


def predict_main(argv: list[str], role: str, predict) -> int:
    """Parse, load the config, run the role's predict(cfg, args, log, state) under run_party (one-line errors, ABORT
    to the peers)."""
    from vfl.cli import abort_peers, close_command, fail, run_party, trained_party_config
    from vfl.obs.logs import RunLog, set_verbosity

    args = _arguments(role).parse_intermixed_args(argv)
    set_verbosity(args.quiet, False)
    if args.batch_rows is not None:
        if args.batch_rows < 1:
            return fail(f"--batch-rows must be >= 1, got {args.batch_rows}", 2)
        args.overrides.append(f"train.eval_batch_size={args.batch_rows}")
    args.predictions_out = args.out  # --out names the predictions' directory; output.dir is the run's (--run)
    loaded = trained_party_config(args, role, "predict")
    if isinstance(loaded, int):
        return loaded
    cfg, found = loaded
    out_dir = _out_dir(args, cfg)
    os.makedirs(out_dir, exist_ok=True)
    log = RunLog(os.path.join(out_dir, f"{cfg.party}_predict.log"), cfg.party)
    state: dict = {"out_dir": out_dir}
    if found:
        log(f"{cfg.party}: from --run {args.run}: {', '.join(found)}")
    try:
        return run_party(cfg, log, lambda: predict(cfg, args, log, state), lambda reason: abort_peers(state, reason))
    finally:
        close_command(state, log)


def _out_dir(args, cfg) -> str:
    given = getattr(args, "predictions_out", None)
    return given or os.path.join(cfg.output.dir, "predict")
