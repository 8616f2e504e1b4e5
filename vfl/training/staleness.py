"""train.staleness K: which training batches a party may have in flight, and when the pipeline drains.

Bounded-staleness pipelining across batches, the schedule apart from the model (PipeDream's pipeline with weight
stashing, Narayanan et al., SOSP 2019, Sec. 3.3; SecretFlow's split-learning `pipeline` strategy): a party runs the
bottoms of up to K batches beyond the one whose gradient it awaits, so at most K + 1 batches are *in flight*
(bottom forwarded, gradient not yet applied), and it applies each gradient when it arrives. The leader drives it:
at step t it starts (FORWARD) every batch up to t + K that lies before the next *pause*, trains its top on batch t
as soon as every cut of t is in, and returns GRADIENT t before it starts batch t + K + 1. Each party then computes
the cut of batch s after applying gradients 0 .. s - K - 1 (weights w_{s-K}; w_{pause} for the first K + 1 batches
after a pause) and applies its gradient to w_s: delayed SGD with a delay of at most K updates,
w_{s+1} = w_s - lr * g(w_{s-k}), k <= K (asynchronous SGD with bounded delay: Agarwal & Duchi, NeurIPS 2011; Lian et
al., NeurIPS 2015). The gradient is taken at the weights that computed the cut (weight stashing,
vfl/training/weight_stash.py). The leader's own bottom is not on the wire: by default (train.staleness_leader_bottom
fresh) it computes its cut of batch s at s's own step and applies its gradient at once, a synchronous bottom beside
stale ones, measured to cost a third to a half of the AUC that a stale leader bottom costs (docs/deploy-wan.md);
`stale` stashes it too, so that every cut of one batch comes from weights of one age.

A pause is a step after which the loop evaluates, saves a checkpoint, ends an epoch or ends the run: the pipeline is
empty there, so evaluation, early stopping's snapshot and restore, checkpoints and resume see every party at the
same step, as in the synchronous schedule. K = 0 is that schedule: one batch in flight, forwarded, trained, applied.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from vfl.wire.messages import MAX_STALENESS  # train.staleness' domain is [0, MAX_STALENESS] (HELLO carries it)

Batch = tuple[int, int]  # (epoch, step within the epoch)


class StalenessError(ValueError):
    """A batch forwarded or applied out of the bounded-staleness schedule (a peer's message, or a trainer's bug)."""


def pauses_after(train, epoch_steps: int, total_steps: int, global_step: int, step: int) -> bool:
    """Whether the training loop pauses (evaluates, checkpoints, ends the epoch or the run) after the step that makes
    `global_step` steps done; `step` is that step's index within its epoch of `epoch_steps` (the loop's cadence,
    vfl/training/loop.py: eval_every_steps or every epoch's end, checkpoint_every, the last step)."""
    every, save_every = train.eval_every_steps, train.checkpoint_every
    return (
        step + 1 == epoch_steps
        or global_step == total_steps
        or bool(every and global_step % every == 0)
        or bool(save_every and global_step % save_every == 0)
    )


class InFlight:
    """The batches a party has forwarded and not yet applied, oldest first: at most K + 1, applied in order."""

    def __init__(self, staleness: int):
        if isinstance(staleness, bool) or not isinstance(staleness, int) or not 0 <= staleness <= MAX_STALENESS:
            raise ValueError(f"train.staleness must be an integer in [0, {MAX_STALENESS}], got {staleness!r}")
        self.staleness = staleness
        self._batches: deque[Batch] = deque()
        self.max_in_flight = 0  # the most batches in flight at once so far (K + 1 once the pipeline fills)

    @property
    def depth(self) -> int:
        """The most batches that may be in flight: K + 1."""
        return self.staleness + 1

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def oldest(self) -> Batch | None:
        """The batch whose gradient is due next (None: nothing in flight)."""
        return self._batches[0] if self._batches else None

    def forwarded(self, batch: Batch) -> None:
        """`batch`'s bottom ran and its cut was sent; refused beyond K + 1 in flight or if it is already in flight."""
        if len(self._batches) >= self.depth:
            raise StalenessError(
                f"FORWARD for epoch {batch[0]} step {batch[1]} while {len(self._batches)} batches are in flight "
                f"(oldest: epoch {self._batches[0][0]} step {self._batches[0][1]}); train.staleness="
                f"{self.staleness} allows at most {self.depth}"
            )
        if batch in self._batches:
            raise StalenessError(f"FORWARD for epoch {batch[0]} step {batch[1]}, which is already in flight")
        self._batches.append(batch)
        self.max_in_flight = max(self.max_in_flight, len(self._batches))

    def applied(self, batch: Batch) -> None:
        """`batch`'s gradient was applied: it must be the oldest in flight (gradients return in forward order)."""
        if self.oldest != batch:
            due = "none is in flight" if self.oldest is None else f"epoch {self.oldest[0]} step {self.oldest[1]} is due"
            raise StalenessError(f"GRADIENT for epoch {batch[0]} step {batch[1]}, but {due}")
        self._batches.popleft()

    def require_drained(self, what: str) -> None:
        """Before `what` (an evaluation, a checkpoint, a snapshot, ...): every forwarded batch must be applied."""
        if self._batches:
            raise StalenessError(
                f"{what} while {len(self._batches)} training batch(es) are in flight (oldest: epoch "
                f"{self._batches[0][0]} step {self._batches[0][1]}); the pipeline drains before it"
            )


class StalenessSchedule:
    """The leader's side: which batches to start before training step `step` of an epoch, never past a pause."""

    def __init__(self, staleness: int, epoch_steps: int, pause: Callable[[int, int], bool]):
        """pause(epoch, step): whether the loop pauses after that step (pauses_after of its global step)."""
        self.window = InFlight(staleness)
        self.epoch_steps = epoch_steps
        self.pause = pause

    def horizon(self, epoch: int, step: int) -> list[Batch]:
        """The batches that should be in flight while `step` trains: step .. step + K, cut after the first pause."""
        out = [(epoch, step)]
        while len(out) < self.window.depth and not self.pause(epoch, out[-1][1]) and out[-1][1] + 1 < self.epoch_steps:
            out.append((epoch, out[-1][1] + 1))
        return out

    def to_forward(self, epoch: int, step: int) -> list[Batch]:
        """The batches to start now, in order, before `step` trains (those of its horizon not yet in flight); the
        batches in flight must be the horizon's first ones (the loop trains them in order)."""
        want = self.horizon(epoch, step)
        held = list(self.window._batches)
        if want[: len(held)] != held:
            raise StalenessError(
                f"step {step} of epoch {epoch} trains next, but the batches in flight are {held} (the loop skipped "
                "or reordered a step)"
            )
        return want[len(held) :]
