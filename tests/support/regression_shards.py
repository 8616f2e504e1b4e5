"""Test helper: a regression shard made from a prepared binary one (the leader's labels rewritten as real values)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np

from vfl.splits import SPLITS


def regression_shards(binary: os.PathLike, out: os.PathLike, seed: int = 0) -> pathlib.Path:
    """Copy the prepared shards `binary` (leader + followers) to `out` and give the leader a float32 label: a smooth
    function of the leader's and the followers' dense columns (standardized), in units around 20 with sd ~5, plus
    noise of sd 1.5, so the split model can learn it and needs every party; the manifest's label says regression."""
    out = pathlib.Path(out)
    shutil.copytree(binary, out)
    parties = sorted(p.name for p in out.iterdir() if (p / "manifest.json").exists())
    rng = np.random.default_rng(seed)
    weights = {
        p: rng.normal(size=json.loads((out / p / "manifest.json").read_text())["party"]["dense"].__len__())
        for p in parties
    }
    for split in SPLITS:
        ids = np.load(out / "leader" / split / "ids.npy")
        score = np.zeros(ids.size)
        for p in parties:
            pid = np.load(out / p / split / "ids.npy")
            dense = np.load(out / p / split / "dense.npy").astype(np.float64)
            dense = (dense - dense.mean(0)) / np.maximum(dense.std(0), 1e-6)
            at = np.searchsorted(pid, ids)
            score += np.tanh(dense[np.clip(at, 0, pid.size - 1)] @ weights[p] / np.sqrt(weights[p].size))
        y = 20.0 + 4.0 * score + rng.normal(scale=1.5, size=ids.size)
        np.save(out / "leader" / split / "labels.npy", y.astype(np.float32))
    path = out / "leader" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["label"] = {"task": "regression"}
    manifest.pop("bayes_test_auc", None)
    path.write_text(json.dumps(manifest, indent=2))
    return out
