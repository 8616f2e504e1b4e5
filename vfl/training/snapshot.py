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
