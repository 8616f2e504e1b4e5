"""Serving without processes: a fixed prepared table, a leader's scorer, and a recording channel to one follower."""

from __future__ import annotations

import numpy as np
import torch

from vfl.wire.serve_messages import ServeCut, ServeIds

CUT = 3


class _Table:
    """A prepared table of ids 0..99 with fixed random features (2 numeric, 2 categorical)."""

    def __init__(self, seed: int):
        g = np.random.default_rng(seed)
        self.dense = g.normal(size=(100, 2)).astype(np.float32)
        self.cat = g.integers(0, 5, size=(100, 2))

    def rows_of(self, ids):
        ids = np.asarray(ids)
        return np.where((ids >= 0) & (ids < 100), ids, -1)

    def features(self, rows):
        safe = np.where(rows >= 0, rows, 0)
        return torch.from_numpy(self.dense[safe]), torch.zeros(len(rows), 2), torch.from_numpy(self.cat[safe])


class _RecordingChannel:
    """The leader's channel to one follower `f`, recording every message sent to it; the follower answers each
    SERVE_IDS with a cut that is a function of the ids alone."""

    def __init__(self):
        self.timeout_s, self.alive, self.sent, self.answers = 1.0, {"f"}, [], []

    def post(self, peer, msg):
        self.sent.append(msg)
        if isinstance(msg, ServeIds) and msg.request < 10**6:  # (10**6: the planted leak below, not a request)
            cut = np.stack([np.sin(msg.ids * (k + 1.0)) for k in range(CUT)], 1).astype(np.float32)
            self.answers.append(ServeCut(msg.request, cut, np.zeros(0, np.int64)))

    def expect(self, peer, *classes, what=None):
        return self.answers.pop(0)

    def forget(self, peer):
        pass


def _leader_model(top_seed: int):
    from vfl.data.task import Task
    from vfl.inference.party_model import scorer
    from vfl.models.mlp import LinearTop
    from vfl.models.wide_deep import WideDeepBottom

    torch.manual_seed(0)
    bottom = WideDeepBottom([5, 5], 2, 4, (8,), 2)
    torch.manual_seed(top_seed)  # tops trained on different labels: different weights, different scores
    top = LinearTop(2 + CUT)
    top.target = (0.0, 1.0)
    return scorer(bottom.eval(), top.eval(), Task("binary"))
