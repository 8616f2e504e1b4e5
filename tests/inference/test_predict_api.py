"""The Python API of batch prediction on a table of your own (data.schema: standardize, log1p, quantile bins,
vocabulary and hashing, text ids): simulate_predict over three processes, and Leader(...).predict in this process."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from tests.support.own_table import SCHEMAS, own_table
from tests.support.party_processes import party_configs


def test_simulate_predict_on_dataframes_reproduces_the_runs_test_metrics_and_leader_predict_scores_new_rows(
    tmp_path, procs
):
    # Prepare: train on each party's DataFrame (simulate prepares them under their schemas)
    from vfl.data.shards import PartyShard
    from vfl.obs.metrics import test_metrics
    from vfl_api import Leader, simulate, simulate_predict

    frames = own_table(1500, seed=1)
    cfgs = party_configs(
        str(tmp_path), str(tmp_path / "unused"), followers=("shop", "telco"), train={"epochs": 1, "batch_size": 128}
    )
    docs = {}
    for name in frames:
        docs[name] = yaml.safe_load(open(cfgs[name]))
        docs[name]["data"]["schema"] = SCHEMAS[name]
    run = str(tmp_path / "run")
    history = simulate(docs["leader"], [docs["shop"], docs["telco"]], tables=frames, out=run)
    # Execute: predict the very rows the parties trained on (the leader's frame with its label)
    scores = simulate_predict(docs["leader"], [docs["shop"], docs["telco"]], frames, run=run)
    # Assert: every row all three hold is scored, and on the test split the run's own test AUC and logloss come back
    assert len(scores) == len(frames["telco"]) and list(scores.columns) == ["id", "score", "row"]
    test = PartyShard(os.path.join(run, "shards", "leader")).split("test")
    held = np.isin(np.asarray(test.ids), scores["id"].to_numpy())  # training's test split: the ids every party holds
    by_id = scores.set_index("id").loc[np.asarray(test.ids)[held], "score"].to_numpy()
    got = test_metrics(np.asarray(test.labels)[held], by_id)
    assert got["test_auc"] == pytest.approx(history.metrics["test_auc"], abs=1e-6)
    assert got["test_logloss"] == pytest.approx(history.metrics["test_logloss"], abs=1e-6)

    # Execute: new customers' rows, no label, the leader in this process and each follower as `python -m follower`
    new = own_table(300, seed=2)
    new["leader"] = new["leader"].drop(columns=["churn"])
    out = tmp_path / "new"
    for name in ("shop", "telco"):
        rows = out / f"{name}.csv"
        os.makedirs(out, exist_ok=True)
        new[name].to_csv(rows, index=False)
        args = [sys.executable, "-m", "follower", "predict", "--config", os.path.join(run, f"{name}.yaml")]
        args += ["--rows", str(rows), "--run", run, "--keys", os.path.join(run, "keys"), "--data"]
        args += [
            os.path.join(run, "shards", name),
            f"network.leader_key_file={os.path.join(run, 'keys', 'leader.key')}",
        ]
        procs.start_argv(name, args)
    leader = Leader(
        os.path.join(run, "leader.yaml"), keys=os.path.join(run, "keys"), data=os.path.join(run, "shards", "leader")
    )
    predictions = leader.predict(new["leader"], run=run, out=str(out))
    # Assert: the rows every party holds are scored (telco lacks some), as probabilities; no metric without labels
    for name in ("shop", "telco"):
        code, _, err = procs.wait(name, 120)
        assert code == 0, err
    assert len(predictions) == len(new["telco"]) and predictions["score"].between(0, 1).all()
    assert "metrics" not in yaml.safe_load(open(out / "predict.json"))


def test_an_in_process_prediction_that_fails_tells_the_followers_no_path_of_the_leaders(tmp_path, monkeypatch):
    """Leader(...).predict failing after its channel is up (here: its predictions cannot be written) raises the
    error in the caller's process, and the ABORT its followers get is the CLI's (vfl.cli.run_party: the category of
    the failure), not the exception's text with the leader's paths; before, the text went to every follower."""
    # Prepare: a leader whose predict body opens its channel, then fails on a path of its own
    import vfl.cli
    from vfl.config.schema import load_config
    from vfl_api.in_process import predict_in_process

    cfg = load_config(party_configs(str(tmp_path), str(tmp_path / "shards"))["leader"])
    told = []
    secret = str(tmp_path / "private" / "predictions.parquet")

    def predict(cfg, args, log, state):
        state["channel"] = SimpleNamespace(abort_all=told.append, close=lambda: None)
        raise PermissionError(13, "Permission denied", secret)

    monkeypatch.setattr(vfl.cli, "party_keys", lambda cfg: None)
    # Execute / Assert: the caller gets the error itself; the follower is told one line without the path
    with pytest.raises(PermissionError, match="Permission denied"):
        predict_in_process(cfg, predict, str(tmp_path / "rows.csv"), None, None, str(tmp_path / "out"))
    assert len(told) == 1 and told[0].startswith("leader") and str(tmp_path) not in told[0], told
