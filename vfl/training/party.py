"""One party's trainable bottom: its shard, model and optimizer, used by leader, follower and centralized."""

from __future__ import annotations

import os

import numpy as np
import torch

from vfl.config.model_sections import BottomConfig
from vfl.config.schema import PartyConfig
from vfl.data.shards import PartyShard, steps_per_epoch
from vfl.models.inputs import InputSchema
from vfl.models.registry import build_bottom, check_model_spec, model_spec
from vfl.training.optim import ScheduledOptimizer, build_optimizer
from vfl.training.precision import autocast, keep_narrow_layers_fp32
from vfl.training.snapshot import Snapshot, SnapshotTrainable
from vfl.training.step_timer import TIMER
from vfl.training.table_defaults import shard_rows, sized_bottom


def resolve_device(name: str) -> torch.device:
    """cpu, cuda, or auto (cuda when available)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device is cuda but torch sees no CUDA device (use cpu or auto)")
    return torch.device(name)


class BottomParty(SnapshotTrainable):
    """Forward a training batch of this party's rows; apply the gradient that comes back."""

    def __init__(self, cfg: PartyConfig, shard: PartyShard, device: torch.device, bottom: BottomConfig | None = None):
        """`bottom`: the bottom a checkpoint records (vfl/training/trained_model.py), built as it is; None: the
        config's, a table party's unset sizes filled from its shard's rows."""
        shard.check_columns(cfg.data.dense, cfg.data.categorical)
        self.name = cfg.party
        self.shard = shard
        self.device = device
        self.train_split = shard.split("train")
        self.valid_split = shard.split("valid")
        self.test_split = shard.split("test")
        if bottom is None:  # a table party's unset sizes from its shard's rows (a checkpoint records the result)
            bottom, _ = sized_bottom(cfg, shard_rows(shard.manifest))
        self.bottom_config = bottom  # what checkpoints record: prediction, serving, export and resume build it
        # with its numeric stats when on, and the numeric embeddings its schema declares
        schema = InputSchema.of_shard(shard, bottom.numeric_scaling)
        self.model = build_bottom(bottom, schema, cfg.train.seed, cfg.party).to(device)
        self.model_spec = model_spec(bottom)  # kept in checkpoints: resume refuses another model
        self.train_model = self.model  # with N ranks, the DistributedDataParallel wrapper of self.model
        total = cfg.train.epochs * steps_per_epoch(len(self.train_split), cfg.train.batch_size)
        self.optimizer = ScheduledOptimizer(build_optimizer(self.model, cfg.train, bottom=True), cfg.train, total)
        self.cut_dim = bottom.cut_dim
        self.precision = cfg.train.precision
        keep_narrow_layers_fp32(self.model, self.precision)
        self._pending: list[torch.Tensor | None] = []  # one cut per micro-batch forwarded since the last step
        self.best: Snapshot | None = None
        self.keep_average(cfg.train.ema_decay, self.precision)  # evaluation uses the averaged weights when on

    def forward_train(self, rows: np.ndarray) -> torch.Tensor:
        """The fp32 cut-layer activation of these training rows, kept for backward (one per micro-batch)."""
        self.model.train()
        with TIMER.part("data"):
            features = self.train_split.features(rows, self.device)
        with TIMER.part("bottom_forward"), autocast(self.precision, self.device):
            out = self.train_model(*features)
        out = out.float()  # the cut stays fp32 (on the wire too); a no-op in fp32
        self._pending.append(out)
        return out

    def accumulate_gradient(self, grad: torch.Tensor, part: int = 0) -> None:
        """Backpropagate d loss / d cut of micro-batch `part` through the bottom, adding to the parameters' grads."""
        pending = self._pending[part] if 0 <= part < len(self._pending) else None
        if pending is None:
            raise RuntimeError(f"{self.name}: gradient received for micro-batch {part} with no forward pass pending")
        if tuple(grad.shape) != tuple(pending.shape):
            raise ValueError(f"{self.name}: gradient shape {tuple(grad.shape)} != cut shape {tuple(pending.shape)}")
        with TIMER.part("backward"):
            pending.backward(grad.to(self.device))
        self._pending[part] = None

    def apply_gradient(self, grad: torch.Tensor) -> None:
        """Backpropagate d loss / d cut through the bottom and take an optimizer step."""
        self.accumulate_gradient(grad, 0)
        self.step_optimizer()

    def step_optimizer(self) -> None:
        """Optimizer step once every micro-batch's gradient reached this bottom (accumulated, or through autograd)."""
        self._pending = []
        self.optimizer.step()
        self.optimizer.zero_grad()

    def state(self) -> dict:
        return {**super().state(), "model_spec": self.model_spec}

    def load_state(self, state: dict, resume: bool = False) -> None:
        check_model_spec(state.get("model_spec"), self.model_spec, f"bottom of {self.name}")
        super().load_state(state, resume)

    @torch.no_grad()
    def forward_eval(self, rows: slice, split: str = "test") -> torch.Tensor:
        """The cut of rows of the valid or test split (or the train split, for the LP-2ST prior), in eval mode."""
        model = self.eval_model().eval()
        data = {"train": self.train_split, "valid": self.valid_split}.get(split, self.test_split)
        with autocast(self.precision, self.device):
            return model(*data.features(rows, self.device)).float()


def set_threads(threads: int, parties_on_host: int) -> int:
    """torch intra-op threads: the configured number, or the cores shared among co-located parties."""
    n = threads or max(1, (os.cpu_count() or 1) // max(parties_on_host, 1))
    torch.set_num_threads(n)
    return n
