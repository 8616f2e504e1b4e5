"""Early stopping and best-step selection on validation metrics computed from randomized labels.

The tracker sees only what `privacy.label.noisy_metrics.noisy_validation_metrics` returns: estimates built
from the randomized validation labels and public eps. Under label DP every decision it makes (the
best step, the stopping step, hence what the followers are told to restore) is post-processing of
the release. `min_delta` is in the units of the debiased metric, whose scale uses the class prior
estimated from the noisy labels, never the true one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vfl.data.task import HIGHER_IS_BETTER


def selection_value(metric: str, valid: dict) -> tuple[float, float]:
    """(value, half width of its 95% interval) that early stopping compares for `metric` on one evaluation's
    validation metrics.

    Regression metrics with an MSE (privacy/label/noisy_metrics.noisy_regression_metrics) rank by it, unclamped, in
    the metric's own units: rmse by its signed root, sign(mse) sqrt(|mse|), which is the debiased RMSE wherever
    that is estimable (mse > 0); r2 by 1 - mse / s with s the debiased label variance, or the noisy one where that
    is <= 0 (any positive s ranks alike). Both are increasing in mse (r2 decreasing), so the ranking is the MSE's.
    Every other metric (mae included: its noisy value) is compared as reported."""
    if metric in ("rmse", "r2") and "mse" in valid:
        mse, (lo, hi) = valid["mse"], valid["mse_ci95"]
        if metric == "rmse":
            return _signed_root(mse), (_signed_root(hi) - _signed_root(lo)) / 2
        s = valid["label_variance"] if valid["label_variance"] > 0 else valid["label_variance_noisy"]
        if not s > 0:  # constant labels: R^2 is undefined
            return math.nan, 0.0
        return 1.0 - mse / s, (hi - lo) / 2 / s
    return valid[metric], half_width(valid.get(f"{metric}_ci95"))


def _signed_root(x: float) -> float:
    return math.copysign(math.sqrt(abs(x)), x)


def half_width(interval) -> float:
    """Half the width of a metric's 95% interval [lo, hi] (0 when the metric reports none)."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return 0.0
    width = (float(interval[1]) - float(interval[0])) / 2
    return width if width == width else 0.0


@dataclass
class EarlyStopping:
    """Best value and step of the selection metric; stop after `patience` evaluations without a gain."""

    metric: str = "auc"
    patience: int = 3
    min_delta: float = 0.0
    rule: str = "point"  # point: any evaluation not better than the best counts; interval: only one below its CI
    best_value: float | None = None
    best_step: int | None = None
    best_epoch: int | None = None
    evals_without_gain: int = 0

    def __post_init__(self):
        if self.metric not in HIGHER_IS_BETTER:
            raise ValueError(f"early_stopping.metric must be one of {sorted(HIGHER_IS_BETTER)}, got {self.metric!r}")

    def update(self, value: float, step: int, epoch: int, half_width: float = 0.0) -> bool:
        """Record an evaluation; True when it is the new best (then the caller snapshots the model).

        half_width: the half width of the value's 95% interval (0 where the metric has none). Under the interval
        rule an evaluation counts against the patience only when the best lies beyond its interval (it is
        significantly worse); one within the noise of the best neither counts nor resets the count. So on a small
        (or randomized) validation split, whose metric moves by its noise from one evaluation to the next, the run
        is not stopped by noise, and on a large one the rule is the point rule (its interval is narrow)."""
        if value is None or math.isnan(value):
            self.evals_without_gain += 1
            return False
        sign = 1.0 if HIGHER_IS_BETTER[self.metric] else -1.0
        if self.best_value is None or sign * (value - self.best_value) > self.min_delta:
            self.best_value, self.best_step, self.best_epoch = value, step, epoch
            self.evals_without_gain = 0
            return True
        width = half_width if self.rule == "interval" and half_width == half_width else 0.0
        if self.rule == "point" or sign * (self.best_value - value) > width + self.min_delta:
            self.evals_without_gain += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.evals_without_gain >= self.patience

    def state(self) -> dict:
        return {
            "best_value": self.best_value,
            "best_step": self.best_step,
            "best_epoch": self.best_epoch,
            "evals_without_gain": self.evals_without_gain,
        }

    def load_state(self, state: dict) -> None:
        self.best_value = state.get("best_value")
        self.best_step = state.get("best_step")
        self.best_epoch = state.get("best_epoch")
        self.evals_without_gain = int(state.get("evals_without_gain", 0))
