"""The follower's training steps: FORWARD answered (synchronous, micro-batched or K ahead), GRADIENT applied, LP-2ST."""

from __future__ import annotations

import time

import numpy as np

from vfl.data.shards import batch_order
from vfl.labeldp.prior import prior_config, prior_order
from vfl.training.microbatch import micro_slices
from vfl.training.party import BottomParty
from vfl.training.staleness import StalenessError
from vfl.training.step_timer import TIMER
from vfl.wire import WireError
from vfl.wire.messages import Forward, Gradient, Prior


def batch_rows(trainer, epoch: int, step: int) -> np.ndarray:
    """This rank's rows of training batch `step` of `epoch` (the order every party draws from train.seed)."""
    if epoch not in trainer.batch_orders:
        tr = trainer.cfg.train
        trainer.batch_orders = {epoch: batch_order(len(trainer.party.train_split), tr.batch_size, tr.seed, epoch)}
    order = trainer.batch_orders[epoch]
    if not 0 <= step < len(order):
        raise WireError(f"FORWARD for step {step} of epoch {epoch}, but an epoch has {len(order)} steps")
    return trainer.ctx.rows(order[step])  # this rank's slice of the global batch


def after_drain(trainer, cls, handler):
    """`handler`, refused while a training batch is in flight: the leader drains the pipeline first."""

    def drained(msg) -> None:
        try:
            trainer.in_flight.require_drained(cls.TYPE)
        except StalenessError as e:
            raise WireError(str(e)) from None
        handler(msg)

    return drained


def on_forward(trainer, msg: Forward) -> None:
    """FORWARD: LP-2ST's stage one, or a training step (its time includes the wait for its FORWARD, not the first)."""
    if msg.phase == "prior":
        prior_step(trainer, msg)
        return
    if trainer.prior is not None:
        trainer.log("LP-2ST stage one done; its bottom is dropped")
        trainer.prior, trainer.prior_rows, trainer.prior_orders = None, None, {}
    waited = trainer.session.waited  # a step's time includes the wait for its FORWARD (not the first)
    first = trainer.steps == 0 and not trainer.ahead_ids  # the main training's first FORWARD
    if first:  # the breakdown covers the main training only, from its first FORWARD
        TIMER.reset()
        TIMER.watch(trainer.party.device)
        waited = 0.0
    t1 = time.perf_counter()
    trainer.step_clock = t1 if first else trainer.step_clock
    (train_step if trainer.in_flight is None else forward_ahead)(trainer, msg)
    TIMER.parts["wire_wait"] = TIMER.parts.get("wire_wait", 0.0) + waited
    if trainer.in_flight is None:  # under staleness a step ends when its gradient is applied (on_gradient)
        TIMER.add_step(time.perf_counter() - t1 + waited)


def forward_ahead(trainer, msg: Forward) -> None:
    """FORWARD under train.staleness K: the cut goes out at once and its batch stays in flight, its weights
    stashed, until its GRADIENT arrives (on_gradient); a FORWARD beyond K + 1 in flight is refused."""
    epoch, step = msg.epoch, msg.step
    rows = batch_rows(trainer, epoch, step)
    ids = trainer.party.train_split.ids[rows]
    trainer.exchange.check_forward(msg, ids)
    try:
        trainer.in_flight.forwarded((epoch, step))
    except StalenessError as e:
        raise WireError(str(e)) from None
    out = trainer.stash.forward(rows)
    trainer.ahead_ids.append(ids)
    trainer.exchange.send_cut(out, "train", len(trainer.party.train_split), rows, epoch=epoch, step=step, micro=0)


def on_gradient(trainer, msg: Gradient) -> None:
    """GRADIENT under train.staleness: that of the oldest batch in flight, backpropagated through the weights
    that computed its cut and applied to the weights as they are now (delayed SGD)."""
    due = trainer.in_flight.oldest
    if due is None:
        raise WireError(
            f"GRADIENT: expected no GRADIENT (no batch in flight), got epoch {msg.epoch!r} step {msg.step!r} "
            f"phase {msg.phase}"
        )
    epoch, step = due
    stash = trainer.stash
    grad = trainer.exchange.checked_gradient(msg, epoch, step, 0, tuple(stash.oldest_cut.shape))
    ids = trainer.ahead_ids.popleft()
    if trainer.recorder:
        trainer.recorder.add(epoch, step, ids, grad)
    # backpropagated through the stashed weights, corrected (train.staleness_correction) and applied
    stash.apply(trainer.exchange.cut_gradient(stash.oldest_cut, grad))
    trainer.in_flight.applied(due)
    trainer.steps += 1
    now = time.perf_counter()  # a step: from the last applied gradient (the first FORWARD) to this one
    TIMER.parts["wire_wait"] = TIMER.parts.get("wire_wait", 0.0) + trainer.session.waited
    TIMER.add_step(now - trainer.step_clock)
    trainer.step_clock = now
    log_step(trainer, epoch, step)


def train_step(trainer, msg: Forward) -> None:
    """A synchronous step: every micro-batch's embedding goes out before the first gradient is awaited (the leader
    works on micro-batch j while this party computes j + 1; M = 1: one whole batch, as without micro-batches)."""
    epoch, step = msg.epoch, msg.step
    party, exchange = trainer.party, trainer.exchange
    rows = batch_rows(trainer, epoch, step)
    ids = party.train_split.ids[rows]
    exchange.check_forward(msg, ids)
    parts = micro_slices(rows.size, trainer.cfg.train.microbatches)
    shapes, outs = [], []
    for j, part in enumerate(parts):
        out = party.forward_train(rows[part])
        shapes.append(tuple(out.shape))
        outs.append(out)
        exchange.send_cut(out, "train", len(party.train_split), rows[part], epoch=epoch, step=step, micro=j)
    for j, part in enumerate(parts):
        grad = exchange.gradient(epoch, step, j, shapes[j])
        if trainer.recorder:
            trainer.recorder.add(epoch, step, ids[part], grad)
        party.accumulate_gradient(exchange.cut_gradient(outs[j], grad), j)
    party.step_optimizer()
    trainer.steps += 1
    log_step(trainer, epoch, step)


def log_step(trainer, epoch: int, step: int) -> None:
    """Every train.log_every steps and at an epoch's end: the step's line (the loss stays with the leader)."""
    steps = len(trainer.batch_orders[epoch])
    if (step + 1) % trainer.cfg.train.log_every == 0 or step + 1 == steps:
        trainer.log(f"epoch {epoch} step {step + 1}/{steps} gradient applied")  # the loss stays with the leader


def on_prior(trainer, msg: Prior) -> None:
    """PRIOR: the stage-one row indices (strictly increasing, by parse) and epochs: a fresh bottom for LP-2ST's
    stage one."""
    n = len(trainer.party.train_split)
    rows = msg.indices
    if rows[-1] >= n:
        raise WireError(
            f"PRIOR from the leader must carry its stage-one rows as one increasing int64 vector "
            f"of {rows.size} indices in [0, {n})"
        )
    trainer.prior_rows = rows.copy()
    trainer.prior = BottomParty(prior_config(trainer.cfg, msg.epochs), trainer.party.shard, trainer.party.device)
    trainer.prior_orders = {}
    trainer.log(
        f"LP-2ST stage one: training a prior bottom on {rows.size} of {n} training rows for {msg.epochs} epoch(s)"
    )


def prior_batch(trainer, epoch: int, step: int) -> np.ndarray:
    """The rows of LP-2ST stage one's batch `step` of `epoch` (drawn from the PRIOR's rows)."""
    if epoch not in trainer.prior_orders:
        tr = trainer.cfg.train
        trainer.prior_orders = {epoch: prior_order(trainer.prior_rows, tr.batch_size, tr.seed, epoch)}
    order = trainer.prior_orders[epoch]
    if not 0 <= step < len(order):
        raise WireError(f"FORWARD (prior) for step {step} of epoch {epoch}, but stage one has {len(order)} steps")
    return order[step]


def prior_step(trainer, msg: Forward) -> None:
    """A step of LP-2ST's stage one: whole batches, no logs per step, not recorded (the leakage attacks read the
    main training)."""
    epoch, step = msg.epoch, msg.step
    if trainer.prior is None:
        raise WireError("FORWARD for the LP-2ST prior before any PRIOR message")
    rows = prior_batch(trainer, epoch, step)
    ids = trainer.party.train_split.ids[rows]
    trainer.exchange.check_forward(msg, ids)
    out = trainer.prior.forward_train(rows)
    trainer.exchange.send_cut(out, "train", len(trainer.party.train_split), rows, epoch=epoch, step=step)
    grad = trainer.exchange.gradient(epoch, step, None, tuple(out.shape), phase="prior")
    trainer.prior.apply_gradient(trainer.exchange.cut_gradient(out, grad))
