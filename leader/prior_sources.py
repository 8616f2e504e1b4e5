"""LP-2ST's K-class stage one as the leader runs it: a split model of all parties, the followers behind the wire."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from vfl.config.schema import PartyConfig
from vfl.labeldp.prior import LocalCutSource, fit_predict_all_parties, prior_config
from vfl.labeldp.release import LabelDPRelease
from vfl.session.compression import LeaderCodecs
from vfl.session.leader import LeaderSession
from vfl.session.leader_steps import LeaderSteps
from vfl.training.party import BottomParty
from vfl.wire.messages import Prior


@dataclass
class AllPartyPrior:
    """LP-2ST stage one as a split model of all parties (vfl/labeldp/prior.py), called with the stage-one rows and
    their noisy labels: each follower is told the stage-one rows (a PRF draw independent of the labels) and trains a
    fresh bottom on them. in_dim: the width of every party's cut together."""

    cfg: PartyConfig
    release: LabelDPRelease
    party: BottomParty
    session: LeaderSession
    codecs: LeaderCodecs
    log: Callable[[str], None]
    in_dim: int

    def __call__(self, stage_one: np.ndarray, noisy: np.ndarray) -> np.ndarray:
        rows = np.flatnonzero(stage_one).astype(np.int64)
        pcfg = prior_config(self.cfg, self.release.prior_epochs)
        followers = self.session.followers
        for f in followers:
            self.session.ch.post(f, Prior(indices=rows, epochs=pcfg.train.epochs))
        self.log(
            f"LP-2ST: stage one on {rows.size} of {stage_one.size} training rows, all parties, "
            f"{pcfg.train.epochs} epoch(s)"
        )
        own = BottomParty(pcfg, self.party.shard, self.party.device)
        ids = self.party.train_split.ids
        sources = [LocalCutSource(own), *(FollowerPriorSource(self.session, self.codecs, ids, f) for f in followers)]
        return fit_predict_all_parties(
            self.cfg, self.release, sources, self.in_dim, self.party.device, stage_one.size, stage_one, noisy, self.log
        )


class FollowerPriorSource:
    """A follower's stage-one bottom as the leader sees it: FORWARD / GRADIENT / EVAL with phase "prior"."""

    def __init__(self, session: LeaderSession, codecs: LeaderCodecs, train_ids: np.ndarray, follower: str):
        self.steps, self.train_ids, self.f = LeaderSteps(session, codecs), train_ids, follower
        self.at: tuple[int, int] = (0, 0)
        self.rows = np.zeros(0, np.int64)  # the training rows of the batch in flight (top-k's residuals are per row)

    def forward(self, epoch: int, step: int, rows: np.ndarray) -> torch.Tensor:
        self.at, self.rows = (epoch, step), rows
        self.steps.forward(self.f, epoch, step, self.train_ids[rows], phase="prior")
        return self.steps.cut(self.f, epoch, step, rows.size)

    def backward(self, grad: torch.Tensor) -> None:
        epoch, step = self.at
        self.steps.gradient(self.f, epoch, step, grad, self.rows, phase="prior")

    def evaluate(self, rows: slice) -> torch.Tensor:
        self.steps.eval_request(self.f, "train", rows.start, rows.stop, self.train_ids[rows], phase="prior")
        return self.steps.eval_cut(self.f, "train", rows.start, rows.stop)
