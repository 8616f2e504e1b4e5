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
