"""Early stopping's interval rule: on a noisy validation metric only an evaluation significantly below the best (the
best beyond its 95% interval) counts against the patience, so noise does not stop a small run; the point rule and the
interval rule agree when the interval is narrow."""

from __future__ import annotations

import numpy as np

from privacy.label.noisy_metrics import noisy_multiclass_validation_metrics
from vfl.obs.metrics import regression_metrics
from vfl.training.selection import EarlyStopping

NOISY_PLATEAU = [0.80, 0.83, 0.81, 0.82, 0.80, 0.82, 0.81]  # a plateau with noise of +-0.02 (half width 0.03)


def test_the_point_rule_stops_on_noise_and_the_interval_rule_does_not():
    # Prepare
    point, interval = EarlyStopping("auc", 3), EarlyStopping("auc", 3, rule="interval")
    # Execute
    for step, value in enumerate(NOISY_PLATEAU):
        point.update(value, step, 0, half_width=0.03)
        interval.update(value, step, 0, half_width=0.03)
    # Assert: the best is the same; only the point rule has run out of patience
    assert point.best_step == interval.best_step == 1
    assert point.should_stop and not interval.should_stop and interval.evals_without_gain == 0


def test_the_interval_rule_stops_after_patience_significant_drops():
    # Prepare
    rule = EarlyStopping("auc", 2, rule="interval")
    # Execute: a best of 0.85, then two evaluations below 0.85 - 0.03
    for step, value in enumerate([0.80, 0.85, 0.84, 0.81, 0.80]):
        rule.update(value, step, 0, half_width=0.03)
    # Assert
    assert rule.best_step == 1 and rule.evals_without_gain == 2 and rule.should_stop


def test_lower_is_better_metrics_use_the_interval_the_other_way():
    # Prepare: rmse 10 is the best; 10.5 is within 1.0 of it, 12 is not
    rule = EarlyStopping("rmse", 1, rule="interval")
    # Execute
    rule.update(10.0, 0, 0, 1.0)
    rule.update(10.5, 1, 0, 1.0)
    within = rule.evals_without_gain
    rule.update(12.0, 2, 0, 1.0)
    # Assert
    assert within == 0 and rule.should_stop


def test_a_narrow_interval_makes_the_interval_rule_the_point_rule():
    # Prepare
    point, interval = EarlyStopping("auc", 3), EarlyStopping("auc", 3, rule="interval")
    # Execute: drops of 0.01 with a half width of 0.001
    for step, value in enumerate([0.80, 0.79, 0.78, 0.77]):
        point.update(value, step, 0, half_width=0.001)
        interval.update(value, step, 0, half_width=0.001)
    # Assert
    assert point.state() == interval.state() and interval.should_stop


def test_accuracy_and_rmse_report_their_95_percent_intervals():
    # Prepare: 400 rows, accuracy 0.75 on true labels; regression errors of known spread
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 400)
    probs = np.full((400, 4), 0.1)
    hit = rng.random(400) < 0.75
    probs[np.arange(400), np.where(hit, y, (y + 1) % 4)] = 0.7
    # Execute
    m = noisy_multiclass_validation_metrics(y, probs, None, 4)
    r = regression_metrics(np.zeros(400), rng.normal(0, 2, 400))
    # Assert: the binomial interval 1.96 sqrt(p (1 - p) / n) around the accuracy; an interval around the rmse
    half = 1.96 * np.sqrt(m["accuracy"] * (1 - m["accuracy"]) / 400)
    assert np.allclose(m["accuracy_ci95"], [m["accuracy"] - half, m["accuracy"] + half])
    assert r["rmse_ci95"][0] < r["rmse"] < r["rmse_ci95"][1] and r["rmse_ci95"][1] - r["rmse_ci95"][0] < 0.6
