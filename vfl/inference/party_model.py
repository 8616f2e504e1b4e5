"""A trained party's model for export and online scoring, loaded as batch prediction loads it.

Its checkpoint, the leader's scoring head, and its prepared table indexed by sample id (online scoring looks rows up
there).

The checkpoint is `<output.dir>/checkpoints/<party>_final.pt`, which holds the step that model selection chose
(vfl/training/selection.py restores it before the final save). Inference runs in float32 and eval mode.
"""

from __future__ import annotations

import numpy as np


class ModelLoadError(RuntimeError):
    """The party's trained model cannot be loaded (a one-line reason)."""


def run_arguments(prog: str, description: str):
    """An argument parser with what every command on a trained party takes: --config, --run, --checkpoint, --data,
    --keys (predict, export, serve; each adds its own flags, key.path=value overrides last)."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", required=True, help="the party YAML of the training run")
    ap.add_argument(
        "--run",
        default=None,
        help="the training run's output.dir (its checkpoints/; overrides the YAML); its shards/<party> and keys/ "
        "are used unless --data / --keys say otherwise",
    )
    ap.add_argument("--checkpoint", default=None, help="checkpoint (default: RUN/checkpoints/<party>_final.pt)")
    ap.add_argument("--data", default=None, help="this party's shard directory (overrides data.path)")
    ap.add_argument("--keys", default=None, metavar="DIR", help="the run's CurveZMQ key directory (as for training)")
    return ap


def load_party_model(cfg, shard, checkpoint: str, need_run: bool = True):
    """(bottom, top or None, checkpoint, run record or None) of the party from its checkpoint, loaded as batch
    prediction loads it (vfl/inference/trained_party.py), on the CPU in float32 and eval mode without grads.
    need_run: the checkpoint must record its training run (serving compares it across parties; export does not)."""
    import torch

    from vfl.inference.trained_party import read_party_checkpoint, trained_models

    try:
        ckpt, record = read_party_checkpoint(cfg, checkpoint, need_run)
    except (FileNotFoundError, ValueError) as e:
        raise ModelLoadError(str(e)) from None
    party, trainer = trained_models(cfg, shard, ckpt, record, torch.device("cpu"))
    top = None
    if trainer is not None:
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
    """A party's prepared rows (every split of its shard) found by sample id. The feature arrays stay as the shard
    holds them (memory-mapped when large: the page cache serves the rows asked for); the index is the ids sorted
    once (16 bytes an id: 720 MiB for the 45M rows of Criteo's full day set), searched per request."""

    def __init__(self, shard=None, parts=None, where: str = ""):
        """The rows of every split of `shard`, or of `parts` (objects with ids, dense, dense_missing, cat arrays;
        `where` names them in the error of an id held twice)."""
        from vfl.splits import SPLITS

        self.parts = [shard.split(s) for s in SPLITS] if shard is not None else list(parts)
        ids = np.concatenate([np.zeros(0, np.int64), *(np.asarray(p.ids, np.int64) for p in self.parts)])
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])
        self.order = np.argsort(ids, kind="stable")
        self.sorted_ids = ids[self.order]
        if self.sorted_ids.size > 1 and bool(np.any(self.sorted_ids[1:] == self.sorted_ids[:-1])):
            where = where or f"shard {shard.path}"
            raise ModelLoadError(f"{where}: a sample id appears twice" + ("" if parts else " across its splits"))

    def __len__(self) -> int:
        return int(self.sorted_ids.size)

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The row of each id across the splits (-1 where the table lacks it)."""
        ids = np.asarray(ids, np.int64)
        if not self.sorted_ids.size:
            return np.full(ids.shape, -1, np.int64)
        pos = np.minimum(np.searchsorted(self.sorted_ids, ids), self.sorted_ids.size - 1)
        return np.where(self.sorted_ids[pos] == ids, self.order[pos], -1)

    def features(self, rows: np.ndarray):
        """(dense float32, dense_missing float32, cat int64) tensors of these rows, in their order (row -1: zeros, for
        an unknown id)."""
        import torch

        return tuple(torch.from_numpy(o) for o in self.arrays(rows))

    def arrays(self, rows: np.ndarray) -> list[np.ndarray]:
        """features() as numpy arrays."""
        rows = np.asarray(rows, np.int64)
        first = self.parts[0]
        out = [
            np.zeros((rows.size, *np.shape(first.dense)[1:]), np.float32),
            np.zeros((rows.size, *np.shape(first.dense_missing)[1:]), np.float32),
            np.zeros((rows.size, *np.shape(first.cat)[1:]), np.int64),
        ]
        for k, part in enumerate(self.parts):
            at = np.flatnonzero((rows >= self.starts[k]) & (rows < self.starts[k + 1]))
            if at.size:
                local = rows[at] - self.starts[k]
                for o, arr in zip(out, (part.dense, part.dense_missing, part.cat)):
                    o[at] = arr[local]  # a memory map or a row subset reads only these rows
        return out


def current_rows(table):
    """The rows one request is answered from: a serving_rows.ServingRows' latest load, else the fixed table itself
    (anything with rows_of and features)."""
    snapshot = getattr(table, "snapshot", None)
    return snapshot() if snapshot is not None else table
