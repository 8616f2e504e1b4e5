"""The epoch/step schedule shared by split training and the centralized reference: order, logs, history."""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from vfl.config import TrainConfig
from vfl.data.shards import batch_order, steps_per_epoch
from vfl.metrics import RunLog, auc, logloss, loss_line


class TrainingLoop:
    """Calls step(epoch, step, rows) for every batch and evaluate() after every epoch."""

    def __init__(self, train: TrainConfig, n_train: int, test_labels: np.ndarray, log: RunLog):
        self.train = train
        self.n_train = n_train
        self.test_labels = np.asarray(test_labels, dtype=np.float64)
        self.log = log
        self.step_losses: list[float] = []
        self.history: list[dict] = []
        self.train_seconds = 0.0
        self.global_step = 0
        self.samples = 0

    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.n_train, self.train.batch_size)

    def run(self, step: Callable[[int, int, np.ndarray], float], evaluate: Callable[[], np.ndarray],
            checkpoint: Callable[[int, int], None] | None = None, start_step: int = 0) -> None:
        """Train from global step `start_step` (0, or the step of the checkpoint being resumed)."""
        tr = self.train
        spe = self.steps_per_epoch()
        if not 0 <= start_step < tr.epochs * spe:
            raise ValueError(f"resuming at global step {start_step}, but the run has {tr.epochs} epochs x {spe} steps; "
                             f"raise train.epochs to train further")
        first_epoch, first_i = divmod(start_step, spe)
        self.global_step = start_step
        for epoch in range(first_epoch, tr.epochs):
            order = batch_order(self.n_train, tr.batch_size, tr.seed, epoch)
            t0 = time.perf_counter()
            total, steps, samples = 0.0, 0, 0
            for i, rows in enumerate(order):
                if epoch == first_epoch and i < first_i:
                    continue
                value = step(epoch, i, rows)
                if not np.isfinite(value):
                    raise FloatingPointError(f"training loss became {value} at epoch {epoch} step {i + 1}; lower train.lr")
                self.step_losses.append(value)
                total += value
                steps += 1
                samples += rows.size
                self.global_step += 1
                if (i + 1) % tr.log_every == 0 or i + 1 == len(order):
                    self.log(loss_line(epoch, i + 1, len(order), value))
                if checkpoint and tr.checkpoint_every and self.global_step % tr.checkpoint_every == 0:
                    checkpoint(epoch, self.global_step)
            seconds = time.perf_counter() - t0
            self.train_seconds += seconds
            self.samples += samples
            probs = evaluate()
            test_auc, test_ll = auc(self.test_labels, probs), logloss(self.test_labels, probs)
            self.history.append({"epoch": epoch, "train_loss": total / steps, "test_auc": test_auc,
                                 "test_logloss": test_ll, "train_seconds": round(seconds, 3),
                                 "samples_per_second": samples / seconds})
            self.log(f"epoch {epoch} test_auc: {test_auc:.6f} test_logloss: {test_ll:.6f}")

    def summary(self) -> dict:
        """The metrics.json fields every mode shares."""
        last = self.history[-1]
        return {
            "test_auc": last["test_auc"],
            "test_logloss": last["test_logloss"],
            "history": self.history,
            "samples_per_second": self.samples / max(self.train_seconds, 1e-9),
            "train_seconds": self.train_seconds,
            "steps": self.global_step,
            "step_losses": self.step_losses,
        }
