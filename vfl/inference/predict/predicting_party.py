"""One party's side of a batch prediction before it connects: its checkpoint, models and new rows.

Its checkpoint is checked against its config and keys; its models are vfl/inference/trained_party.py's (the bottom in
eval mode; the leader's top); its new rows go through its frozen transforms. The leader's and a follower's predictors
(leader/predictor.py, follower/predictor.py) both start from it.
"""

from __future__ import annotations

import os
import time

import torch

from vfl.config.schema import PartyConfig
from vfl.data.shards import PartyShard
from vfl.inference.predict.new_rows import NewRows
from vfl.inference.trained_party import read_party_checkpoint, trained_models
from vfl.training.precision import autocast


class PredictingParty:
    """`ckpt` (the checkpoint), `record` (its training run), `party` (the bottom, loaded), `top` (the leader's
    TopTrainer, loaded; None on a follower), `rows` (the new rows)."""

    def __init__(
        self, cfg: PartyConfig, checkpoint: str, rows_path: str, log, device: torch.device, *, strict: bool = False
    ):
        self.cfg, self.log, self.device, self.checkpoint = cfg, log, device, checkpoint
        self.ckpt, self.record = read_party_checkpoint(cfg, checkpoint)
        self.shard = PartyShard(cfg.data.path, in_memory=False)
        self.party, self.top = trained_models(cfg, self.shard, self.ckpt, self.record, device)
        self.model = self.party.model.eval()
        t0 = time.perf_counter()
        work = os.path.join(cfg.output.dir, f".predict-{cfg.party}-{os.getpid()}")
        self.rows = NewRows(cfg.data.path, rows_path, work, log, strict)
        log(
            f"{cfg.role} {cfg.party}: {len(self.rows)} new rows of {rows_path} transformed with the frozen "
            f"transforms in {time.perf_counter() - t0:.1f} s; checkpoint {checkpoint} (run {self.record['run'][:12]}, "
            f"step {self.record['model_step']})"
        )

    @torch.no_grad()
    def cut(self, start: int, stop: int) -> torch.Tensor:
        """This party's cut of aligned rows [start, stop), as the training run's evaluation computes it
        (BottomParty.forward_eval: eval mode, train.precision, float32 out)."""
        with autocast(self.party.precision, self.device):
            return self.model(*self.rows.split.features(slice(start, stop), self.device)).float()
