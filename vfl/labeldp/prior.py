"""LP-2ST stage one: the prior model whose predictions are RRWithPrior's priors on the stage-two rows.

Ghazi et al. 2021, "Deep Learning with Label Differential Privacy", Algorithm 3 (the priors feed Alg. 2).

Two forms:
* binary labels: a model of the leader's own columns (`leader_prior_fn`), trained on the stage-one noisy labels with
  forward loss correction, so the prior estimates the clean click probability rather than the flattened noisy one.
  Ghazi et al. train stage one on all features; in a vertical setting that needs the followers, which the K-class form
  does.
* K classes: a split model of ALL parties (`fit_predict_all_parties`) trained on the stage-one rows with their k-ary RR
  labels. Every party builds a fresh bottom (initialised from (seed, "<party>-lp2st-prior")) and the leader a fresh top;
  they train exactly like the main model (the leader returns d loss / d cut to each follower), on the stage-one rows
  only, with the forward-corrected cross-entropy of the stage-one k-ary RR channel (Patrini et al. 2017, Thm 2).
  A follower learns which rows are in stage one (a draw of the leader's PRF, independent of the labels) and gradients
  of a loss on stage-one noisy labels. A CutSource is one party's bottom as the leader sees it: in-process (the
  leader's own, and every party in the centralized reference) or behind the wire (leader/prior_sources.py's
  FollowerPriorSource); both compute the same numbers, so split and centralized priors are identical.

Privacy, both forms: the prior of a stage-two row is a function of features and of other rows' noisy labels, never of
its own label, so RRWithPrior on it is eps-label-DP (Ghazi et al. 2021, Thm 5 / Alg. 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
from torch import nn

from vfl.config.schema import PartyConfig
from vfl.data.shards import PartyShard, batch_order, eval_batches
from vfl.data.task import Task
from vfl.labeldp.losses import forward_corrected_bce, forward_corrected_ce
from vfl.models.inputs import InputSchema
from vfl.models.registry import build_bottom
from vfl.training.optim import build_optimizer
from vfl.training.top import TopTrainer

if TYPE_CHECKING:  # the release imports nothing of this module; the type only documents the argument
    from vfl.labeldp.release import LabelDPRelease

PRIOR_ORDER_SALT = 0x5EED
PRIOR_PARTY_SUFFIX = "-lp2st-prior"


class CutSource(Protocol):
    def forward(self, epoch: int, step: int, rows: np.ndarray) -> torch.Tensor: ...
    def backward(self, grad: torch.Tensor) -> None: ...
    def evaluate(self, rows: slice) -> torch.Tensor: ...


def prior_config(cfg: PartyConfig, epochs: int) -> PartyConfig:
    """A party's config for its stage-one bottom: its own init seed name, `epochs` (the release's prior_epochs; a
    follower is told it in PRIOR), a constant LR, no selection, no weight average."""
    from vfl.config.schema import LRScheduleConfig

    update = {"epochs": epochs, "early_stopping": None, "lr_schedule": LRScheduleConfig(), "ema_decay": 0.0}
    train = cfg.train.model_copy(update=update)
    return cfg.model_copy(update={"party": cfg.party + PRIOR_PARTY_SUFFIX, "train": train})


def prior_order(stage_rows: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Training-split row indices of each stage-one batch (every party derives the same order)."""
    return [stage_rows[b] for b in batch_order(stage_rows.size, batch_size, seed ^ PRIOR_ORDER_SALT, epoch)]


class LocalCutSource:
    """An in-process bottom (a BottomParty built from prior_config): forward, gradient step, train-split eval."""

    def __init__(self, party):
        self.party = party

    def forward(self, epoch: int, step: int, rows: np.ndarray) -> torch.Tensor:
        return self.party.forward_train(rows)

    def backward(self, grad: torch.Tensor) -> None:
        self.party.apply_gradient(grad)

    def evaluate(self, rows: slice) -> torch.Tensor:
        return self.party.forward_eval(rows, "train")


def fit_predict_all_parties(
    cfg: PartyConfig,
    release: LabelDPRelease,
    sources: list[CutSource],
    in_dim: int,
    device: torch.device,
    n_train: int,
    stage_one: np.ndarray,
    noisy: np.ndarray,
    log: Callable[[str], None] | None = None,
) -> np.ndarray:
    """Train the stage-one split model on rows where stage_one is True (labels `noisy`, k-ary RR of the
    release) and return its class probabilities (n_train, K) on every training row."""
    task = Task("multiclass", release.num_classes)
    tr = prior_config(cfg, release.prior_epochs).train
    rows = np.flatnonzero(stage_one)
    t = torch.from_numpy(release.transition).to(device)
    spe = -(-rows.size // tr.batch_size)
    top = TopTrainer(
        tr,
        cfg.model.top,
        in_dim,
        device,
        loss_fn=lambda z, y: forward_corrected_ce(z, y, t),
        total_steps=tr.epochs * spe,
        task=task,
    )
    labels = torch.from_numpy(np.asarray(noisy, dtype=np.int64))
    for epoch in range(tr.epochs):
        order = prior_order(rows, tr.batch_size, tr.seed, epoch)
        for i, r in enumerate(order):
            cuts = [s.forward(epoch, i, r).detach().requires_grad_(True) for s in sources]
            loss = top.loss(cuts, labels[r])
            value = float(loss.detach())
            if not np.isfinite(value):
                raise FloatingPointError(
                    f"LP-2ST stage-one loss became {value} at epoch {epoch} step {i + 1}; lower train.lr"
                )
            loss.backward()
            for s, c in zip(sources, cuts):
                s.backward(c.grad)
            top.step()
            if log is not None and ((i + 1) % tr.log_every == 0 or i + 1 == len(order)):
                log(f"LP-2ST stage one (all parties) epoch {epoch} step {i + 1}/{len(order)} loss: {value:.6f}")
    probs = np.empty((n_train, task.outputs))
    for sl in eval_batches(n_train, tr.eval_batch_size):
        probs[sl] = top.predict([s.evaluate(sl) for s in sources])
    return probs


class _PriorNet(nn.Module):
    def __init__(self, bottom: nn.Module, cut_dim: int):
        super().__init__()
        self.bottom = bottom
        self.head = nn.Linear(cut_dim, 1)

    def forward(self, *features):
        return self.head(self.bottom(*features)).squeeze(1)


def leader_prior_fn(
    cfg: PartyConfig,
    release: LabelDPRelease,
    shard: PartyShard,
    device: torch.device,
    tick: Callable[[], None] | None = None,
):
    """fit_predict(stage_one_mask, noisy_labels) -> P(y=1) for every training row; tick() after every batch."""
    train = shard.split("train")
    epochs = release.prior_epochs
    rho = release.flip_probability  # stage-one labels are plain RR: correct for it

    def fit_predict(stage_one: np.ndarray, noisy: np.ndarray) -> np.ndarray:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.train.seed)
            schema = InputSchema.of_shard(shard, cfg.model.bottom.numeric_scaling)
            bottom = build_bottom(cfg.model.bottom, schema, cfg.train.seed, "lp2st-prior")
            net = _PriorNet(bottom, cfg.model.bottom.cut_dim).to(device)
        opt = build_optimizer(net, cfg.train)
        rows = np.flatnonzero(stage_one)
        y = torch.from_numpy(np.asarray(noisy, dtype=np.float32))
        for epoch in range(epochs):
            for batch in batch_order(rows.size, cfg.train.batch_size, cfg.train.seed ^ PRIOR_ORDER_SALT, epoch):
                r = rows[batch]
                loss = forward_corrected_bce(net(*train.features(r, device)), y[r].to(device), rho)
                loss.backward()
                opt.step()
                opt.zero_grad()
                if tick is not None:
                    tick()
        net.eval()
        out = np.empty(len(train))
        with torch.no_grad():
            for sl in eval_batches(len(train), cfg.train.eval_batch_size):
                out[sl] = (
                    torch.sigmoid(net(*train.features(np.arange(sl.start, sl.stop), device))).double().cpu().numpy()
                )
        return out

    return fit_predict


def prior_fn_for(
    cfg: PartyConfig, release: LabelDPRelease | None, party, tick: Callable[[], None] | None = None
) -> Callable | None:
    """The stage-one prior of the leader's BottomParty when the release is LP-2ST (rr_prior), else None."""
    if release is None or not release.uses_prior:
        return None
    return leader_prior_fn(cfg, release, party.shard, party.device, tick)
