"""`python -m follower predict`: answer the leader's requests for the cuts of the new rows of --rows."""

from __future__ import annotations


def predict(cfg, args, log, state: dict) -> None:
    """Load the checkpoint and the new rows, PSI on their ids, answer the leader's ranges until PREDICT_DONE
    (follower/predictor.py); state["summary"]: what this party did (state also holds the channel and the rows)."""
    from follower.channel import connect
    from follower.predictor import FollowerPredictor
    from follower.psi import new_ids_intersection
    from vfl.cli import party_keys
    from vfl.distributed.launch import rank_env
    from vfl.runs.layout import default_checkpoint
    from vfl.training.party import resolve_device, set_threads

    keys = party_keys(cfg)
    set_threads(cfg.train.threads, 2)
    device = resolve_device(cfg.train.device)
    checkpoint = args.checkpoint or default_checkpoint(cfg, cfg.output.dir)
    predictor = FollowerPredictor(cfg, checkpoint, args.rows, log, device, strict=args.strict)
    predictor.report_dir = state["out_dir"]  # <party>_predict_embedding_dp.json beside the predictions
    state["rows"] = predictor.rows
    channel = state["channel"] = connect(cfg, rank_env(), keys, len(predictor.rows), log)
    state["summary"] = predictor.run(channel, new_ids_intersection(cfg, channel, log))
