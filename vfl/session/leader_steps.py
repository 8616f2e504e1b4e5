"""The leader's side of a step's messages, written once: FORWARD with its digest, the cuts, GRADIENT, EVAL.

Training (leader/training_steps.py: the synchronous step, micro-batches, train.staleness; leader/run_report.py:
evaluation) and LP-2ST's all-party stage one (leader/prior_sources.py) ask their followers for cuts and return gradients
only through `LeaderSteps`; what crosses the wire for a step is therefore decided here alone, and the channel re-sends
it after a lost connection (vfl/wire/resync.py) without the trainers knowing.

    steps = LeaderSteps(session, codecs)
    steps.forward_all(epoch, step, ids)              # FORWARD{epoch, step, rows, digest} to every follower
    remote = steps.cuts(epoch, step, rows, micro=j)  # every follower's EMBEDDING of (epoch, step, j), checked, as leaves
    steps.gradients(epoch, step, remote, rows, micro=j)  # each follower's GRADIENT (network.compression applied)
    steps.eval_all(split, start, stop, ids)          # EVAL{split, start, stop, digest} to every follower
    cuts = steps.eval_cuts(split, start, stop)       # then each follower's cut of that range
"""

from __future__ import annotations

import numpy as np
import torch

from vfl.session.compression import LeaderCodecs
from vfl.session.leader import LeaderSession
from vfl.training.step_timer import TIMER
from vfl.wire.messages import Eval, Forward, Gradient


class LeaderSteps:
    """Every training and evaluation message the leader sends its followers, and every cut it awaits from them."""

    def __init__(self, session: LeaderSession, codecs: LeaderCodecs):
        self.session, self.codecs = session, codecs
        self.steps_per_epoch = 0  # known once the followers are welcomed: the global step a lost link is reported at

    @property
    def followers(self) -> list[str]:
        return self.session.followers

    # -- one follower ----------------------------------------------------------------------------
    def forward(self, f: str, epoch: int, step: int, ids: np.ndarray, phase: str | None = None) -> None:
        """FORWARD of batch (epoch, step) to follower f, naming its rows by their digest keyed by f's session."""
        digest = self.session.digests[f].batch(ids)
        self.session.ch.post(f, Forward(epoch=epoch, step=step, rows=int(ids.size), digest=digest, phase=phase))

    def cut(self, f: str, epoch: int, step: int, rows: int, micro: int | None = None) -> torch.Tensor:
        """f's EMBEDDING of (epoch, step[, micro]), checked to hold a (rows, cut_dim) cut."""
        return self.session.remote_cut(f, "step", step, rows, micro, epoch)

    def gradient(
        self,
        f: str,
        epoch: int,
        step: int,
        grad: torch.Tensor,
        rows: np.ndarray,
        micro: int | None = None,
        phase: str | None = None,
    ) -> None:
        """GRADIENT of f's cut of (epoch, step[, micro]) for the training rows `rows` (coded per network.compression);
        the gradient only: the loss stays here (without label DP it is a function of the true labels)."""
        fields = self.codecs.gradient_fields(f, grad.detach().cpu().numpy(), rows, phase=phase)
        self.session.ch.post(f, Gradient(**fields, epoch=epoch, step=step, micro=micro, phase=phase))

    def eval_request(
        self, f: str, split: str, start: int, stop: int, ids: np.ndarray, phase: str | None = None
    ) -> None:
        """EVAL of rows [start, stop) of `split` to follower f; the follower sends no cut of ids we cannot name."""
        digest = self.session.digests[f].range(split, start, stop, ids)
        self.session.ch.post(f, Eval(split=split, start=start, stop=stop, digest=digest, phase=phase))

    def eval_cut(self, f: str, split: str, start: int, stop: int) -> torch.Tensor:
        """f's EMBEDDING of the EVAL range (split, start, stop), checked."""
        return self.session.remote_cut(f, "eval", (split, start, stop), stop - start)

    # -- every follower --------------------------------------------------------------------------
    def forward_all(self, epoch: int, step: int, ids: np.ndarray) -> None:
        """FORWARD of batch (epoch, step) of the training ids `ids` to every follower, in `followers` order."""
        self.session.ch.resync.progress = epoch * self.steps_per_epoch + step + 1  # the newest step started
        with TIMER.part("data"):  # each follower's digest is keyed by its own session key
            digests = {f: self.session.digests[f].batch(ids) for f in self.followers}
        with TIMER.part("wire_send"):
            for f in self.followers:
                self.session.ch.post(f, Forward(epoch=epoch, step=step, rows=int(ids.size), digest=digests[f]))

    def cuts(self, epoch: int, step: int, rows: int, micro: int) -> list[torch.Tensor]:
        """Every follower's cut of (epoch, step, micro), in `followers` order, each a leaf that collects its gradient."""
        with TIMER.part("wire_wait"):
            return [self.cut(f, epoch, step, rows, micro).requires_grad_(True) for f in self.followers]

    def gradients(self, epoch: int, step: int, remote: list[torch.Tensor], rows: np.ndarray, micro: int) -> None:
        """Each follower's GRADIENT: the gradient its cut leaf (from `cuts`) collected."""
        with TIMER.part("wire_send"):
            for f, t in zip(self.followers, remote):
                self.gradient(f, epoch, step, t.grad, rows, micro)

    def eval_all(self, split: str, start: int, stop: int, ids: np.ndarray) -> None:
        """EVAL of [start, stop) of `split` (the ids `ids`) to every follower."""
        for f in self.followers:
            self.eval_request(f, split, start, stop, ids)

    def eval_cuts(self, split: str, start: int, stop: int) -> list[torch.Tensor]:
        """Every follower's cut of the EVAL range (split, start, stop), in `followers` order."""
        return [self.eval_cut(f, split, start, stop) for f in self.followers]
