"""Model selection for a regression under label DP: the validation MSE debiased by the mechanism's noise variance is
kept unclamped, so at small eps, where it is <= 0 at every step, the steps still rank as the noisy MSE ranks them
(the two differ by a constant) and a run whose later steps are better selects its last step; a debiased MSE <= 0 is
reported as not estimable, with its interval, never as an RMSE of 0.

The bikeshare-like scenario: labels in [0, 700] (sd ~131), discrete Laplace at eps 1 (noise variance ~980,000,
against true MSEs of 2,500-16,900), 20,000 validation rows, seed 3: there the debiased MSE is <= 0 at every step
(checked: it is the issue's case). Step k's and the last step's noisy MSEs differ by
mean((a_k^2 - a_K^2) z^2 - 2 (a_k - a_K) z n); for adjacent steps (RMSE 70 against 50) its mean is 2,400 and its
standard error 281, so the last step is the best by z >= 8.5 (normal approximation): under 1e-16 that another seed
selects another step. The interval test bounds its miss by 5.5 standard errors (< 4e-8)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.label.noisy_metrics import noisy_regression_metrics
from privacy.label.regression_mechanisms import laplace_label, laplace_noise_variance
from tests.support.party_processes import party_configs, run_centralized
from tests.support.regression_shards import regression_shards
from vfl.config.schema import TrainConfig
from vfl.data.task import Task
from vfl.obs.metrics import regression_valid_text
from vfl.training.loop import TrainingLoop
from vfl.training.selection import selection_value

LO, HI, EPS = 0.0, 700.0, 1.0
STEP_RMSE = (130.0, 110.0, 90.0, 70.0, 50.0)  # the true validation RMSE of each step: later steps are better


def _bikeshare_like(n: int = 20_000, seed: int = 3):
    """True labels, a fixed error direction z per row, and the labels under discrete Laplace at eps 1."""
    rng = np.random.default_rng(seed)
    y = np.clip(rng.gamma(2.0, 95.0, n), LO, HI)
    z = rng.normal(size=n)
    noisy = laplace_label(y, LO, HI, EPS, *rng.random((3, n)))
    return y, z, noisy


def _run(metric: str, noisy: np.ndarray, predictions: list[np.ndarray]):
    """A TrainingLoop under regression label DP as the leader builds it, one step and one evaluation per epoch,
    whose evaluation at global step k returns predictions[k - 1]; its log lines and the restored step."""
    lines, restored = [], []
    train = TrainConfig(
        task="regression", epochs=len(predictions), batch_size=4, early_stopping={"metric": metric, "patience": 10}
    )
    loop = TrainingLoop(train, 4, np.zeros(8), lines.append, noisy, EPS, Task("regression"))
    loop.valid_noise_var = laplace_noise_variance(LO, HI, EPS)
    evaluate = lambda split: predictions[loop.global_step - 1] if split == "valid" else np.zeros(8)
    loop.run(lambda epoch, i, rows: 1.0, evaluate, snapshot=lambda step: 0, restore=restored.append)
    return loop, lines, restored


@pytest.mark.parametrize("metric", ["rmse", "r2"])
def test_a_run_whose_later_steps_are_better_selects_its_last_step_under_laplace_eps_1(metric):
    # Prepare: the case, a debiased validation MSE <= 0 at every step
    y, z, noisy = _bikeshare_like()
    predictions = [y + a * z for a in STEP_RMSE]
    variance = laplace_noise_variance(LO, HI, EPS)
    assert all(noisy_regression_metrics(noisy, p, variance)["mse"] <= 0 for p in predictions)
    # Execute
    loop, lines, restored = _run(metric, noisy, predictions)
    # Assert: the last step is selected and kept (nothing restored); no evaluation printed an RMSE of 0
    assert loop.selection.best_step == len(STEP_RMSE) and restored == [] and not loop.final["restored"]
    evaluations = [line for line in lines if "evaluation at global_step" in line]
    assert len(evaluations) == len(STEP_RMSE)
    assert all("valid_rmse: not estimable (debiased MSE -" in line for line in evaluations)
    assert all("valid_r2: not estimable" in line and "0.000000" not in line.split("test_")[0] for line in evaluations)
    assert "rank steps by the unclamped debiased MSE" in loop.summary()["selection"]["labels"]


def test_an_earlier_best_step_is_restored_and_named_by_its_debiased_mse():
    # Prepare: the same labels, the best step in the middle
    y, z, noisy = _bikeshare_like()
    predictions = [y + a * z for a in (130.0, 50.0, 90.0, 110.0)]
    # Execute
    loop, lines, restored = _run("rmse", noisy, predictions)
    # Assert
    assert loop.selection.best_step == 2 and restored == [2]
    mse = loop.history[1]["valid"]["mse"]
    assert any(f"restored the best step 2 (validation rmse ranked by the debiased MSE {mse:.6g})" in s for s in lines)


def test_rmse_and_r2_rank_steps_as_the_noisy_mse_does_wherever_the_debiased_mse_lies():
    # Prepare: 40 prediction sets of spread from 0 to 390 on the same noisy labels (debiased MSE from < 0 to > 0)
    y, z, noisy = _bikeshare_like(n=2_000)
    variance = laplace_noise_variance(LO, HI, EPS)
    rng = np.random.default_rng(7)
    spreads = range(0, 400, 10)
    evaluations = [noisy_regression_metrics(noisy, y + a * rng.normal(size=y.size), variance) for a in spreads]
    # Execute
    rmse = [selection_value("rmse", v)[0] for v in evaluations]
    r2 = [selection_value("r2", v)[0] for v in evaluations]
    # Assert: one order for all three, both signs of the debiased MSE present, and the RMSE itself where estimable
    noisy_mse = [v["mse_noisy"] for v in evaluations]
    assert min(v["mse"] for v in evaluations) < 0 < max(v["mse"] for v in evaluations)
    assert np.array_equal(np.argsort(noisy_mse), np.argsort(rmse))
    assert np.array_equal(np.argsort(noisy_mse), np.argsort(r2)[::-1])
    for v, value in zip(evaluations, rmse):
        assert value == pytest.approx(v["rmse"]) if v["mse"] > 0 else value < 0 and math.isnan(v["rmse"])


def test_a_debiased_mse_at_or_below_zero_is_not_estimable_and_its_interval_still_holds_the_truth():
    # Prepare: the case (step RMSE 90)
    y, z, noisy = _bikeshare_like()
    prediction = y + 90.0 * z
    true_mse = float(np.mean((prediction - y) ** 2))
    # Execute
    m = noisy_regression_metrics(noisy, prediction, laplace_noise_variance(LO, HI, EPS))
    text = regression_valid_text(m)
    # Assert: no value where there is none; the MSE interval (5.5 / 1.96 of its half width) holds the true MSE and
    # the RMSE interval is its square root, from 0
    assert m["mse"] <= 0 and math.isnan(m["rmse"]) and math.isnan(m["r2"]) and m["debiased"]
    lo, hi = m["mse_ci95"]
    assert abs(m["mse"] - true_mse) < 5.5 / 1.96 * (hi - lo) / 2
    assert m["rmse_ci95"] == [0.0, math.sqrt(hi)]
    assert text.startswith(f"valid_rmse: not estimable (debiased MSE {m['mse']:.6g} <= 0, 95% interval [")
    assert f"RMSE at most {math.sqrt(hi):.6g}; debiased; noisy {m['rmse_noisy']:.6f})" in text
    assert "valid_r2: not estimable" in text and "0.000000" not in text


def test_a_positive_debiased_mse_is_reported_with_its_interval():
    # Prepare: eps 8 on the same labels: the noise variance (~15,300) is below the noisy MSE
    y, z, _ = _bikeshare_like()
    rng = np.random.default_rng(11)
    noisy = laplace_label(y, LO, HI, 8.0, *rng.random((3, y.size)))
    prediction = y + 90.0 * z
    # Execute
    m = noisy_regression_metrics(noisy, prediction, laplace_noise_variance(LO, HI, 8.0))
    # Assert
    lo, hi = m["mse_ci95"]
    assert m["mse"] > 0 and m["rmse"] == math.sqrt(m["mse"]) and m["rmse_ci95"] == [math.sqrt(lo), math.sqrt(hi)]
    assert regression_valid_text(m).startswith(f"valid_rmse: {m['rmse']:.6f} (95% interval [")


def test_a_biased_mechanism_subtracts_nothing_and_always_reports_its_noisy_rmse():
    # Prepare: noise_variance None, as RR-on-Bins gives the loop
    y, z, noisy = _bikeshare_like(n=2_000)
    # Execute
    m = noisy_regression_metrics(noisy, y + 50.0 * z, None)
    # Assert
    assert m["mse"] == m["mse_noisy"] > 0 and m["rmse"] == m["rmse_noisy"] and not m["debiased"]
    assert selection_value("rmse", m)[0] == pytest.approx(m["rmse"])
    assert "on the noisy labels" in regression_valid_text(m)


def test_without_label_dp_selection_compares_the_reported_metric():
    # Prepare: the plain metrics (no mse key) and a class metric
    plain = {"rmse": 3.0, "rmse_ci95": [2.0, 4.0], "mae": 2.0, "r2": 0.5}
    # Execute / Assert
    assert selection_value("rmse", plain) == (3.0, 1.0)
    assert selection_value("r2", plain) == (0.5, 0.0)
    assert selection_value("auc", {"auc": 0.7, "auc_ci95": [0.6, 0.8]}) == pytest.approx((0.7, 0.1))


def test_a_real_regression_run_under_laplace_eps_1_selects_by_the_debiased_mse_and_never_prints_an_rmse_of_0(
    tmp_path, shards_small
):
    """The centralized reference (one process, the leader's code path for labels, selection and logs) on a small
    regression shard under discrete Laplace at eps 1: noise variance ~3,200 against label variance ~25."""
    # Prepare
    shards = regression_shards(shards_small, tmp_path / "shards")
    label_dp = {"eps": 1.0, "mechanism": "laplace", "clip": [0.0, 40.0], "store_dir": str(tmp_path / "store")}
    cfgs = party_configs(
        str(tmp_path),
        str(shards),
        train={"epochs": 2, "seed": 0},
        leader_train={"task": "regression", "early_stopping": {"patience": 50}, "eval_every_steps": 3},
        privacy={"label_dp": label_dp},
    )
    # Execute
    metrics = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the best step is the one with the least debiased MSE, whatever its sign; where it is <= 0 the RMSE is
    # not estimable (NaN in metrics.json, said so in the log), never 0
    valid = [(h["step"], h["valid"]) for h in metrics["history"]]
    assert len(valid) > 3 and all(v["debiased"] for _, v in valid)
    assert metrics["selection"]["best_step"] == min(valid, key=lambda sv: sv[1]["mse"])[0]
    assert all(math.isnan(v["rmse"]) == (v["mse"] <= 0) for _, v in valid)
    log = (tmp_path / "central" / "centralized.log").read_text()
    assert "valid_rmse: 0.000000" not in log and log.count("valid_rmse: ") == len(valid)
