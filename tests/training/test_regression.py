"""train.task regression: a real-valued label, MSE (or Huber) on one output, RMSE / MAE / R^2, selection on RMSE,
split == centralized (label DP for regression: tests/privacy/test_label_dp_regression*.py and
tests/labeldp/test_label_dp_regression_split.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

from tests.support.leader_config import _leader
from tests.support.party_processes import party_configs, run_centralized, run_split
from tests.support.regression_shards import regression_shards
from vfl.config.schema import ConfigError, TrainConfig, parse_config
from vfl.data.errors import DataError
from vfl.data.shards import PartyShard
from vfl.labeldp.release import leader_task
from vfl.obs.curves import read_metrics_csv
from vfl.obs.metrics import regression_metrics
from vfl.training.selection import EarlyStopping


@pytest.fixture(scope="module")
def shards_reg(shards_small, tmp_path_factory):
    """shards_small with the leader's label rewritten as a real value of every party's dense columns."""
    return regression_shards(shards_small, tmp_path_factory.mktemp("regression") / "shards")


def test_split_regression_equals_centralized_and_reports_rmse_mae_r2(tmp_path, shards_reg, procs):
    """Over real processes with PSI: the split run's per-step losses equal the centralized reference's (as for
    binary labels: rtol 1e-5), and so do its test RMSE, MAE and R^2; the model learns; the best step is selected
    on validation RMSE by default."""
    # Prepare
    es = {"early_stopping": {"patience": 10}, "eval_every_steps": 5}
    cfgs = party_configs(str(tmp_path), str(shards_reg), leader_train={"task": "regression", **es})
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert
    a, b = np.array(split["step_losses"]), np.array(central["step_losses"])
    assert a.size == b.size == split["steps"] > 10
    np.testing.assert_allclose(a, b, rtol=1e-5)
    for key in ("test_rmse", "test_mae", "test_r2"):
        assert split[key] == pytest.approx(central[key], rel=1e-4, abs=1e-4), key
    assert "test_auc" not in split and "test_logloss" not in split
    assert split["test_r2"] > 0.3 and split["test_rmse"] < 3.0
    assert split["selection"]["metric"] == "rmse" and set(split["history"][0]["valid"]) == {
        "rmse",
        "rmse_ci95",
        "mae",
        "r2",
    }
    assert split["selection"]["best_value"] == min(h["valid"]["rmse"] for h in split["history"])
    rows = [r for r in read_metrics_csv(str(tmp_path / "out" / "metrics.csv")) if r["kind"] == "eval"]
    assert rows and {"valid_rmse", "test_r2"} <= set(rows[0]) and "test_auc" not in rows[0]
    assert float(rows[0]["valid_rmse"]) == pytest.approx(split["history"][0]["valid"]["rmse"])
    log = (tmp_path / "out" / "leader.log").read_text()
    assert "valid_rmse: " in log and f"final test_rmse: {split['test_rmse']:.6f} test_mae: " in log
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0


def test_regression_metrics_match_scikit_learn():
    # Prepare
    rng = np.random.default_rng(3)
    y, p = rng.normal(5.0, 2.0, 500), rng.normal(5.0, 2.0, 500)
    # Execute
    m = regression_metrics(y, p)
    # Assert
    assert m["rmse"] == pytest.approx(math.sqrt(mean_squared_error(y, p)), rel=1e-12)
    assert m["mae"] == pytest.approx(mean_absolute_error(y, p), rel=1e-12)
    assert m["r2"] == pytest.approx(r2_score(y, p), rel=1e-12)
    assert math.isnan(regression_metrics(np.ones(4), np.zeros(4))["r2"])


def test_selection_on_rmse_and_mae_prefers_lower_values_and_r2_higher():
    # Prepare
    rmse, r2 = EarlyStopping("rmse", patience=2), EarlyStopping("r2", patience=2)
    # Execute / Assert
    assert rmse.update(2.0, 1, 0) and rmse.update(1.5, 2, 0) and not rmse.update(1.7, 3, 0)
    assert rmse.best_step == 2
    assert r2.update(0.2, 1, 0) and r2.update(0.4, 2, 0) and not r2.update(0.3, 3, 0)


def test_the_regression_shard_is_read_as_a_task_and_checked_against_train_task(shards_reg, shards_small):
    # Prepare
    reg, binary = PartyShard(str(shards_reg / "leader")), PartyShard(str(shards_small / "leader"))
    # Execute
    task = leader_task("regression", reg)
    # Assert
    assert task.is_regression and task.outputs == 1 and reg.num_classes is None
    assert reg.split("train").labels.dtype == np.float32 and PartyShard(str(shards_reg / "follower0")).task is None
    with pytest.raises(DataError, match="train.task is binary but the leader's shard .* holds real-valued labels"):
        leader_task("binary", reg)
    with pytest.raises(DataError, match="train.task is regression but the leader's shard .* holds 0/1 labels"):
        leader_task("regression", binary)


def test_a_regression_shard_with_non_finite_labels_is_refused(shards_reg, tmp_path):
    # Prepare
    bad = regression_shards(shards_reg.parent / "shards", tmp_path / "bad")
    labels = np.load(bad / "leader" / "valid" / "labels.npy")
    labels[3] = np.nan
    np.save(bad / "leader" / "valid" / "labels.npy", labels)
    # Execute / Assert
    with pytest.raises(DataError, match="valid: labels.npy holds 1 non-finite values"):
        PartyShard(str(bad / "leader")).split("valid")


def test_regression_selects_on_rmse_by_default_and_refuses_class_metrics_and_huber_elsewhere():
    # Execute
    default = parse_config(_leader(train={"task": "regression", "early_stopping": {"patience": 4}}))
    r2 = parse_config(_leader(train={"task": "regression", "loss": "huber", "early_stopping": {"metric": "r2"}}))
    binary = parse_config(_leader(train={"early_stopping": {}}))
    with pytest.raises(ConfigError) as auc:
        parse_config(_leader(train={"task": "regression", "early_stopping": {"metric": "auc"}}))
    with pytest.raises(ConfigError) as rmse:
        parse_config(_leader(train={"early_stopping": {"metric": "rmse"}, "loss": "huber"}))
    # Assert
    assert default.train.early_stopping.metric == "rmse" and default.train.loss == "mse"
    assert r2.train.early_stopping.metric == "r2" and r2.train.loss == "huber"
    assert binary.train.early_stopping.metric == "auc" and TrainConfig().early_stopping is None
    assert "train.early_stopping.metric auc is for class labels; train.task: regression selects on rmse" in str(
        auc.value
    )
    assert "train.early_stopping.metric rmse needs train.task: regression" in str(rmse.value)
    assert "train.loss huber needs train.task: regression" in str(rmse.value)


def test_huber_regression_trains_in_one_process(tmp_path, shards_reg):
    """train.loss huber: the centralized reference trains and beats predicting the mean (R^2 > 0)."""
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_reg), leader_train={"task": "regression", "loss": "huber"})
    # Execute
    m = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert
    assert m["test_r2"] > 0.2 and m["history"][-1]["valid"]["rmse"] > 0
    assert json.loads((tmp_path / "central" / "metrics.json").read_text())["test_mae"] == m["test_mae"]
