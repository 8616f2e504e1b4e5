"""Does the run fit the table? Warnings with the numbers when it does not.

They come when the batch is larger than the training split or the run has too few steps to learn (the example YAMLs'
batch of 1024 gave 3 steps on a 453-row table, with no word).
"""

from __future__ import annotations

import math

MIN_STEPS = 50  # fewer optimizer steps than this rarely converge (a rule of thumb, not a bound)


def run_size_warnings(batch_size: int, epochs: int, train_rows: int, eval_batch_size: int | None = None) -> list[str]:
    """One sentence per problem of train.batch_size / train.epochs against the intersection's training rows."""
    out = []
    if train_rows <= 0:
        return out
    steps_per_epoch = math.ceil(train_rows / batch_size)
    total = steps_per_epoch * epochs
    if batch_size > train_rows:
        out.append(
            f"train.batch_size {batch_size} is larger than the {train_rows} training rows of the intersection: every "
            f"epoch is one step of {train_rows} rows"
        )
    if total < MIN_STEPS:
        fit = max(1, train_rows * epochs // MIN_STEPS)
        more = math.ceil(MIN_STEPS / steps_per_epoch)
        out.append(
            f"this run trains {total} step(s) ({epochs} epoch(s) x {steps_per_epoch} step(s) of up to {batch_size} "
            f"rows); fewer than ~{MIN_STEPS} steps rarely learn: set train.batch_size <= {fit} or train.epochs >= {more}"
        )
    return out
