"""A follower's side of a step's messages, written once: FORWARD's digest check, the cut sent, GRADIENT checked.

Training (follower/training_steps.py: the synchronous step, micro-batches, train.staleness, LP-2ST's stage one;
follower/trainer.py: evaluation) checks the leader's requests and sends its cuts only through `FollowerSteps`; every cut
passes the follower's embedding-DP release (vfl/session/cut_release.py) here, at the one send site, and every gradient
it applies passes `grad_for_cut`. What crosses the wire for a step is decided here alone, and the channel re-sends it
after a lost connection (vfl/wire/resync.py) without the trainer knowing.

    steps = FollowerSteps(session, codecs, cut_release)
    steps.check_forward(msg, ids)                    # FORWARD's digest names exactly these ids, or WireError
    steps.send_cut(out, "train", n, rows, epoch=e, step=s, micro=j)  # released, coded, posted as EMBEDDING
    grad = steps.gradient(e, s, j, shape)            # the next GRADIENT, checked to answer (e, s, j) with `shape`
    steps.cut_gradient(out, grad)                    # the gradient of the bottom's output (embedding DP's clip)
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from vfl.session.compression import FollowerCodecs
from vfl.session.cut_release import CutRelease
from vfl.session.follower import FollowerSession
from vfl.training.microbatch import check_micro
from vfl.training.step_timer import TIMER
from vfl.wire import WireError
from vfl.wire.messages import Embedding, Eval, Forward, Gradient


class FollowerSteps:
    """Every check of the leader's training and evaluation requests, every cut sent, every gradient received."""

    def __init__(self, session: FollowerSession, codecs: FollowerCodecs, cut_release: CutRelease):
        self.session, self.codecs, self.cut_release = session, codecs, cut_release
        self.steps_per_epoch = 0  # from the welcome: the global step a lost link is reported at

    def check_forward(self, msg: Forward, ids: np.ndarray) -> None:
        """FORWARD (epoch, step) must name this party's ids of that batch by their session digest."""
        if msg.phase is None:
            self.session.ch.resync.progress = msg.epoch * self.steps_per_epoch + msg.step + 1  # the newest started
        if self.session.digests.batch(ids) != msg.digest:
            raise WireError(
                f"FORWARD epoch {msg.epoch} step {msg.step}: batch digest differs from the leader's; "
                f"the shards or the seed disagree"
            )

    def check_eval(self, msg: Eval, ids: np.ndarray) -> None:
        """EVAL (split, start, stop) must name this party's ids of that range by their session digest."""
        if self.session.digests.range(msg.split, msg.start, msg.stop, ids) != msg.digest:
            raise WireError(
                f"EVAL {msg.split} {msg.start}..{msg.stop}: the leader's id digest {msg.digest[:12]} does not name "
                f"this party's ids of those rows (the intersections disagree); no cut sent"
            )

    def send_cut(self, out: torch.Tensor, space: str, n: int, rows, **where) -> None:
        """The cut `out` of `rows` of `space` (n rows), released (embedding DP, counted per row), coded
        (network.compression) and posted as EMBEDDING of `where` (epoch, step, micro; or eval=(split, start, stop))."""
        with TIMER.part("wire_send") if "eval" not in where else _untimed():  # a step's breakdown, not evaluation's
            sent = self.cut_release.release(out, space, n, rows)
            self.session.ch.post(Embedding(**self.codecs.embedding_fields(sent), **where))

    def gradient(self, epoch: int, step: int, micro: int | None, shape: tuple, phase: str | None = None) -> np.ndarray:
        """The next GRADIENT, checked to answer (epoch, step) of `phase` (and micro-batch `micro`) with a float32
        gradient of `shape`."""
        with TIMER.part("wire_wait"):
            g: Gradient = self.session.ch.expect(Gradient, what=f"GRADIENT for step {step} from the leader")
        return self.checked_gradient(g, epoch, step, micro, shape, phase)

    def checked_gradient(
        self, g: Gradient, epoch: int, step: int, micro: int | None, shape: tuple, phase: str | None = None
    ) -> np.ndarray:
        """GRADIENT g's float32 gradient, checked to answer (epoch, step, phase[, micro]) with `shape`."""
        if (g.epoch, g.step, g.phase) != (epoch, step, phase):
            raise WireError(
                f"GRADIENT: expected epoch {epoch} step {step} phase {phase}, "
                f"got epoch {g.epoch!r} step {g.step!r} phase {g.phase}"
            )
        if micro is not None:
            check_micro(g.micro, micro, f"GRADIENT for step {step}", WireError)
        g = self.codecs.decoded(g, shape, f"GRADIENT for step {step}")  # network.compression: float32, checked
        if tuple(g.grad.shape) != shape:
            raise WireError(
                f"GRADIENT for step {step}: expected float32 {shape}, got {g.grad.dtype} {tuple(g.grad.shape)}"
            )
        return g.grad

    def cut_gradient(self, out: torch.Tensor, grad: np.ndarray) -> torch.Tensor:
        """The gradient to backpropagate through the bottom's output `out` (embedding DP's clip, or `grad` itself)."""
        return self.cut_release.grad_for_cut(out, torch.from_numpy(grad.copy()))


def _untimed():
    return contextlib.nullcontext()
