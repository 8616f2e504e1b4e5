"""Best-step snapshots: one in-memory copy of a model's and optimizer's state, for best-model restore."""

from __future__ import annotations

import copy

import torch

from vfl.training.weight_average import WeightAverage, weight_average


class Snapshot:
    """A deep copy of a model's and optimizer's state at one global step (the best one so far)."""

    def __init__(self, step: int, state: dict):
        self.step = step
        self.state = state

    @property
    def nbytes(self) -> int:
        total = 0

        def walk(x):
            nonlocal total
            if isinstance(x, torch.Tensor):
                total += x.numel() * x.element_size()
            elif isinstance(x, dict):
                for v in x.values():
                    walk(v)
            elif isinstance(x, (list, tuple)):
                for v in x:
                    walk(v)

        walk(self.state)
        return total


class SnapshotTrainable:
    """Mixin for a holder of `model`, `optimizer`, `name`, `best` and `average`: checkpoint state that carries the
    best-step snapshot, and snapshot/restore of that step (one extra copy at most).

    With a weight average (train.ema_decay, vfl/training/weight_average.py) the state's "model" entry holds the
    averaged weights, the ones evaluation, selection and prediction use, and its optimizer entry an "average" block
    with the raw weights training goes on from (load_state(state, resume=True) puts them back)."""

    model: torch.nn.Module
    optimizer: object
    name: str
    best: Snapshot | None = None
    average: WeightAverage | None = None

    def keep_average(self, decay: float, precision: str) -> None:
        """Average the weights after every optimizer step from now (train.ema_decay; 0 keeps none)."""
        self.average = weight_average(self.model, decay, precision)
        self.optimizer.average = self.average

    def eval_model(self) -> torch.nn.Module:
        """The module evaluation runs: the averaged weights when an average is kept, else the model."""
        return self.model if self.average is None else self.average.sync()

    def weights(self) -> dict:
        """{"model", "optimizer"} state (references, not copies): the averaged weights and the raw ones in the
        optimizer's "average" block when an average is kept."""
        if self.average is None:
            return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        average = self.average.state_dict()  # syncs the averaged rows first
        optimizer = {**self.optimizer.state_dict(), "average": average}
        return {"model": self.average.averaged.state_dict(), "optimizer": optimizer}

    def load_weights(self, weights: dict, resume: bool) -> None:
        """Load {"model", "optimizer"} state; resume: training goes on from it (the raw weights where it holds an
        average), else the model keeps the "model" entry and is what evaluates (prediction: no average is kept)."""
        self.model.load_state_dict(weights["model"])
        if resume:  # prediction never steps: the optimizer's state (and its layout, train.linear_optimizer) is moot
            self.optimizer.load_state_dict(weights["optimizer"])  # an "average" block is not the optimizer's
        if self.average is not None and resume:
            self.average.load(weights["optimizer"].get("average"))
        elif self.average is not None:
            self.keep_average(0.0, "fp32")

    def state(self) -> dict:
        """Model and optimizer state, plus the best-step snapshot when one is held (for resume)."""
        out = self.weights()
        if self.best is not None:
            out["best"] = {"step": self.best.step, "state": self.best.state}
        return out

    def load_state(self, state: dict, resume: bool = False) -> None:
        """Load a checkpoint's state: for prediction (the model takes the weights evaluation used), or with
        resume=True to continue training exactly (train.resume_from)."""
        self.load_weights(state, resume)
        best = state.get("best")
        self.best = Snapshot(int(best["step"]), best["state"]) if best else None

    def snapshot(self, step: int) -> int:
        """Keep a copy of the weights and optimizer state of this step (replacing the last); its bytes."""
        self.best = Snapshot(step, copy.deepcopy(self.weights()))
        return self.best.nbytes

    def restore(self, step: int) -> None:
        """Go back to the snapshot of `step`; ValueError if another step's snapshot is held."""
        if self.best is None or self.best.step != step:
            held = None if self.best is None else self.best.step
            raise ValueError(f"{self.name}: asked to restore step {step}, but the snapshot held is of step {held}")
        self.load_weights({**self.best.state, "optimizer": copy.deepcopy(self.best.state["optimizer"])}, resume=True)
