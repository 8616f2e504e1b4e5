"""Regression label DP over real processes: train.task regression with rr_on_bins trains split between a leader and
a follower over tcp, the ledger charges the DP-histogram prior and the randomizer, selection reads the randomized
validation labels, and the follower's full view of that run (every gradient, replayed public seeds, votes over
epochs) recovers the labels no better than the noisy labels themselves.

Tolerance of the attack: the paired excess mean(|err_attack| - |err_y~|) over ~1.5k samples is compared with
Z = 6.5 standard errors (one-sided normal tail 4e-11 per candidate; with <= 300 candidates the false-failure bound
is < 1.2e-8)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privacy.attacks.follower_view_regression import follower_view_regression
from tests.support.party_processes import party_configs, run_split
from tests.support.regression_shards import regression_shards
from vfl.config.schema import LabelDPConfig
from vfl.data.shards import PartyShard
from vfl.data.task import Task
from vfl.labeldp.release import LabelDPRelease, leader_training_labels

Z = 6.5


@pytest.fixture(scope="module")
def shards_reg(shards_small, tmp_path_factory):
    return regression_shards(shards_small, tmp_path_factory.mktemp("regression_dp") / "shards")


def test_rr_on_bins_trains_split_charges_prior_and_randomizer_and_resists_the_follower_view(
    tmp_path, shards_reg, procs
):
    # Prepare: eps 2 with a quarter of it on the prior; the follower records every gradient it receives
    label_dp = {
        "eps": 2.0,
        "mechanism": "rr_on_bins",
        "clip": [0.0, 40.0],
        "bins": 24,
        "prior_eps_fraction": 0.25,
        "store_dir": str(tmp_path / "store"),
    }
    cfgs = party_configs(
        str(tmp_path),
        str(shards_reg),
        train={"epochs": 3, "seed": 0},
        leader_train={"task": "regression", "early_stopping": {"patience": 10}, "eval_every_steps": 5},
        privacy={"label_dp": label_dp},
        follower_debug={"record_gradients": str(tmp_path / "grads.npz")},
    )
    # Execute
    metrics = run_split(procs, cfgs)
    # Assert: the run trained and reported its release; the ledger holds the prior (0.5) and the randomizer (1.5)
    report = metrics["label_dp"]
    assert report["mechanism"] == "rr_on_bins" and report["new_release"] is True
    assert report["prior_eps"] == 0.5 and report["randomizer_eps"] == 1.5 and report["dataset_total_eps"] == 2.0
    ledger = json.loads((tmp_path / "store" / "ledger.json").read_text())
    assert sorted((r["mechanism"], r["eps"]) for r in ledger["releases"]) == [
        ("dp_histogram_prior", 0.5),
        ("rr_on_bins", 1.5),
    ]
    assert metrics["selection"]["metric"] == "rmse" and np.isfinite(metrics["test_rmse"])
    log = (tmp_path / "out" / "leader.log").read_text()
    assert "valid" in metrics["history"][0] and "label DP: rr_on_bins eps=2.0" in log
    assert "noise RMSE " in log and "flipped" not in log
    # Assert: the follower's full view against the release's own noisy labels (replayed at no cost)
    shard = PartyShard(str(shards_reg / "leader"))
    release = LabelDPRelease.from_config(LabelDPConfig(**label_dp), Task("regression"))
    noisy = leader_training_labels(release, shard)
    assert noisy.report["new_release"] is False and noisy.report["dataset_total_eps"] == 2.0
    train = shard.split("train")
    with np.load(tmp_path / "grads.npz") as z:
        record = {k: z[k] for k in ("ids", "epoch", "step", "grad")}
    truth = np.clip(train.labels.astype(np.float64), 0.0, 40.0)
    # the release's channel (its design, kept in the store) lets the replay read any public pick uniform
    from privacy.label.ledger.store import LabelDPStore
    from privacy.label.regression_mechanisms import grid_values, rr_on_bins_channel

    _, design = LabelDPStore(label_dp["store_dir"]).stored_prior(noisy.release)
    group = design[:, 0].astype(np.int64)
    outputs = design[np.unique(group, return_index=True)[1], 1]
    channel = {
        "values": grid_values(0.0, 40.0, 24),
        "outputs": outputs,
        "channel": rr_on_bins_channel(group, outputs.size, 1.5),
    }
    view = follower_view_regression(
        record, train.ids, truth, noisy.labels, 2.0, (0.0, 40.0), follower_seed=0, design=channel
    )
    assert view["excess"] >= -Z * view["excess_se"], view
    assert view["candidates"] > 200 and view["rows"] == train.ids.size
