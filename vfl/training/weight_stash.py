"""Weight stashing for train.staleness: each in-flight batch's bottom runs on a copy of the weights of its time.

Under bounded staleness (vfl/training/staleness.py) a batch's gradient returns after up to K optimizer steps. Its cut
was computed from the weights of its time; autograd's graph of that cut must differentiate those weights, not the
ones the optimizer has since moved in place (torch refuses a backward through a tensor modified in place, and would
otherwise mix two ages). So, as PipeDream's weight stashing does (Narayanan et al., SOSP 2019, Sec. 3.3; SecretFlow's
torch `pipeline` strategy keeps a parameter copy per batch likewise), every training forward runs the bottom through
`torch.func.functional_call` on a detached copy of its dense parameters; when the batch's gradient arrives, the
copy's gradients become the live parameters' `.grad`, and the optimizer steps the live weights: delayed SGD.

Embedding tables are not copied: an embedding's backward reads only the looked-up indices, never the table's values
(it scatters the incoming gradient into the rows used), so the live table takes its sparse gradient directly; a
copy of a table of millions of rows per batch is what a CTR bottom could not afford. A bottom whose backward does
read a table's values (a user's module using `embedding.weight` in a product) is refused at its backward with one
line naming train.staleness.

`apply` is backward, the correction of a stale gradient (train.staleness_correction: delay compensation, a
staleness-aware learning rate or local updates from cached cut/gradient pairs, vfl/training/staleness_correction.py)
and the optimizer step; without a correction it is backward then the party's plain step.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch
from torch import nn

from vfl.training.precision import autocast
from vfl.training.step_timer import TIMER


class WeightStash:
    """The in-flight training batches of one party's bottom (a BottomParty), oldest first: cut and weight copies."""

    def __init__(self, party, correction=None):
        """correction: a StaleCorrection (vfl/training/staleness_correction.py); None: plain delayed SGD."""
        self.party = party
        self.correction = correction
        self.live = dict(party.model.named_parameters())
        tables = {id(m.weight) for m in party.model.modules() if isinstance(m, nn.Embedding) and m.max_norm is None}
        # the parameters copied per batch: every trainable one but the embedding tables
        self.copied = [n for n, p in self.live.items() if p.requires_grad and id(p) not in tables]
        # per batch in flight: its cut, its weight copies, its rows and its delay (the batches ahead of it, whose
        # updates land between its forward and its own)
        self._batches: deque[tuple[torch.Tensor, dict[str, torch.Tensor], np.ndarray, int]] = deque()

    def __len__(self) -> int:
        return len(self._batches)

    def forward(self, rows: np.ndarray) -> torch.Tensor:
        """The fp32 cut of these training rows from the weights as they are now, kept (with their copy) until its
        gradient arrives."""
        party = self.party
        party.model.train()
        with TIMER.part("data"):
            features = party.train_split.features(rows, party.device)
        with TIMER.part("bottom_forward"):
            copies = {n: self.live[n].detach().clone().requires_grad_(True) for n in self.copied}
            with autocast(party.precision, party.device):
                out = torch.func.functional_call(party.model, copies, tuple(features))
        out = out.float()  # the cut stays fp32 (on the wire too)
        self._batches.append((out, copies, rows, len(self._batches)))
        return out

    @property
    def oldest_cut(self) -> torch.Tensor:
        """The cut whose gradient is due next."""
        if not self._batches:
            raise RuntimeError(f"{self.party.name}: no training batch in flight")
        return self._batches[0][0]

    def backward(self, grad: torch.Tensor) -> None:
        """Backpropagate d loss / d cut of the oldest batch through the weights that computed it, into the live
        parameters' .grad (the caller steps the optimizer)."""
        out, copies = self._batches[0][:2]
        if tuple(grad.shape) != tuple(out.shape):
            raise ValueError(f"{self.party.name}: gradient shape {tuple(grad.shape)} != cut shape {tuple(out.shape)}")
        self._batches.popleft()
        with TIMER.part("backward"):
            try:
                out.backward(grad.to(self.party.device))
            except RuntimeError as e:
                if "modified by an inplace operation" not in str(e):
                    raise
                raise RuntimeError(
                    f"{self.party.name}: this bottom's backward reads an embedding table's values, which moved while "
                    "its batch was in flight; train it with train.staleness: 0"
                ) from None
            for name, copy in copies.items():
                live = self.live[name]
                if copy.grad is not None:
                    live.grad = copy.grad if live.grad is None else live.grad + copy.grad
        if self.correction is not None:
            self.correction.correct(copies, self.live)

    def apply(self, grad: torch.Tensor) -> None:
        """The oldest batch's gradient, backpropagated (backward), corrected and applied: one optimizer step of the
        party, then a correction's local steps."""
        out, _, rows, delay = self._batches[0]
        self.backward(grad)
        if self.correction is None:
            self.party.step_optimizer()
            return
        self.correction.step(delay)
        self.correction.after_step(rows, out, grad)
