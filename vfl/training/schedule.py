"""Learning-rate schedules: linear warmup, then constant, cosine or linear decay to zero.

Every party applies its own config's schedule at its own global step, so split training and the
centralized reference see the same learning rate at every step.
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "cosine", "linear")


def lr_factor(step: int, total_steps: int, name: str = "constant", warmup_steps: int = 0) -> float:
    """Multiplier of the base learning rate for the update at global step `step` (0-based)."""
    if name not in SCHEDULES:
        raise ValueError(f"lr_schedule.name must be one of {list(SCHEDULES)}, got {name!r}")
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if name == "constant":
        return 1.0
    span = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    if name == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress
