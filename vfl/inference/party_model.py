"""A trained party's model for export and online scoring: its checkpoint loaded as batch prediction loads it, the
leader's scoring head, and its prepared table indexed by sample id (online scoring looks rows up there).

The checkpoint is `<output.dir>/checkpoints/<party>_final.pt`, which holds the step that model selection chose
(vfl/training/selection.py restores it before the final save). Inference runs in float32 and eval mode.
"""

from __future__ import annotations

import numpy as np


class ModelLoadError(RuntimeError):
    """The party's trained model cannot be loaded (a one-line reason)."""


def load_party_model(cfg, shard, checkpoint: str, need_run: bool = True):
    """(bottom, top or None, checkpoint, run record or None) of the party from its checkpoint, loaded as batch
    prediction loads it (BottomParty and TopTrainer, vfl/inference/predict_leader.py), in eval mode without grads.
    need_run: the checkpoint must record its training run (serving compares it across parties; export does not)."""
    import torch

    from vfl.inference.fingerprint import check_own, key_fingerprints, load_predict_checkpoint
    from vfl.training.party import BottomParty
    from vfl.training.top import TopTrainer

    try:
        ckpt = load_predict_checkpoint(checkpoint, cfg.party, ("bottom", "top") if cfg.is_leader else ("bottom",))
        saved = (ckpt.get("extra") or {}).get("run")
        record = check_own(saved, cfg, checkpoint, key_fingerprints(cfg)) if need_run or saved else None
    except (FileNotFoundError, ValueError) as e:
        raise ModelLoadError(str(e)) from None
    device = torch.device("cpu")
    party = BottomParty(cfg, shard, device)
    party.load_state(ckpt["state"]["bottom"])
    top = None
    if cfg.is_leader:
        state = ckpt["state"]["top"]
        width = next(v for v in state["model"].values() if getattr(v, "ndim", 0) == 2).shape[1]
        if record is not None:  # each party's cut, leader first
            dims = tuple(int(record["cut_dims"][p]) for p in record["parties"])
        else:  # an older checkpoint: one follower has the rest of the width; several, the total (linear, mlp tops)
            own = cfg.model.bottom.cut_dim
            dims = (own, int(width) - own) if len(cfg.network.followers) == 1 else int(width)
        target = state.get("target")
        trainer = TopTrainer(cfg.train, cfg.model.top, dims, device, None, 1, shard.task, target and tuple(target))
        trainer.load_state(state)
        top = trainer.model
        top.target = trainer.target or (0.0, 1.0)
    for module in (party.model, top):
        if module is not None:
            module.float().eval().requires_grad_(False)
    return party.model, top, ckpt, record


def scorer(bottom, top, task):
    """The leader's module: its bottom, the followers' cuts, the top and the training run's output mapping."""
    import torch
    from torch import nn

    class LeaderScorer(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom, self.top = bottom, top
            self.kind = task.kind
            self.mean, self.sd = float(top.target[0]), float(top.target[1])

        def head(self, own_cut, follower_cuts):
            """The score from the leader's cut and the followers' (concatenated in network.followers order)."""
            logits = self.top(torch.cat([own_cut, follower_cuts], dim=1)).float()
            if self.kind == "regression":  # vfl/training/top.py TopTrainer.predict
                return logits.double() * self.sd + self.mean
            if self.kind == "multiclass":
                return torch.softmax(logits.double(), dim=1)
            return torch.sigmoid(logits)

        def forward(self, dense, dense_missing, cat, follower_cuts):
            return self.head(self.bottom(dense, dense_missing, cat), follower_cuts)

    return LeaderScorer().eval()


def top_in_dim(top) -> int:
    """The width of the concatenated cuts the top reads (its first matrix's input width)."""
    return int(next(p for p in top.parameters() if p.ndim == 2).shape[1])


class RowTable:
    """A party's prepared rows (every split of its shard) indexed by sample id: features of any ids in one gather."""

    def __init__(self, shard):
        import pandas as pd

        from vfl.splits import SPLITS

        parts = [shard.split(s) for s in SPLITS]
        self.ids = np.concatenate([np.asarray(p.ids, np.int64) for p in parts])
        self.dense = np.ascontiguousarray(np.concatenate([np.asarray(p.dense) for p in parts]), np.float32)
        self.dense_missing = np.ascontiguousarray(
            np.concatenate([np.asarray(p.dense_missing) for p in parts]), np.float32
        )
        self.cat = np.ascontiguousarray(np.concatenate([np.asarray(p.cat) for p in parts]), np.int64)
        self._index = pd.Index(self.ids)
        if not self._index.is_unique:
            raise ModelLoadError(f"shard {shard.path}: a sample id appears twice across its splits")

    def __len__(self) -> int:
        return int(self.ids.size)

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The row of each id (-1 where the table lacks it)."""
        return self._index.get_indexer(np.asarray(ids, np.int64))

    def features(self, rows: np.ndarray):
        """(dense, dense_missing, cat) tensors of these rows (row -1: zeros, for an unknown id)."""
        import torch

        safe = np.where(rows >= 0, rows, 0)
        dense, missing, cat = self.dense[safe], self.dense_missing[safe], self.cat[safe]
        unknown = rows < 0
        if unknown.any():
            dense[unknown], missing[unknown], cat[unknown] = 0.0, 0.0, 0
        return torch.from_numpy(dense), torch.from_numpy(missing), torch.from_numpy(cat)
