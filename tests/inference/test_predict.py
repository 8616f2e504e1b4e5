"""Batch prediction across parties (`python -m leader predict` / `python -m follower predict`), as real processes
over tcp: train, then predict on new rows, one command each; the scores equal the training run's own evaluation,
directly and through a WAN link."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.support.predict_run import (
    EXTRA_IDS,
    LEADER_ONLY,
    evaluate_in_process,
    leader_config_with,
    predict_processes,
    yaml_load,
)


def test_train_then_predict_equals_the_training_runs_evaluation(trained, procs, tmp_path):
    """One command a party predicts the new rows: every row both parties hold gets a score (unseen categories
    included), the leader-only rows get none and are counted, and on the test split's rows the scores equal, to 1e-6,
    what the training run's evaluation computes (element-wise, and the AUC and logloss of metrics.json)."""
    # Prepare
    from vfl.data.shards import PartyShard

    test = PartyShard(str(trained["shards"] / "leader")).split("test")
    # Execute
    result = predict_processes(procs, trained, tmp_path / "pred")
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
    np.testing.assert_allclose(scores, evaluate_in_process(trained, np.asarray(test.ids)), rtol=0, atol=1e-6)
    from vfl.obs.metrics import test_metrics

    m = test_metrics(np.asarray(test.labels), scores)
    assert m["test_auc"] == pytest.approx(trained["metrics"]["test_auc"], abs=1e-6)
    assert m["test_logloss"] == pytest.approx(trained["metrics"]["test_logloss"], abs=1e-6)
    assert set(report["metrics"]) == {"auc", "logloss"}  # the leader's file carried the label


def test_predict_through_a_wan_link_gives_the_same_scores(trained, procs, tmp_path):
    """Both parties' `predict` as processes, the follower connected through the shipped relay (40 ms RTT, 5 ms
    jitter, 100 Mbit/s) with ranges of 32 rows: every row is scored, the test split's as the training run's
    evaluation computes them (to 1e-6), and the cuts travelled through the link."""
    # Prepare
    from vfl.data.shards import PartyShard
    from vfl.netlink.relay import LinkSpec, Relay

    test = PartyShard(str(trained["shards"] / "leader")).split("test")
    small = leader_config_with(trained, tmp_path, eval_batch_size=32)
    port = int(yaml_load(small["cfgs"]["leader"])["network"]["bind"].rsplit(":", 1)[1])
    # Execute
    with Relay(("127.0.0.1", port), LinkSpec(rtt_ms=40, jitter_ms=5, bandwidth_mbit=100), seed=1) as relay:
        result = predict_processes(
            procs, small, tmp_path / "wan", follower_extra=(f"network.connect={relay.endpoint}",)
        )
    # Assert
    assert result == {"leader": (0, ""), "follower0": (0, "")}, result
    report = json.loads((tmp_path / "wan" / "predict.json").read_text())
    parquet = pd.read_parquet(tmp_path / "wan" / "predictions.parquet")
    assert len(parquet) == report["rows_scored"] and report["rows_without_score"] == LEADER_ONLY
    scores = parquet.set_index("id").loc[np.asarray(test.ids), "score"].to_numpy()
    np.testing.assert_allclose(scores, evaluate_in_process(trained, np.asarray(test.ids)), rtol=0, atol=1e-6)
    cut_bytes = 4 * 2 * len(parquet)  # float32, cut_dim 2
    assert relay.bytes_up > cut_bytes and relay.bytes_down > 0
