"""The epoch/step schedule shared by split training and the centralized reference.

Order, logs, evaluation cadence, early stopping on the validation split, best-step restore, history.

Selection reads only the validation labels the loop is given (randomized under label DP) through
`privacy.label.noisy_metrics`; the test split is evaluated for the record and never chooses anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privacy.label.noisy_metrics import (
    noisy_multiclass_validation_metrics,
    noisy_regression_metrics,
    noisy_validation_metrics,
)
from vfl.config.schema import TrainConfig
from vfl.data.shards import batch_order, steps_per_epoch
from vfl.data.task import Task
from vfl.obs.metrics import RunLog, loss_line, metrics_text, regression_metrics, regression_valid_text, test_metrics
from vfl.obs.progress import bar
from vfl.training.selection import EarlyStopping, selection_value
from vfl.training.step_timer import TIMER

# split name ("valid" | "test") -> click (n,) or class (n, K) probabilities, or real-valued predictions (n,)
Evaluate = Callable[[str], np.ndarray]
TEST_KEYS = ("test_accuracy", "test_auc", "test_logloss", "test_rmse", "test_mae", "test_r2")


@dataclass
class _Window:
    """The steps since the last evaluation: their summed loss, count, samples and seconds."""

    loss: float = 0.0
    steps: int = 0
    samples: int = 0
    seconds: float = 0.0

    def add(self, loss: float, samples: int, seconds: float) -> None:
        self.loss += loss
        self.steps += 1
        self.samples += samples
        self.seconds += seconds


class TrainingLoop:
    """Calls step(epoch, step, rows) for every batch and evaluates at the configured cadence."""

    def __init__(
        self,
        train: TrainConfig,
        n_train: int,
        test_labels: np.ndarray,
        log: RunLog,
        valid_labels: np.ndarray | None = None,
        valid_eps: float | None = None,
        task: Task | None = None,
    ):
        """valid_labels: what selection may read (the randomized ones under label DP, whose eps is valid_eps);
        task: binary (the default: click probabilities (n,)), multiclass K (class probabilities (n, K)) or
        regression (predictions (n,), scored by RMSE, MAE and R^2; on randomized labels under label DP)."""
        self.task = task or Task("binary")
        self.train = train
        self.n_train = n_train
        self.test_labels = np.asarray(test_labels, dtype=np.float64)
        valid_dtype = np.float64 if self.task.is_regression else np.int64
        self.valid_labels = None if valid_labels is None else np.asarray(valid_labels, dtype=valid_dtype)
        self.valid_eps = valid_eps
        # regression under label DP: the unbiased mechanism's noise variance, subtracted from the noisy MSE (None:
        # RR-on-Bins, biased, selects on the noisy RMSE as it is); set by the leader after the release is drawn
        self.valid_noise_var: float | None = None
        self.log = log
        self.step_losses: list[float] = []
        self.history: list[dict] = []
        self.train_seconds = 0.0
        self.global_step = 0
        self.samples = 0
        es = train.early_stopping
        self.selection = EarlyStopping(es.metric, es.patience, es.min_delta, es.rule) if es is not None else None
        self.snapshot_bytes = 0
        self.stopped_early = False
        self.final: dict = {}
        self.curves = None  # a vfl.obs.curves.RunCurves: metrics.csv, TensorBoard, curves.png
        self.agree = None  # N ranks: (selection, is_best) -> rank 0's is_best, its selection state adopted
        # --resume auto without train.checkpoint_every: a checkpoint after the first step ending this many seconds
        # after the last one (under train.staleness only where the schedule drains anyway: evaluations, epoch ends)
        self.checkpoint_seconds: float | None = None
        self._last_checkpoint_at = 0.0
        if self.selection is not None and (self.valid_labels is None or self.valid_labels.size == 0):
            raise ValueError(
                "train.early_stopping needs a validation split with rows (prepare with --valid-fraction > 0)"
            )

    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.n_train, self.train.batch_size)

    def _eval_due(self, i: int, spe: int, last: bool) -> bool:
        every = self.train.eval_every_steps
        if last:
            return True
        if every:
            return self.global_step % every == 0
        return i + 1 == spe

    def run(
        self,
        step: Callable[[int, int, np.ndarray], float],
        evaluate: Evaluate,
        checkpoint: Callable[[int, int], None] | None = None,
        start_step: int = 0,
        snapshot: Callable[[int], int] | None = None,
        restore: Callable[[int], None] | None = None,
    ) -> None:
        """Train from global step `start_step`; snapshot(step) keeps the best model, restore(step) brings it back."""
        tr = self.train
        spe = self.steps_per_epoch()
        total = tr.epochs * spe
        if not 0 <= start_step < total:
            raise ValueError(
                f"resuming at global step {start_step}, but the run has {tr.epochs} epochs x {spe} steps; "
                f"raise train.epochs to train further"
            )
        first_epoch, first_i = divmod(start_step, spe)
        self.global_step = start_step
        self._last_checkpoint_at = time.monotonic()
        window = _Window()
        if self.valid_eps is not None:
            biased = self.task.is_regression and self.valid_noise_var is None  # RR-on-Bins: no debiased RMSE
            self.log(
                f"label DP: the training loss below is computed on the randomized (noisy) training labels "
                f"(eps={self.valid_eps}); validation metrics are "
                + ("read from" if biased else "debiased from")
                + " randomized validation labels"
            )
        for epoch in range(first_epoch, tr.epochs):
            order = batch_order(self.n_train, tr.batch_size, tr.seed, epoch)
            skip = first_i if epoch == first_epoch else 0
            progress = bar(total=len(order), desc=f"epoch {epoch + 1}/{tr.epochs}", unit="step", initial=skip)
            for i, rows in enumerate(order):
                if i < skip:
                    continue
                t0 = time.perf_counter()
                value = step(epoch, i, rows)
                seconds = time.perf_counter() - t0
                self._record_step(epoch, i, len(order), value, seconds, progress)
                window.add(value, rows.size, seconds)
                if checkpoint and self._checkpoint_due(i, spe, total):
                    checkpoint(epoch, self.global_step)
                    self._last_checkpoint_at = time.monotonic()
                if self._eval_due(i, spe, self.global_step == total):
                    self._evaluate_window(epoch, evaluate, snapshot, window)
                    window = _Window()
                    if self._stops_early(total):
                        break
            progress.close()
            if self.stopped_early:
                break
        self._finish(evaluate, restore)

    def _checkpoint_due(self, i: int, spe: int, total: int) -> bool:
        """train.checkpoint_every steps; or, with checkpoint_seconds, the first step that ends that long after the last
        checkpoint (not the run's last step: its final checkpoint follows), where the schedule is drained."""
        every = self.train.checkpoint_every
        if every:
            return self.global_step % every == 0
        if self.checkpoint_seconds is None or self.global_step >= total:
            return False
        drained = not self.train.staleness or i + 1 == spe or self._eval_due(i, spe, False)
        return drained and time.monotonic() - self._last_checkpoint_at >= self.checkpoint_seconds

    def _record_step(self, epoch: int, i: int, n_steps: int, value: float, seconds: float, progress) -> None:
        """One step's loss into the history, the timer, the progress bar, the curves and the log."""
        TIMER.add_step(seconds)
        if not np.isfinite(value):
            raise FloatingPointError(f"training loss became {value} at epoch {epoch} step {i + 1}; lower train.lr")
        self.step_losses.append(value)
        self.global_step += 1
        progress.update(1)
        progress.set_postfix_str(
            f"loss {value:.4f}" + (" (noisy labels)" if self.valid_eps is not None else ""), refresh=False
        )
        if self.curves is not None:
            self.curves.step(epoch, self.global_step, value)
        if (i + 1) % self.train.log_every == 0 or i + 1 == n_steps:
            self.log(loss_line(epoch, i + 1, n_steps, value))

    def _evaluate_window(self, epoch: int, evaluate: Evaluate, snapshot, window: _Window) -> None:
        """Evaluate now; the steps since the last evaluation count towards the training time and samples."""
        self.train_seconds += window.seconds
        self.samples += window.samples
        t_eval = time.perf_counter()
        self._evaluate(epoch, evaluate, snapshot, window.loss / max(window.steps, 1), window.seconds, window.samples)
        TIMER.add_evaluation(time.perf_counter() - t_eval)

    def _stops_early(self, total: int) -> bool:
        """Whether early stopping ends the run here (logged once)."""
        if self.selection is None or not self.selection.should_stop:
            return False
        self.stopped_early = self.global_step < total
        self.log(
            f"early stopping at global step {self.global_step}: no gain in validation "
            f"{self.selection.metric} for {self.selection.patience} evaluations; best step "
            f"{self.selection.best_step}"
        )
        return True

    def _evaluate(
        self, epoch: int, evaluate: Evaluate, snapshot, train_loss: float, seconds: float, samples: int
    ) -> None:
        entry = {
            "epoch": epoch,
            "step": self.global_step,
            "train_loss": train_loss,
            "train_seconds": round(seconds, 3),
            "samples_per_second": samples / max(seconds, 1e-9),
        }
        if self.valid_labels is not None and self.valid_labels.size:
            if self.task.is_regression and self.valid_eps is not None:
                v = noisy_regression_metrics(self.valid_labels, evaluate("valid"), self.valid_noise_var)
            elif self.task.is_regression:
                v = regression_metrics(self.valid_labels, evaluate("valid"))
            elif self.task.kind == "multiclass":
                v = noisy_multiclass_validation_metrics(
                    self.valid_labels, evaluate("valid"), self.valid_eps, self.task.num_classes
                )
            else:
                v = noisy_validation_metrics(self.valid_labels, evaluate("valid"), self.valid_eps)
            entry["valid"] = v
            best = False
            if self.selection is not None:
                value, half_width = selection_value(self.selection.metric, v)
                best = self.selection.update(value, self.global_step, epoch, half_width)
            if self.selection is not None and self.agree is not None:
                best = self.agree(self.selection, best)
            if best:
                if snapshot is not None:
                    self.snapshot_bytes = snapshot(self.global_step)
        entry.update(test_metrics(self.test_labels, evaluate("test"), self.task.is_regression))
        self.history.append(entry)
        if self.curves is not None:
            self.curves.evaluation(entry)
        valid = entry.get("valid")
        self.log(
            f"epoch {epoch} evaluation at global_step={self.global_step}: "
            + (
                f"valid_accuracy: {valid['accuracy']:.6f} (noisy {valid['accuracy_noisy']:.6f}) "
                if valid and "accuracy" in valid
                else ""
            )
            + (
                f"valid_auc: {valid['auc']:.6f} (noisy {valid['auc_noisy']:.6f}) valid_logloss: {valid['logloss']:.6f} "
                if valid and "auc" in valid
                else ""
            )
            + (regression_valid_text(valid) + " " if valid and "rmse" in valid else "")
            + metrics_text(entry)
        )

    def _finish(self, evaluate: Evaluate, restore) -> None:
        """Restore the best step (when selection is on and it is not the last one) and score the final model."""
        sel = self.selection
        restored = sel is not None and sel.best_step is not None and sel.best_step != self.global_step
        if restored:
            if restore is None:
                raise RuntimeError("early stopping chose an earlier step but this loop cannot restore models")
            restore(sel.best_step)
            scores = test_metrics(self.test_labels, evaluate("test"), self.task.is_regression)
            best = next((h.get("valid") for h in self.history if h["step"] == sel.best_step), None) or {}
            mse = f"{'debiased' if best.get('debiased') else 'noisy'} MSE {best.get('mse', 0.0):.6g}"
            chosen = (  # a regression's debiased MSE can be <= 0: its RMSE is then not a value (noisy_metrics)
                f"validation {sel.metric} ranked by the {mse}"
                if "mse" in best and sel.metric in ("rmse", "r2")
                else f"validation {sel.metric} {sel.best_value:.6f}"
            )
            self.log(f"restored the best step {sel.best_step} ({chosen}): " + metrics_text(scores))
        else:
            scores = {k: v for k, v in self.history[-1].items() if k in TEST_KEYS}
        self.final = {**scores, "restored": restored, "model_step": sel.best_step if restored else self.global_step}

    def summary(self) -> dict:
        """The metrics.json fields every mode shares (test metrics are the final, possibly restored, model's)."""
        sel = self.selection
        best = next((h for h in self.history if sel is not None and h["step"] == sel.best_step), None)
        return {
            **{k: self.final[k] for k in TEST_KEYS if k in self.final},
            "model_step": self.final["model_step"],
            "history": self.history,
            "selection": None
            if sel is None
            else {
                "metric": sel.metric,
                "patience": sel.patience,
                "min_delta": sel.min_delta,
                "best_step": sel.best_step,
                "best_epoch": sel.best_epoch,
                "best_value": sel.best_value,
                "valid_at_best": best.get("valid") if best else None,
                "stopped_early": self.stopped_early,
                "restored": self.final["restored"],
                "snapshot_bytes_this_process": self.snapshot_bytes,
                "labels": self._selection_labels(),
            },
            "samples_per_second": self.samples / max(self.train_seconds, 1e-9),
            "train_seconds": self.train_seconds,
            "steps": self.global_step,
            "step_losses": self.step_losses,
        }

    def _selection_labels(self) -> str:
        """What the selection read, for metrics.json."""
        if self.valid_eps is None:
            return "validation labels"
        if not self.task.is_regression:
            return "randomized validation labels (label DP), debiased with class priors estimated from them"
        if self.valid_noise_var is None:
            return "randomized validation labels (label DP), as they are (a biased mechanism: nothing subtracted)"
        return (
            "randomized validation labels (label DP): rmse and r2 rank steps by the unclamped debiased MSE, the noisy "
            "MSE minus the mechanism's noise variance; mae is the noisy one"
        )

    def state(self) -> dict:
        """What a checkpoint needs to continue selection exactly after a resume."""
        return {
            "selection": None if self.selection is None else self.selection.state(),
            "history": self.history,
            "snapshot_bytes": self.snapshot_bytes,
            "step_losses": self.step_losses,
        }

    def load_state(self, state: dict) -> None:
        if self.selection is not None and state.get("selection"):
            self.selection.load_state(state["selection"])
        self.history = list(state.get("history", []))
        self.step_losses = [float(x) for x in state.get("step_losses", [])]  # a resumed run keeps the whole curve
        self.snapshot_bytes = int(state.get("snapshot_bytes", 0))
