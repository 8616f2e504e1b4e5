"""Every built-in bottom trains split exactly as centralized: DeepFM, DCN-v2 and MLP bottoms (one per party of a
three-party run) under the interaction top, in fp32, bf16, with micro-batches and with 2 ranks per party."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.party_processes import party_configs, run_centralized, run_split
from tests.support.ranks import start_ranks
from tests.support.tolerances import BF16_LOSS_RTOL

FOLLOWERS = ("follower0", "follower1")
# one built-in per party; the leader's DCN-v2 low-rank and stacked, so both cross layers and structures run
BOTTOMS = {
    "leader": {"name": "deepfm", "embedding_dim": 8, "hidden": [32], "cut_dim": 3},
    "follower0": {
        "name": "dcn_v2",
        "embedding_dim": 4,
        "hidden": [16],
        "cut_dim": 4,
        "options": {"cross_layers": 2, "low_rank": 8, "structure": "stacked"},
    },
    "follower1": {"name": "mlp", "embedding_dim": 4, "hidden": [16], "cut_dim": 2},
}
TOP = {"name": "interaction", "options": {"rank": 4}}


def _configs(tmp, shards, train, top=TOP):
    train = {"epochs": 1, "batch_size": 400, **train}  # 24 steps of the 9.6k training rows
    return party_configs(str(tmp), str(shards), followers=FOLLOWERS, train=train, top=top, bottoms=BOTTOMS)


@pytest.mark.parametrize(
    "train, rtol",
    [
        pytest.param({}, 1e-5, id="fp32"),  # the tolerance of wide_deep's split == centralized test
        # slow: bf16 split == centralized runs by default in tests/training/test_compute_options.py
        pytest.param({"precision": "bf16"}, BF16_LOSS_RTOL, id="bf16", marks=pytest.mark.slow),
    ],
)
def test_every_builtin_bottom_trains_split_equal_to_centralized(tmp_path, shards_three, procs, train, rtol):
    # Prepare: leader deepfm, follower0 dcn_v2, follower1 mlp, an interaction top over their cuts
    cfgs = _configs(tmp_path, shards_three, train)
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the same per-step losses as the centralized reference; the model learnt something
    assert split["cut_dims"] == {"leader": 3, "follower0": 4, "follower1": 2}
    a, b = np.array(split["step_losses"]), np.array(central["step_losses"])
    assert a.size == b.size == split["steps"] > 20
    np.testing.assert_allclose(a, b, rtol=rtol)
    assert abs(split["test_auc"] - central["test_auc"]) < (1e-4 if rtol <= 1e-5 else 2e-3)
    assert split["test_auc"] > 0.6


@pytest.mark.slow  # every bottom runs split == centralized by default above, micro-batches in test_compute_options
def test_deepfm_and_parallel_dcn_v2_with_microbatches_equal_centralized_exactly(tmp_path, shards_small, procs):
    # Prepare: two parties (two followers with micro-batches: tests/training/test_microbatch_followers.py): the leader's
    # DCN-v2 full-rank and parallel, the follower's DeepFM
    bottoms = {
        "leader": {"name": "dcn_v2", "embedding_dim": 4, "hidden": [16], "cut_dim": 3, "options": {"cross_layers": 2}},
        "follower0": BOTTOMS["leader"],
    }
    train = {"epochs": 1, "batch_size": 400, "microbatches": 3}
    cfgs = party_configs(str(tmp_path), str(shards_small), train=train, top=TOP, bottoms=bottoms)
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the same micro-batches in the same order: the very same float32 losses
    assert split["microbatches"] == 3 and split["steps"] > 20
    assert split["step_losses"] == central["step_losses"]


@pytest.mark.slow  # ranks run split == one rank by default in test_ranks, every bottom on two ranks in memory in
# test_numeric_only_ranks
def test_every_builtin_bottom_with_two_ranks_per_party_equals_centralized(tmp_path, shards_three, procs):
    # Prepare: the same three models, each party as 2 ranks (an odd batch: ranks get 192 / 191 rows)
    train = {"batch_size": 383, "eval_every_steps": 5}
    cfgs = _configs(tmp_path, shards_three, train)
    # Execute
    for name in start_ranks(procs, cfgs, 2):
        code, _, err = procs.wait(name, timeout=240)
        assert code == 0, f"{name} failed: {err[-2000:]}"
    split = json.loads((tmp_path / "out" / "metrics.json").read_text())
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: DDP's averaged gradients give the one-process steps to float tolerance (as for wide_deep)
    assert split["ranks"] == 2
    a, b = np.array(split["step_losses"]), np.array(central["step_losses"])
    assert a.size == b.size == split["steps"] > 20
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert abs(split["test_auc"] - central["test_auc"]) < 1e-3
