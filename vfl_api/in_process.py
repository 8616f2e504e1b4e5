"""Batch prediction in this process, for the Python API, on the same code as the `predict` command.

vfl_api/roles.py: `Leader(...).predict(rows)` and `Follower(...).predict(rows)` run the role's predict (leader/predict.py,
follower/predict.py) here; `simulate_predict(...)` and the command `python -m leader|follower predict` run it in a
process of its own.

    from vfl_api import simulate, simulate_predict
    simulate("leader.yaml", ["follower.yaml"], data="runs/nb/shards", out="runs/nb")
    scores = simulate_predict("leader.yaml", ["follower.yaml"], {"leader": new_leader_df, "follower0": new_f0_df},
                              run="runs/nb", data="runs/nb/shards")
    scores.head()   # id, score (or score_<class> per class), row

Rows are a file (CSV, TSV, Parquet for a table shard) or a pandas DataFrame with the columns of the party's training
file (a DataFrame is written to OUT/tables/new_<party>.parquet, or .tsv for a Criteo-style shard, first).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any


def rows_file(rows: Any, out: str, party: str) -> str:
    """A path of the party's new rows: as given, or a DataFrame written beside the predictions."""
    if isinstance(rows, (str, os.PathLike)):
        return os.fspath(rows)
    import pandas as pd

    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"{party}: rows are a pandas DataFrame or a file path, got {type(rows).__name__}")
    os.makedirs(os.path.join(out, "tables"), exist_ok=True)
    path = os.path.join(out, "tables", f"new_{party}.parquet")  # read with its column types, under the shard's schema
    rows.to_parquet(path, index=False)
    return path


def predict_in_process(config, predict, rows: Any, run: str | None, checkpoint: str | None, out: str | None):
    """Run this party's `predict` (its role's predict(cfg, args, log, state)) in this process, under vfl.cli.run_party
    as the command does, so the peers are told what the command tells them: the project's own sentences, never an
    exception's text that may quote this party's paths; errors raise. Returns the leader's predictions as a DataFrame,
    or the follower's summary dict."""
    from vfl.cli import abort_peers, close_command, party_keys, run_party
    from vfl.obs.logs import RunLog

    cfg = config
    if run is not None:
        cfg = cfg.model_copy(update={"output": cfg.output.model_copy(update={"dir": os.fspath(run)})})
    out_dir = os.fspath(out) if out is not None else os.path.join(cfg.output.dir, "predict")
    os.makedirs(out_dir, exist_ok=True)
    path = rows_file(rows, out_dir, cfg.party)
    args = SimpleNamespace(rows=path, checkpoint=checkpoint, strict=False)
    log = RunLog(os.path.join(out_dir, f"{cfg.party}_predict.log"), cfg.party)
    state: dict = {"out_dir": out_dir}
    failed: list[BaseException] = []

    def body() -> None:
        try:
            party_keys(cfg)
            predict(cfg, args, log, state)
        except BaseException as e:
            failed.append(e)
            raise

    try:
        run_party(cfg, log, body, lambda reason: abort_peers(state, reason))
        if failed:
            raise failed[0]
    finally:
        close_command(state, log)
    if cfg.role == "leader":
        import pandas as pd

        return pd.read_parquet(os.path.join(out_dir, "predictions.parquet"))
    return state.get("summary", {})
