"""The Python API of batch prediction (re-exported by vfl/api.py): `Leader(...).predict(rows)`,
`Follower(...).predict(rows)` and `simulate_predict(...)`, on the same code as `python -m leader|follower predict`.

    from vfl.api import simulate, simulate_predict
    simulate("leader.yaml", ["follower.yaml"], data="runs/nb/shards", out="runs/nb")
    scores = simulate_predict("leader.yaml", ["follower.yaml"], {"leader": new_leader_df, "follower0": new_f0_df},
                              run="runs/nb", data="runs/nb/shards")
    scores.head()   # id, score (or score_<class> per class), row

Rows are a file (CSV, TSV, Parquet for a table shard) or a pandas DataFrame with the columns of the party's training
file (a DataFrame is written to OUT/tables/new_<party>.parquet, or .tsv for a Criteo-style shard, first).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any


def rows_file(rows: Any, shard_dir: str, out: str, party: str) -> str:
    """A path of the party's new rows: as given, or a DataFrame written beside the predictions."""
    if isinstance(rows, (str, os.PathLike)):
        return os.fspath(rows)
    import pandas as pd

    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"{party}: rows are a pandas DataFrame or a file path, got {type(rows).__name__}")
    os.makedirs(os.path.join(out, "tables"), exist_ok=True)
    if os.path.exists(os.path.join(shard_dir, "schema.json")):  # a table shard reads Parquet with its column types
        path = os.path.join(out, "tables", f"new_{party}.parquet")
        rows.to_parquet(path, index=False)
    else:  # a Criteo-style shard reads text
        path = os.path.join(out, "tables", f"new_{party}.tsv")
        rows.to_csv(path, sep="\t", index=False)
    return path


def predict_in_process(config, role: str, rows: Any, run: str | None, checkpoint: str | None, out: str | None):
    """Run this party's `predict` in this process (the CLI's body; errors raise). Returns the leader's predictions
    as a DataFrame, or the follower's summary dict."""
    from vfl.cli import party_keys
    from vfl.inference.predict_cli import checkpoint_of
    from vfl.obs.logs import RunLog

    module = __import__(f"{role}.__main__", fromlist=["predict_body", "abort"])
    cfg = config
    if run is not None:
        cfg = cfg.model_copy(update={"output": cfg.output.model_copy(update={"dir": os.fspath(run)})})
    out_dir = os.fspath(out) if out is not None else os.path.join(cfg.output.dir, "predict")
    os.makedirs(out_dir, exist_ok=True)
    path = rows_file(rows, cfg.data.path, out_dir, cfg.party)
    args = SimpleNamespace(rows=path, checkpoint=checkpoint, strict=False)
    log = RunLog(os.path.join(out_dir, f"{cfg.party}_predict.log"), cfg.party)
    state: dict = {"out_dir": out_dir}
    try:
        party_keys(cfg)
        args.checkpoint = checkpoint_of(args, cfg)
        module.predict_body(cfg, args, log, state)
    except BaseException as e:
        module.abort(state, f"{cfg.party}: {' '.join(str(e).split()) or type(e).__name__}")
        raise
    finally:
        if "channel" in state:
            state["channel"].close()
        if "rows" in state:
            state["rows"].close()
        log.close()
    if role == "leader":
        import pandas as pd

        return pd.read_parquet(os.path.join(out_dir, "predictions.parquet"))
    return state.get("summary", {})


def simulate_predict(
    leader,
    followers: list,
    rows: dict[str, Any],
    *,
    run: str,
    data: str | None = None,
    out: str | None = None,
    keys: str | None = None,
    overrides: dict[str, Any] | None = None,
    timeout_s: float = 3600,
):
    """Predict with a local run's parties as processes over tcp on 127.0.0.1 (`python -m leader|follower predict`).

    run: the training run's output directory (its checkpoints/, and keys/ when simulate() made them); rows:
    {party: its new rows, a file or a DataFrame}, one per party; data: the prepared dataset (each party's transforms
    in data/<party>), else run/shards/<party> when simulate() prepared tables there, else each config's data.path;
    out: where the predictions go (default run/predict). Returns the leader's predictions (a DataFrame); raises
    RuntimeError naming the party that failed."""
    import json

    import pandas as pd

    from vfl.api import _config, _party_name, _stop, _yaml_path
    from vfl.config.schema import ConfigError
    from vfl.ports import free_port

    run = os.path.abspath(run)
    out = os.path.abspath(out or os.path.join(run, "predict"))
    os.makedirs(out, exist_ok=True)
    keys = keys or os.path.join(run, "keys")
    names = [_party_name(leader)] + [_party_name(f) for f in followers]
    missing = sorted(set(names) - set(rows))
    if missing or set(rows) - set(names):
        raise ConfigError(
            f"rows must name every party {names} once; missing {missing}, unknown {sorted(set(rows) - set(names))}"
        )
    configs = [_yaml_path(c, out, n) for c, n in zip([leader, *followers], names)]
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    pairs = [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()]
    procs: dict[str, subprocess.Popen] = {}
    try:
        for i, (name, path) in enumerate(zip(names, configs)):
            shard = os.path.join(data, name) if data else os.path.join(run, "shards", name)
            if not os.path.isdir(shard):
                shard = _config(path, overrides, keys, None, None).data.path
            cmd = [sys.executable, "-m", "leader" if i == 0 else "follower", "predict", "--config", path]
            cmd += ["--rows", rows_file(rows[name], shard, out, name), "--run", run, "--out", out, "--keys", keys]
            cmd += ["--data", shard, "--bind" if i == 0 else "--connect", endpoint, "-q", *pairs]
            if i:
                cmd += [f"network.leader_key_file={os.path.join(keys, names[0] + '.key')}"]
            with open(os.path.join(out, f"{name}.predict.stderr"), "w") as err_file:
                procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs.values()):
            if any(p.poll() not in (None, 0) for p in procs.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        failed = [n for n, p in procs.items() if p.poll() not in (None, 0)]
        if failed or any(p.poll() is None for p in procs.values()):
            name = failed[0] if failed else names[0]
            _stop(procs)
            with open(os.path.join(out, f"{name}.predict.stderr")) as f:
                err = f.read()
            why = f"exited with status {procs[name].returncode}" if failed else f"did not finish in {timeout_s} s"
            raise RuntimeError(f"{name} predict {why}: {' '.join(err.strip().splitlines()[-3:])}")
    finally:
        _stop(procs)
    return pd.read_parquet(os.path.join(out, "predictions.parquet"))
