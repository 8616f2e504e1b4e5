"""Best-step snapshots: one in-memory copy of a model's and optimizer's state, for best-model restore."""

from __future__ import annotations

import copy

import torch


class Snapshot:
    """A deep copy of a model's and optimizer's state at one global step (the best one so far)."""

    def __init__(self, step: int, state: dict):
        self.step = step
        self.state = state

    @classmethod
    def of(cls, step: int, model: torch.nn.Module, optimizer) -> Snapshot:
        return cls(step, copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict()}))

    def load_into(self, model: torch.nn.Module, optimizer) -> None:
        model.load_state_dict(self.state["model"])
        optimizer.load_state_dict(copy.deepcopy(self.state["optimizer"]))

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
    """Mixin for a holder of `model`, `optimizer`, `name` and `best`: checkpoint state that carries the
    best-step snapshot, and snapshot/restore of that step (one extra copy at most)."""

    model: torch.nn.Module
    optimizer: object
    name: str
    best: Snapshot | None = None

    def state(self) -> dict:
        """Model and optimizer state, plus the best-step snapshot when one is held (for resume)."""
        out = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.best is not None:
            out["best"] = {"step": self.best.step, "state": self.best.state}
        return out

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        best = state.get("best")
        self.best = Snapshot(int(best["step"]), best["state"]) if best else None

    def snapshot(self, step: int) -> int:
        """Keep a copy of the weights and optimizer state of this step (replacing the last); its bytes."""
        self.best = Snapshot.of(step, self.model, self.optimizer)
        return self.best.nbytes

    def restore(self, step: int) -> None:
        """Go back to the snapshot of `step`; ValueError if another step's snapshot is held."""
        if self.best is None or self.best.step != step:
            held = None if self.best is None else self.best.step
            raise ValueError(f"{self.name}: asked to restore step {step}, but the snapshot held is of step {held}")
        self.best.load_into(self.model, self.optimizer)
