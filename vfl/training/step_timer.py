"""Where a training step's time goes: named parts timed with perf_counter, summed per process, with the residual.

One StepTimer per thread (TIMER: the leader and a follower may train in one process, as vfl_api's
simulate does, each in its own thread). Parts nest: a part's time excludes the parts timed inside it, so the
parts of a step add up to the step's wall time less the untimed Python between them (the residual).
On CUDA, kernels run asynchronously: set `sync` (torch.cuda.synchronize) so a part ends when its kernels do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# the parts, in the order the bench prints them
PARTS = ("data", "bottom_forward", "wire_send", "wire_wait", "top", "backward", "dense_optimizer", "sparse_update")


class StepTimer:
    """Seconds per named part inside training steps, the steps' total wall time, and evaluation beside them."""

    def __init__(self) -> None:
        self.reset()
        self.sync: Callable[[], None] | None = None

    def reset(self) -> None:
        self.parts: dict[str, float] = {}
        self.steps = 0
        self.step_seconds = 0.0
        self.evaluation_seconds = 0.0
        self._stack: list[list[float]] = []  # [start, seconds of the parts inside]

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time the block as `name`, less the parts nested in it."""
        frame = [time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            elapsed = time.perf_counter() - frame[0]
            self._stack.pop()
            self.parts[name] = self.parts.get(name, 0.0) + elapsed - frame[1]
            if self._stack:
                self._stack[-1][1] += elapsed

    def watch(self, device) -> None:
        """Parts end when their kernels do on CUDA (a synchronize after each part); nothing to wait for on a CPU."""
        import torch

        device = torch.device(device)
        self.sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None

    def add_step(self, seconds: float) -> None:
        """One training step of `seconds` wall time ended (its parts were timed inside it)."""
        self.steps += 1
        self.step_seconds += seconds

    @contextmanager
    def step(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add_step(time.perf_counter() - t0)

    def add_evaluation(self, seconds: float) -> None:
        self.evaluation_seconds += seconds

    def report(self) -> dict:
        """{steps, step_seconds, parts: {name: seconds}, parts_seconds, residual_seconds, residual_fraction, ...}."""
        names = [p for p in PARTS if p in self.parts] + sorted(p for p in self.parts if p not in PARTS)
        parts = {p: round(self.parts[p], 6) for p in names}
        total = sum(self.parts.values())
        residual = self.step_seconds - total
        return {
            "steps": self.steps,
            "step_seconds": round(self.step_seconds, 6),
            "parts": parts,
            "parts_seconds": round(total, 6),
            "residual_seconds": round(residual, 6),
            "residual_fraction": residual / self.step_seconds if self.step_seconds > 0 else 0.0,
            "evaluation_seconds": round(self.evaluation_seconds, 6),
        }


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.timer = StepTimer()


class ThreadStepTimer:
    """The calling thread's StepTimer: every attribute is read from (and written to) that thread's timer."""

    def __init__(self) -> None:
        object.__setattr__(self, "_local", _PerThread())

    def __getattr__(self, name: str):
        return getattr(self._local.timer, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._local.timer, name, value)


TIMER = ThreadStepTimer()
