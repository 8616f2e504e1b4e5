"""How often the leader's schedule sends each split's rows to a follower: what embedding DP calibrates for at WELCOME.

From global step `start_step` to the end of the run (early stopping can only end it sooner): a training row is sent
once in every epoch not yet finished (LP-2ST's all-party prior adds its stage-one epochs and one evaluation of the
training rows); a validation row once at every evaluation; a test row at every evaluation and once more when early
stopping may restore an earlier step and re-test it. The evaluation cadence is `TrainingLoop._eval_due`'s: every
`eval_every_steps` global steps (or at each epoch's end when unset) and at the last step.
"""

from __future__ import annotations


def evaluations(epochs: int, steps_per_epoch: int, eval_every_steps: int | None, start_step: int = 0) -> int:
    """The evaluations a run of `epochs` x `steps_per_epoch` makes after global step `start_step`."""
    total = epochs * steps_per_epoch
    if not 0 <= start_step <= total:
        raise ValueError(f"start_step must be in [0, {total}], got {start_step}")
    every = eval_every_steps or steps_per_epoch
    due = total // every - start_step // every  # multiples of the cadence in (start_step, total]
    return due + (0 if total % every == 0 or start_step == total else 1)  # the last step always evaluates


def sends_per_row(
    epochs: int,
    steps_per_epoch: int,
    eval_every_steps: int | None,
    start_step: int = 0,
    restores: bool = False,
    prior_epochs: int = 0,
) -> dict[str, int]:
    """The most sends of any one row of each split from `start_step` on: {"train": ., "valid": ., "test": .}."""
    evals = evaluations(epochs, steps_per_epoch, eval_every_steps, start_step)
    train = epochs - start_step // steps_per_epoch + (prior_epochs + 1 if prior_epochs else 0)
    return {"train": train, "valid": evals, "test": evals + (1 if restores else 0)}
