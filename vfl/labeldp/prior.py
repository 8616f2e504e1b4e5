"""Stage one of LP-2ST on the leader: a model of the leader's own columns, trained on stage-one
noisy labels, whose predictions are the priors for RRWithPrior on the remaining samples.

Ghazi et al. 2021 (Algorithm 3) train stage one on all features; in a vertical setting that would
need the followers, so this prior uses the leader's columns only. The privacy argument is
unchanged: the prior depends on features and on other samples' noisy labels, never on the
label it is applied to. Stage one trains with forward loss correction, so the prior estimates the
clean click probability rather than the flattened noisy one.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from privacy.label.release_draws import forward_corrected_bce
from privacy.label.randomized_response import flip_probability
from vfl.config.schema import PartyConfig
from vfl.data.shards import PartyShard, batch_order, eval_batches
from vfl.models import build_bottom
from vfl.training.optim import build_optimizer


class _PriorNet(nn.Module):
    def __init__(self, bottom: nn.Module, cut_dim: int):
        super().__init__()
        self.bottom = bottom
        self.head = nn.Linear(cut_dim, 1)

    def forward(self, *features):
        return self.head(self.bottom(*features)).squeeze(1)


def leader_prior_fn(cfg: PartyConfig, shard: PartyShard, device: torch.device, tick: Callable[[], None] | None = None):
    """fit_predict(stage_one_mask, noisy_labels) -> P(y=1) for every training row; tick() after every batch."""
    train = shard.split("train")
    epochs = cfg.privacy.label_dp.prior_epochs
    rho = flip_probability(cfg.privacy.label_dp.eps)  # stage-one labels are plain RR: correct for it

    def fit_predict(stage_one: np.ndarray, noisy: np.ndarray) -> np.ndarray:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.train.seed)
            bottom = build_bottom(cfg.model.bottom, shard.field_sizes, shard.n_dense, cfg.train.seed, "lp2st-prior")
            net = _PriorNet(bottom, cfg.model.bottom.cut_dim).to(device)
        opt = build_optimizer(net, cfg.train)
        rows = np.flatnonzero(stage_one)
        y = torch.from_numpy(np.asarray(noisy, dtype=np.float32))
        for epoch in range(epochs):
            for batch in batch_order(rows.size, cfg.train.batch_size, cfg.train.seed ^ 0x5EED, epoch):
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
                out[sl] = torch.sigmoid(net(*train.features(np.arange(sl.start, sl.stop), device))).double().cpu().numpy()
        return out

    return fit_predict


def prior_fn_for(cfg: PartyConfig, party, tick: Callable[[], None] | None = None) -> Callable | None:
    """The stage-one prior of the leader's BottomParty when its config selects rr_prior, else None."""
    ld = cfg.privacy.label_dp
    if ld is None or ld.mechanism != "rr_prior":
        return None
    return leader_prior_fn(cfg, party.shard, party.device, tick)
