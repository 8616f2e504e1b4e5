"""train.ema_decay: an exponential moving average of a model's weights, kept lazily per row on sparse tables.

Averaging the iterates of stochastic gradient descent (Polyak & Juditsky 1992, "Acceleration of stochastic
approximation by averaging", SIAM J. Control Optim. 30(4), Theorem 2) lowers the variance of the weights a run ends
on; the exponential form used here, after every optimizer step

    avg <- d * avg + (1 - d) * param,

is the common practice (e.g. the EMA beside stochastic weight averaging, Izmailov et al. 2018, "Averaging weights
leads to wider optima and better generalization", UAI; TensorFlow's ExponentialMovingAverage). The average starts
at the initial weights (step 0, no bias correction), and is updated once per optimizer step (with micro-batches,
once per batch), so a split run and the centralized reference keep the same average.

A sparse embedding table (nn.Embedding(sparse=True), moved row by row by LazyAdam) can hold 10^7 rows: no step
touches the whole table. A row r that no step moved since step last_r has a constant param p_r, so its exact
average at step s is p_r + d^(s - last_r) (avg_r - p_r). Before a step moves row r it is caught up to the step
before; after the step it takes one ordinary update and last_r becomes the new step. Before the averaged weights
are read (evaluation, a snapshot, a checkpoint) every row is caught up (`sync`, O(table), rare). The result equals
the full-table average up to float rounding (tests/training/test_weight_average.py); a sync adds one rounding, so runs that
sync at other steps agree to float tolerance, not bit for bit.

Buffers (none in the built-in models) are not averaged: the averaged copy takes the model's at each sync.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from vfl.training.lazy_adam import unique_rows
from vfl.training.precision import keep_narrow_layers_fp32

SYNC_BLOCK_ROWS = 1 << 16  # rows of a table brought up to date at once before an evaluation or a checkpoint


class WeightAverage:
    """The averaged copy of `model` (a module of the same class, no grads) and the step count it is current at."""

    def __init__(self, model: nn.Module, decay: float, precision: str = "fp32"):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"train.ema_decay must be in (0, 1) to keep an average, got {decay!r}")
        self.model = model
        self.decay = float(decay)
        self.averaged = copy.deepcopy(model).requires_grad_(False)
        keep_narrow_layers_fp32(self.averaged, precision)  # its fp32 forwards must read the copy's own weights
        self.steps = 0
        self._synced_at = 0
        sparse_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse}
        averaged = dict(self.averaged.named_parameters())
        self.sparse: list[tuple[str, nn.Parameter, torch.Tensor]] = []
        self.dense: list[tuple[nn.Parameter, torch.Tensor]] = []
        for name, p in model.named_parameters():
            if id(p) in sparse_ids:
                self.sparse.append((name, p, averaged[name]))
            else:
                self.dense.append((p, averaged[name]))
        # the step at which each sparse row's average was last brought up to date
        self.last = {name: torch.zeros(p.shape[0], dtype=torch.int64, device=p.device) for name, p, _ in self.sparse}
        self._moving: list[tuple[str, nn.Parameter, torch.Tensor, torch.Tensor | None]] = []

    @torch.no_grad()
    def before_step(self) -> None:
        """Catch up the rows of each sparse table that the coming step moves (those in its gradient) to now."""
        self._moving = []
        for name, p, a in self.sparse:
            if p.grad is None:
                continue  # no row moves
            rows = unique_rows(p.grad)[0] if p.grad.is_sparse else None  # a dense gradient: every row
            self._catch_up(name, p, a, slice(None) if rows is None else rows)
            self._moving.append((name, p, a, rows))

    @torch.no_grad()
    def after_step(self) -> None:
        """avg <- d avg + (1 - d) param on dense parameters and on the rows the step moved."""
        self.steps += 1
        w = 1.0 - self.decay
        if self.dense:
            torch._foreach_lerp_([a for _, a in self.dense], [p.detach() for p, _ in self.dense], w)
        for name, p, a, rows in self._moving:
            if rows is None:
                a.lerp_(p.detach(), w)
                self.last[name].fill_(self.steps)
            else:
                a.index_copy_(0, rows, a.index_select(0, rows).lerp_(p.detach().index_select(0, rows), w))
                self.last[name].index_fill_(0, rows, self.steps)
        self._moving = []

    def _catch_up(self, name: str, p: torch.Tensor, a: torch.Tensor, rows: torch.Tensor | slice) -> None:
        """avg_r <- p_r + d^(steps - last_r) (avg_r - p_r) on `rows` (ids, or a slice of the table), exact where the
        lag is 0."""
        last = self.last[name]
        sliced = isinstance(rows, slice)
        lag = self.steps - (last[rows] if sliced else last.index_select(0, rows))
        pr = p.detach()[rows] if sliced else p.detach().index_select(0, rows)
        ar = a[rows] if sliced else a.index_select(0, rows)
        factor = torch.pow(self.decay, lag.to(torch.float64)).to(p.dtype).view(-1, *([1] * (p.dim() - 1)))
        caught = torch.where(lag.view_as(factor) == 0, ar, pr + factor * (ar - pr))
        if sliced:
            a[rows].copy_(caught)
            last[rows].fill_(self.steps)
        else:
            a.index_copy_(0, rows, caught)
            last.index_fill_(0, rows, self.steps)

    @torch.no_grad()
    def sync(self) -> nn.Module:
        """The averaged module, every row brought up to the current step (a no-op when nothing moved since)."""
        if self._synced_at != self.steps:
            for name, p, a in self.sparse:  # in blocks of rows: the temporaries stay a block's size, not a table's
                for start in range(0, p.shape[0], SYNC_BLOCK_ROWS):
                    self._catch_up(name, p, a, slice(start, start + SYNC_BLOCK_ROWS))
            for mine, theirs in zip(self.averaged.buffers(), self.model.buffers()):
                mine.copy_(theirs)
            self._synced_at = self.steps
        return self.averaged

    def state_dict(self) -> dict:
        """What resume needs beside the averaged weights (the holder's "model" entry): the raw weights and the step
        count. Rows need no bookkeeping: after the sync every row is current."""
        self.sync()
        return {"raw": self.model.state_dict(), "steps": self.steps}

    @torch.no_grad()
    def load(self, block: dict | None) -> None:
        """After the model took a checkpoint's "model" entry (the averaged weights where the run kept an average): the
        average starts from those; with `block` (the run's "average" state: resume, best-step restore) the model takes
        its raw weights back and the step count goes on, else (a checkpoint of a run without an average) training goes
        on from those weights, the average restarting there."""
        self.averaged.load_state_dict(self.model.state_dict())
        if block is not None:
            self.model.load_state_dict(block["raw"])
            self.steps = int(block["steps"])
        for last in self.last.values():
            last.fill_(self.steps)
        self._synced_at = self.steps
        self._moving = []


def weight_average(model: nn.Module, decay: float, precision: str) -> WeightAverage | None:
    """The average train.ema_decay asks for: None when it is 0 (off)."""
    return WeightAverage(model, decay, precision) if decay else None
