"""The leader's training steps: synchronous (micro-batched) or under train.staleness K, run by the training loop."""

from __future__ import annotations

import math

import numpy as np
import torch

from vfl.data.shards import batch_order, steps_per_epoch
from vfl.training.microbatch import embedding_bytes_bound, micro_slices, pipelined, weighted_loss
from vfl.training.staleness import StalenessSchedule, pauses_after
from vfl.training.staleness_correction import correction_for
from vfl.training.step_timer import TIMER
from vfl.training.weight_stash import WeightStash


def train(trainer) -> None:
    """Run `trainer`'s loop to its end: every step, evaluation, checkpoint, snapshot and restore of the run."""
    labels = torch.from_numpy(trainer.labels.labels)
    train_ids = trainer.party.train_split.ids
    TIMER.watch(trainer.party.device)
    TIMER.reset()  # the breakdown covers the main training only (not LP-2ST's stage one)
    stale = stale_schedule(trainer) if trainer.cfg.train.staleness else None  # None: the synchronous step

    def step(epoch: int, i: int, batch: np.ndarray) -> float:
        if stale is not None:
            return stale_step(trainer, stale, epoch, i, batch, labels)
        rows = trainer.ctx.rows(batch)  # this rank's slice of the global batch (all of it for one rank)
        trainer.exchange.forward_all(epoch, i, train_ids[rows])
        parts = micro_slices(rows.size, trainer.cfg.train.microbatches)
        value, total = 0.0, 0.0
        # each follower sends its M embeddings before its first gradient: up to M of one follower's arrive while
        # the leader awaits another's (M = 1: one ahead, as outside a step)
        widest = max(part.stop - part.start for part in parts)  # micro_slices: sizes differ by one at most
        bound = embedding_bytes_bound(widest, [trainer.cut_dims[f] for f in trainer.followers])
        with pipelined(trainer.ch, len(parts), bound):
            for j, part in enumerate(parts):  # M = 1: the whole batch, exactly as without micro-batches
                share, total = micro_step(
                    trainer, epoch, i, j, rows[part], rows.size, batch.size, labels, j + 1 == len(parts), value
                )
                value += share
        trainer.top.step()
        trainer.party.step_optimizer()
        trainer.local_samples += rows.size
        return total

    trainer.loop.run(
        step,
        drained(stale, trainer.evaluate, "an evaluation"),
        drained(stale, lambda epoch, gs: trainer.checkpoint(epoch, gs, f"step{gs}"), "a checkpoint"),
        trainer.start_step,
        drained(stale, trainer.snapshot, "a snapshot"),
        drained(stale, trainer.restore, "a restore"),
    )


def stale_schedule(trainer) -> StalenessSchedule:
    """train.staleness K > 0: the schedule (which batches to start when; drained at every pause of the loop) and,
    under train.staleness_leader_bottom stale, the stash of the leader's own in-flight cuts (weights as old as the
    followers'); fresh (the default) keeps the leader's own bottom synchronous."""
    tr = trainer.cfg.train
    spe = steps_per_epoch(len(trainer.party.train_split), tr.batch_size)
    correction = correction_for(tr, trainer.party)
    # staleness_leader_bottom fresh: the leader's own bottom runs synchronously at each batch's step, unstashed
    trainer.stash = WeightStash(trainer.party, correction) if tr.staleness_leader_bottom == "stale" else None
    trainer.batch_orders = {}
    trainer.log(
        f"train.staleness {tr.staleness}: up to {tr.staleness} batches start before the gradient of the oldest "
        f"returns ({tr.staleness + 1} in flight), drained at every evaluation, checkpoint and epoch end; "
        f"correction {tr.staleness_correction}; the leader's own bottom {tr.staleness_leader_bottom}"
    )
    return StalenessSchedule(
        tr.staleness, spe, lambda epoch, i: pauses_after(tr, spe, tr.epochs * spe, epoch * spe + i + 1, i)
    )


def stale_step(trainer, stale: StalenessSchedule, epoch: int, i: int, rows: np.ndarray, labels: torch.Tensor) -> float:
    """Step i of `epoch` under train.staleness K: start every batch up to K ahead that is not in flight yet
    (FORWARD to each follower; the leader's own cut from its weights of now when its bottom is stale), train the top
    on batch i's cuts as they arrive, return their gradients, then apply the leader's own: a fresh bottom's
    computed now (synchronous), a stale one's through its stash (delayed SGD, with its correction)."""
    tr, party, stash = trainer.cfg.train, trainer.party, trainer.stash
    if epoch not in trainer.batch_orders:
        trainer.batch_orders = {epoch: batch_order(len(party.train_split), tr.batch_size, tr.seed, epoch)}
    for e, s in stale.to_forward(epoch, i):
        ahead = trainer.batch_orders[e][s]
        trainer.exchange.forward_all(e, s, party.train_split.ids[ahead])
        if stash is not None:
            stash.forward(ahead)
        stale.window.forwarded((e, s))
    own = stash.oldest_cut if stash is not None else party.forward_train(rows)
    own_leaf = own.detach().requires_grad_(True)
    # while the leader awaits one follower's cut of batch i, another's cuts of i .. i + K may arrive
    bound = embedding_bytes_bound(rows.size, [trainer.cut_dims[f] for f in trainer.followers])
    with pipelined(trainer.ch, stale.window.depth, bound):
        remote = trainer.exchange.cuts(epoch, i, rows.size, micro=0)
    with TIMER.part("top"):
        loss = trainer.top.loss([own_leaf, *remote], labels[rows])
        value = float(loss.detach())
        if not math.isfinite(value):  # before anything is sent: the followers get a clean ABORT
            raise FloatingPointError(f"training loss became {value} at epoch {epoch} step {i + 1}; lower train.lr")
        loss.backward()
    trainer.exchange.gradients(epoch, i, remote, rows, micro=0)
    stale.window.applied((epoch, i))
    trainer.top.step()
    if stash is not None:  # backward through the stashed weights, corrected, applied (weight_stash.apply)
        stash.apply(own_leaf.grad)
    else:
        party.apply_gradient(own_leaf.grad)
    trainer.local_samples += rows.size
    return value


def micro_step(
    trainer,
    epoch: int,
    i: int,
    j: int,
    rows: np.ndarray,
    batch_rows: int,
    global_rows: int,
    labels: torch.Tensor,
    last: bool,
    loss_so_far: float,
) -> tuple[float, float]:
    """Micro-batch j of step i: own bottom, the followers' cuts j, the top; gradients j go back at once.
    batch_rows: this rank's slice of the global batch of global_rows. Returns (this micro-batch's share of
    the slice's loss, the global batch's mean loss once known: with the last micro-batch, else nan)."""
    ctx = trainer.ctx
    own = trainer.party.forward_train(rows)
    own_leaf = own.detach().requires_grad_(True)
    remote = trainer.exchange.cuts(epoch, i, rows.size, micro=j)
    with TIMER.part("top"):
        loss = trainer.top.loss([own_leaf, *remote], labels[rows])
        scaled = weighted_loss(loss, rows.size, batch_rows)
        value = float(scaled.detach())
        # N ranks: the mean over the global batch (an all-reduce every rank joins; identity for one rank)
        total = ctx.global_loss(loss_so_far + value, batch_rows, global_rows) if last else math.nan
        if not math.isfinite(total if last else value):  # before anything is sent: the followers get a clean ABORT
            raise FloatingPointError(
                f"training loss became {total if last else value} at epoch {epoch} step {i + 1}; lower train.lr"
            )
        if ctx.ranks > 1:  # N n_r / B: DDP's average over ranks is then the global batch's gradient
            scaled = scaled * ctx.loss_weight(batch_rows, global_rows)
        scaled.backward()  # top only: the followers' gradients are ready before the leader's bottom runs
    trainer.exchange.gradients(epoch, i, remote, rows, micro=j)
    trainer.party.accumulate_gradient(own_leaf.grad, j)  # overlaps with the followers' backward passes
    return value, total


def drained(stale: StalenessSchedule | None, call, what: str):
    """`call`, which under train.staleness first checks that no training batch is in flight (the schedule drains
    before every pause of the loop, so a failure here is a bug of the schedule, never a wrong model)."""
    if stale is None:
        return call

    def checked(*args):
        stale.window.require_drained(what)
        return call(*args)

    return checked
