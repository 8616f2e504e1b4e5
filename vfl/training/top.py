"""The leader's top model step, shared verbatim by split training and the centralized reference.

A regression top learns the standardized label (y - mean) / sd of the training labels (`regression_target`), so
one learning rate serves labels in any unit and the logged loss reads 1.0 for predicting the mean; its
predictions are mapped back to the label's units before any metric sees them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from vfl.config.model_sections import TopConfig
from vfl.config.schema import TrainConfig
from vfl.data.task import Task
from vfl.models.registry import build_top, check_model_spec, model_spec
from vfl.training.optim import ScheduledOptimizer, build_optimizer
from vfl.training.precision import autocast, keep_narrow_layers_fp32
from vfl.training.snapshot import Snapshot, SnapshotTrainable

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def bce_with_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The plain CTR loss."""
    return F.binary_cross_entropy_with_logits(logits, labels)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The plain K-class loss: softmax cross-entropy of (B, K) logits against class ids."""
    return F.cross_entropy(logits, labels.long())


REGRESSION_LOSSES: dict[str, LossFn] = {
    "mse": F.mse_loss,
    "huber": lambda z, y: F.huber_loss(z, y, delta=1.0),  # delta 1 = one standard deviation of the label
}


def regression_target(labels: np.ndarray) -> tuple[float, float]:
    """(mean, sd) of the training labels, the scale a regression top learns in (sd 1 for a constant label)."""
    y = np.asarray(labels, dtype=np.float64)
    mean = float(y.mean()) if y.size else 0.0
    sd = float(y.std()) if y.size else 0.0
    return mean, sd if sd > 0 else 1.0


class TopTrainer(SnapshotTrainable):
    """Concatenate the parties' cuts (leader first, then followers in config order), score, and learn."""

    def __init__(
        self,
        train: TrainConfig,
        top: TopConfig,
        in_dim: int | tuple[int, ...],
        device: torch.device,
        *,
        loss_fn: LossFn | None = None,
        total_steps: int = 1,
        task: Task | None = None,
        target: tuple[float, float] | None = None,
    ):
        """task binary (the default): one logit, BCE; multiclass K: K logits, softmax cross-entropy; regression:
        one value, train.loss (MSE or Huber) on the label standardized by target = (mean, sd) (regression_target
        of the training labels)."""
        self.task = task or Task("binary")
        self.target = (target or (0.0, 1.0)) if self.task.is_regression else None
        # in_dim: each party's cut width, leader first (the interaction top crosses them), or their sum
        self.model = build_top(top, in_dim, train.seed, self.task.outputs).to(device)
        self.model_spec = model_spec(top)  # kept in checkpoints: resume refuses another model
        in_dim = in_dim if isinstance(in_dim, int) else sum(in_dim)
        self.train_model = self.model  # with N ranks, the DistributedDataParallel wrapper of self.model
        self.optimizer = ScheduledOptimizer(build_optimizer(self.model, train), train, total_steps)
        self.best: Snapshot | None = None
        self.name = "top model"
        self.loss_fn = loss_fn or (
            REGRESSION_LOSSES[train.loss]
            if self.task.is_regression
            else cross_entropy
            if self.task.kind == "multiclass"
            else bce_with_logits
        )
        self.in_dim = in_dim
        self.device = device
        self.precision = train.precision
        keep_narrow_layers_fp32(self.model, self.precision)
        self.keep_average(train.ema_decay, self.precision)  # predict uses the averaged weights when on

    def loss(self, cuts: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        self.model.train()
        with autocast(self.precision, self.device):
            logits = self.train_model(torch.cat(cuts, dim=1))
        labels = labels.to(self.device)
        if self.target is not None:
            labels = (labels - self.target[0]) / self.target[1]
        return self.loss_fn(logits.float(), labels)

    def step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad()

    @torch.no_grad()
    def predict(self, cuts: list[torch.Tensor]) -> np.ndarray:
        """Click probabilities sigmoid(logit) (n,), class probabilities softmax(logits) (n, K), or predicted
        values in the label's units (n,), for evaluation."""
        model = self.eval_model().eval()
        with autocast(self.precision, self.device):
            logits = model(torch.cat(cuts, dim=1)).float()
        if self.target is not None:
            return (logits.double() * self.target[1] + self.target[0]).cpu().numpy()
        probs = torch.softmax(logits.double(), dim=1) if self.task.kind == "multiclass" else torch.sigmoid(logits)
        return probs.double().cpu().numpy()

    def state(self) -> dict:
        """The checkpoint state; a regression top also keeps the (mean, sd) its outputs are scaled by."""
        out = {**super().state(), "model_spec": self.model_spec}
        if self.target is not None:
            out["target"] = list(self.target)
        return out

    def load_state(self, state: dict, resume: bool = False) -> None:
        check_model_spec(state.get("model_spec"), self.model_spec, "top")
        super().load_state(state, resume)
