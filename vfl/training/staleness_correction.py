"""train.staleness_correction: what a bottom does with a gradient that returns K updates late (train.staleness).

Under bounded staleness (vfl/training/staleness.py) a bottom's gradient g(w_stale) is taken at the weights that
computed its cut (weight stashing, vfl/training/weight_stash.py) and applied to the weights of now, w_now, up to K
updates later: delayed SGD, whose error grows with lr x delay. Three remedies from the asynchronous-SGD and
vertical-FL literature, each applied where a stale gradient meets its party's optimizer (every bottom trained on the
stale schedule: each follower's, and the leader's own unless train.staleness_leader_bottom is fresh; the top trains
on its weights of now and takes none):

- ``delay_compensation``: DC-ASGD (Zheng et al., "Asynchronous Stochastic Gradient Descent with Delay
  Compensation", ICML 2017, Alg. 1 with eq. 9's adaptive variant DC-ASGD-a). A first-order Taylor step of the
  gradient from w_stale to w_now, with the outer product of the gradient standing in for the Hessian's diagonal:
      g_dc = g + lambda_t * g (.) g (.) (w_now - w_stale),
      lambda_t = lambda0 / sqrt(MeanSquare_t),  MeanSquare_t = m MeanSquare_{t-1} + (1 - m) g (.) g
  (elementwise; lambda0 = DC_LAMBDA0, m = DC_MOMENTUM). Applied to the stashed (dense) parameters; an embedding
  table is not copied per batch (weight_stash.py), so its rows take the plain stale gradient.
- ``staleness_lr``: the staleness-dependent learning rate of Zhang, Gupta, Lian and Liu ("Staleness-aware
  Async-SGD for Distributed Deep Learning", IJCAI 2016, Sec. 3, eq. 4): a gradient of staleness tau updates with
  lr / tau (tau >= 1; a fresh gradient, tau = 0, keeps lr). Here tau is the number of this party's updates between
  the batch's forward and its gradient (K once the pipeline is full, fewer just after a pause).
- ``local_updates``: CELU-VFL (Fu, Wang, Liu, Zhu, Zhang, Qiao, Xu, Cui, "Towards Communication-efficient Vertical
  Federated Learning Training via Cache-enabled Local Updates", VLDB 2022, Alg. 1 and Sec. 4.2-4.3). The party keeps
  a *workset* of its last W (rows, cut, gradient) triples; after each gradient it applies, while the next round trip
  is in flight, it takes R local steps, each on one triple drawn uniformly from the workset (Sec. 4.2's uniform
  sampling): it recomputes the cut z' of those rows from its weights of now and descends
      sum_i  w_i <g_i, z'_i>,   w_i = cos(z_i, z'_i) if cos(z_i, z'_i) >= xi else 0
  (Sec. 4.3's instance weighting: a row whose cut moved away from the one its cached gradient was taken at counts
  less, and not at all below xi = LOCAL_COSINE_FLOOR). g is the gradient the party received (d loss / d cut, already
  divided by the batch), so a weight of one reproduces that gradient's step. A local step uses only what the party
  holds: a follower's cached gradients are those the leader sent it, so its local steps see no function of the labels
  beyond them; the draws come from the party's own generator (seeded by train.seed and the party's name).

`none` is the plain delayed SGD. With train.staleness 0 there is no stale gradient and no correction runs: the
synchronous step stays bit for bit what it is.
"""

from __future__ import annotations

import hashlib
from collections import deque

import numpy as np
import torch

CORRECTIONS = ("none", "delay_compensation", "staleness_lr", "local_updates")
DC_LAMBDA0 = 2.0  # DC-ASGD-a's lambda0 (Zheng et al. 2017, Sec. 6: 2 for DC-ASGD-a on CIFAR-10 and ImageNet)
DC_MOMENTUM = 0.95  # its MeanSquare's decay m (ibid.)
DC_EPS = 1e-7  # keeps lambda_t finite where MeanSquare is still zero
LOCAL_WORKSET = 4  # CELU-VFL's workset size W: the last W (rows, cut, gradient) triples
LOCAL_STEPS = 1  # R: local steps after each gradient applied
LOCAL_COSINE_FLOOR = 0.5  # xi: a row whose stale and fresh cuts have a lower cosine similarity takes no weight


def delay_compensated(
    grad: torch.Tensor, w_now: torch.Tensor, w_stale: torch.Tensor, mean_square: torch.Tensor, lambda0: float
) -> torch.Tensor:
    """DC-ASGD-a's compensated gradient g + lambda0 / sqrt(MeanSquare) * g * g * (w_now - w_stale) (elementwise);
    `mean_square` is MeanSquare after this gradient (update_mean_square)."""
    return grad + lambda0 / torch.sqrt(mean_square + DC_EPS) * grad * grad * (w_now - w_stale)


def update_mean_square(mean_square: torch.Tensor | None, grad: torch.Tensor, momentum: float) -> torch.Tensor:
    """MeanSquare_t = m MeanSquare_{t-1} + (1 - m) g * g (the first gradient starts it at (1 - m) g * g)."""
    square = grad * grad
    return (1 - momentum) * square if mean_square is None else momentum * mean_square + (1 - momentum) * square


def staleness_lr_factor(delay: int) -> float:
    """Zhang et al. 2016's lr / tau: the factor of the learning rate for a gradient `delay` updates late."""
    return 1.0 / max(int(delay), 1)


def cosine_weights(stale: torch.Tensor, fresh: torch.Tensor, floor: float) -> torch.Tensor:
    """Per row, the cosine similarity of its stale and fresh cuts, zero where it is below `floor` (CELU-VFL's
    instance weighting); a row whose cuts are both zero has similarity 0."""
    cos = torch.nn.functional.cosine_similarity(stale, fresh, dim=1, eps=1e-12)
    return torch.where(cos >= floor, cos, torch.zeros_like(cos))


def local_generator(seed: int, party: str) -> np.random.Generator:
    """The party's own generator for the workset's draws (public: it chooses which cached batch to revisit)."""
    digest = hashlib.sha256(f"vfl-local-updates/v1\0{seed}\0{party}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class StaleCorrection:
    """One bottom's correction of its stale gradients (train.staleness_correction), used by its WeightStash: the
    gradient is corrected in the live parameters' .grad before the optimizer steps, the step's learning rate scaled,
    and local steps taken after it."""

    def __init__(self, name: str, party, seed: int):
        if name not in CORRECTIONS:
            raise ValueError(f"train.staleness_correction must be one of {list(CORRECTIONS)}, got {name!r}")
        self.name = name
        self.party = party
        self.mean_square: dict[str, torch.Tensor] = {}  # DC-ASGD-a's MeanSquare per stashed parameter
        self.workset: deque[tuple[np.ndarray, torch.Tensor, torch.Tensor]] = deque(maxlen=LOCAL_WORKSET)
        self.rng = local_generator(seed, party.name) if name == "local_updates" else None
        self.local_steps = 0  # taken so far (reported)

    def correct(self, copies: dict[str, torch.Tensor], live: dict[str, torch.Tensor]) -> None:
        """delay_compensation: each stashed parameter's live .grad (the stale gradient, just accumulated) becomes
        DC-ASGD-a's compensated gradient, w_stale being the stash's copy and w_now the live weights."""
        if self.name != "delay_compensation":
            return
        with torch.no_grad():
            for name, copy in copies.items():
                p = live[name]
                if p.grad is None or p.grad.is_sparse:
                    continue
                ms = update_mean_square(self.mean_square.get(name), p.grad, DC_MOMENTUM)
                self.mean_square[name] = ms
                p.grad = delay_compensated(p.grad, p.detach(), copy.detach(), ms, DC_LAMBDA0)

    def step(self, delay: int) -> None:
        """The optimizer step of a gradient `delay` updates late (staleness_lr: at lr / delay)."""
        scale = staleness_lr_factor(delay) if self.name == "staleness_lr" else 1.0
        self.party.step_optimizer() if scale == 1.0 else _scaled_step(self.party, scale)

    def after_step(self, rows: np.ndarray, cut: torch.Tensor, grad: torch.Tensor) -> None:
        """local_updates: cache (rows, cut, gradient) in the workset, then take LOCAL_STEPS local steps on triples
        drawn uniformly from it."""
        if self.name != "local_updates":
            return
        self.workset.append((np.asarray(rows).copy(), cut.detach().float(), grad.detach().float()))
        for _ in range(LOCAL_STEPS):
            rows_k, cut_k, grad_k = self.workset[int(self.rng.integers(len(self.workset)))]
            self.local_step(rows_k, cut_k, grad_k)

    def local_step(self, rows: np.ndarray, cut: torch.Tensor, grad: torch.Tensor) -> None:
        """One CELU-VFL local step: the fresh cut of `rows`, weighted per row by its cosine with the cached `cut`,
        descends <grad, fresh> (the cached gradient reused, never a new one)."""
        party = self.party
        fresh = party.forward_train(rows)
        party._pending = []  # a local step is not a forwarded batch awaiting its gradient
        weights = cosine_weights(cut.to(fresh.device), fresh.detach(), LOCAL_COSINE_FLOOR)
        surrogate = (weights[:, None] * grad.to(fresh.device) * fresh).sum()
        surrogate.backward()
        _scaled_step(party, 1.0, count=False)
        self.local_steps += 1


def correction_for(train, party) -> StaleCorrection | None:
    """The StaleCorrection of `party`'s bottom under train.staleness_correction (None: plain delayed SGD)."""
    if train.staleness_correction == "none":
        return None
    return StaleCorrection(train.staleness_correction, party, train.seed)


def _scaled_step(party, scale: float, count: bool = True) -> None:
    """The party's optimizer step at `scale` x its scheduled learning rate; count=False: a local step, which does not
    advance the lr schedule's step count (the schedule follows the run's training steps)."""
    party.optimizer.step(scale, count)
    party.optimizer.zero_grad()
    party._pending = []
