"""benchmarks/examples.py's baselines (linear and boosted trees, on the leader's columns and on all parties' pooled)
train and score on the split model's split. The caravan data come from ISLP, which scripts/setup_examples.sh
installs; without it the test skips."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from benchmarks import examples as bench
from vfl.data.ids import ids64
from vfl.data.prepare import PrepareOptions, split_of

needs_islp = pytest.mark.skipif(
    importlib.util.find_spec("ISLP") is None, reason="ISLP absent (bash scripts/setup_examples.sh)"
)


@needs_islp
def test_the_baselines_use_the_split_models_split(tmp_path):
    # Execute
    report = bench.bench_example("caravan", tmp_path, seed=0, test_fraction=0.1, valid_fraction=0.1)
    ids = pd.read_csv(tmp_path / "caravan" / "raw" / "insurer.csv", usecols=["id"], dtype=str)["id"]
    split = split_of(ids64(ids.to_numpy()), PrepareOptions(seed=0))
    # Assert
    assert report["split_rows"] == {s: int((split == i).sum()) for i, s in enumerate(("train", "valid", "test"))}
    assert {(r["features"], r["model"]) for r in report["results"]} == {
        (f, m) for f in ("leader", "pooled") for m in ("linear", "hgb")
    }
    assert all(0.6 < r["auc"] < 0.9 for r in report["results"])
    assert report["columns"]["broker"][0] == "MOSTYPE" and np.isclose(report["positive_rate"], 348 / 5822)
