"""`python -m leader predict`: score the new rows of --rows with the followers, into predictions.parquet/.csv."""

from __future__ import annotations

import os


def predict(cfg, args, log, state: dict) -> None:
    """Load the checkpoint and the new rows, PSI on their ids, score the intersection with the followers
    (leader/predictor.py) and write OUT/predict.json (state: the channel and the rows, for the caller to close)."""
    from leader.channel import listen
    from leader.predictor import LeaderPredictor
    from leader.psi import new_ids_intersection
    from vfl.cli import party_keys
    from vfl.distributed.launch import rank_env
    from vfl.obs.metrics import write_json
    from vfl.runs.layout import default_checkpoint
    from vfl.training.party import resolve_device, set_threads

    keys = party_keys(cfg)
    set_threads(cfg.train.threads, 1 + len(cfg.network.followers))
    device = resolve_device(cfg.train.device)
    checkpoint = args.checkpoint or default_checkpoint(cfg, cfg.output.dir)
    predictor = LeaderPredictor(cfg, checkpoint, args.rows, log, device, strict=args.strict)
    state["rows"] = predictor.rows
    channel = state["channel"] = listen(cfg, rank_env(), keys, len(predictor.rows), log)
    report = predictor.run(channel, new_ids_intersection(cfg, channel, log), state["out_dir"])
    write_json(os.path.join(state["out_dir"], "predict.json"), report)
    metrics = report.get("metrics") or {}
    log(
        f"leader {cfg.party}: scored {report['rows_scored']} rows ({report['rows_without_score']} without a score) in "
        f"{report['predict_seconds']:.1f} s, {report['rows_per_second']:.0f} rows/s -> {report['files']['parquet']}"
        + "".join(f" {k}: {v:.6f}" for k, v in metrics.items() if isinstance(v, float))
    )
