"""Batch prediction across parties (`python -m leader predict` / `python -m follower predict`), as real processes
over tcp: train, then predict on new rows, one command each; the scores equal the training run's own evaluation;
checkpoints of another step are refused at the handshake with one line naming both sides."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO
from tests.procs import party_configs, run_split

EXTRA_IDS = 7  # new rows held by both parties, with categories no training row had
LEADER_ONLY = 3  # new rows only the leader holds: they get no score


@pytest.fixture(scope="module")
def trained(synth_tiny, tmp_path_factory):
    """A split run on synth_tiny's vocabulary shards (evaluation every 2 steps, a checkpoint every 3) and each
    party's file of new rows: its whole raw file, EXTRA_IDS rows with unseen categories, and (leader) LEADER_ONLY
    rows no follower holds."""
    from tests.procs import Procs
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    root = tmp_path_factory.mktemp("predict")
    shards = root / "shards"
    prepare(str(synth_tiny), str(shards), load_parties(None), PrepareOptions(vocab_min_count=2, seed=0))
    cfgs = party_configs(
        str(root),
        str(shards),
        train={"epochs": 1, "batch_size": 256, "eval_every_steps": 2, "checkpoint_every": 3},
        leader_train={"early_stopping": {"metric": "auc", "patience": 100}},
    )
    procs = Procs()
    try:
        metrics = run_split(procs, cfgs)
    finally:
        procs.cleanup()
    rows = {}
    for party in ("leader", "follower0"):
        raw = pd.read_csv(shards / "raw" / f"{party}.tsv", sep="\t", dtype=str, keep_default_na=False)
        extra = raw.iloc[:EXTRA_IDS].copy()
        extra["id"] = [f"new-{i}" for i in range(EXTRA_IDS)]
        cats = [c for c in raw.columns if c.startswith("C")]
        extra[cats] = "unseen00"  # a value no training row had: the out-of-vocabulary id
        parts = [raw, extra]
        if party == "leader":
            only = raw.iloc[:LEADER_ONLY].copy()
            only["id"] = [f"leader-only-{i}" for i in range(LEADER_ONLY)]
            parts.append(only)
        rows[party] = root / f"new_{party}.tsv"
        pd.concat(parts).to_csv(rows[party], sep="\t", index=False)
    return {"root": root, "shards": shards, "cfgs": cfgs, "metrics": metrics, "rows": rows}


def _predict(procs, trained, out, leader_extra=(), follower_extra=()):
    """Start both parties' `predict` (the follower first), return {party: (exit code, stderr)}."""
    cfgs, rows = trained["cfgs"], trained["rows"]
    run = str(trained["root"] / "out")
    result = {}
    for party, role, extra in (("follower0", "follower", follower_extra), ("leader", "leader", leader_extra)):
        args = [sys.executable, "-m", role, "predict", "--config", cfgs[party], "--rows", str(rows[party])]
        args += ["--run", run, "--out", str(out), "-q", *extra]
        procs.procs[party] = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    for party in ("leader", "follower0"):
        code, _, err = procs.wait(party, timeout=180)
        result[party] = (code, err)
    return result


def _evaluate_in_process(trained, ids: np.ndarray) -> np.ndarray:
    """The training run's evaluation code (BottomParty.forward_eval and TopTrainer.predict, as LeaderTrainer.evaluate
    runs them) on the final checkpoints, for the test split's rows `ids`."""
    import torch

    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.training.checkpoint import load_checkpoint
    from vfl.training.party import BottomParty
    from vfl.training.top import TopTrainer

    cuts = []
    for party in ("leader", "follower0"):
        cfg = load_config(trained["cfgs"][party])
        shard = PartyShard(cfg.data.path)
        bottom = BottomParty(cfg, shard, torch.device("cpu"))
        ckpt = load_checkpoint(str(trained["root"] / "out" / "checkpoints" / f"{party}_final.pt"))
        bottom.load_state(ckpt["state"]["bottom"])
        assert np.array_equal(np.asarray(bottom.test_split.ids), ids)
        cuts.append(bottom.forward_eval(slice(0, len(ids)), "test"))
        if party == "leader":
            top = TopTrainer(cfg.train, cfg.model.top, (2, 2), torch.device("cpu"), task=shard.task)
            top.load_state(ckpt["state"]["top"])
    return top.predict(cuts)


def test_train_then_predict_equals_the_training_runs_evaluation(trained, procs, tmp_path):
    """One command a party predicts the new rows: every row both parties hold gets a score (unseen categories
    included), the leader-only rows get none and are counted, and on the test split's rows the scores equal, to 1e-6,
    what the training run's evaluation computes (element-wise, and the AUC and logloss of metrics.json)."""
    # Prepare
    from vfl.data.shards import PartyShard

    test = PartyShard(str(trained["shards"] / "leader")).split("test")
    # Execute
    result = _predict(procs, trained, tmp_path / "pred")
    # Assert
    assert result == {"leader": (0, ""), "follower0": (0, "")}, result
    report = json.loads((tmp_path / "pred" / "predict.json").read_text())
    n_raw = len(pd.read_csv(trained["rows"]["follower0"], sep="\t", usecols=["id"])) - EXTRA_IDS
    assert report["rows_scored"] == n_raw + EXTRA_IDS and report["rows_without_score"] == LEADER_ONLY
    assert report["oov_fraction"] > 0
    parquet = pd.read_parquet(tmp_path / "pred" / "predictions.parquet")
    csv = pd.read_csv(tmp_path / "pred" / "predictions.csv")
    assert list(parquet.columns) == ["id", "score", "row"] and len(parquet) == report["rows_scored"]
    np.testing.assert_allclose(csv["score"], parquet["score"], rtol=0, atol=1e-12)
    assert parquet["id"].is_monotonic_increasing and parquet["score"].between(0, 1).all()
    scores = parquet.set_index("id").loc[np.asarray(test.ids), "score"].to_numpy()
    np.testing.assert_allclose(scores, _evaluate_in_process(trained, np.asarray(test.ids)), rtol=0, atol=1e-6)
    from vfl.obs.metrics import test_metrics

    m = test_metrics(np.asarray(test.labels), scores)
    assert m["test_auc"] == pytest.approx(trained["metrics"]["test_auc"], abs=1e-6)
    assert m["test_logloss"] == pytest.approx(trained["metrics"]["test_logloss"], abs=1e-6)
    assert set(report["metrics"]) == {"auc", "logloss"}  # the leader's file carried the label


def test_a_checkpoint_of_another_step_is_refused_naming_both_sides(trained, procs, tmp_path):
    """A follower that loads the step-3 checkpoint while the leader loads the final one: the leader refuses at the
    handshake, before any PSI, with one line naming both runs and steps; both exit non-zero, no prediction file."""
    # Prepare
    ckpt = trained["root"] / "out" / "checkpoints" / "follower0_step3.pt"
    # Execute
    result = _predict(procs, trained, tmp_path / "pred", follower_extra=("--checkpoint", str(ckpt)))
    # Assert
    code, err = result["leader"]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(lines) == 1, err
    run = trained["metrics"]["run_id"][:12]
    assert f"follower0's checkpoint is of training run {run} step 3, the leader's" in lines[0]
    assert f"of run {run} step {trained['metrics']['model_step']}" in lines[0]
    assert result["follower0"][0] == 1
    assert not (tmp_path / "pred" / "predictions.parquet").exists()
