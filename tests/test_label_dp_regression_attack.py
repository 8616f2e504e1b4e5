"""The regression follower-view attack (privacy/attacks/follower_view_regression.py) on recorded gradients of a
linear top: against the keyed once-per-release labels of each mechanism it gets no closer to the truth than the
noisy labels (while recovering them), and it has power: labels re-randomized every epoch (the vote averages the noise
away) and Laplace noise drawn from a public seed (the replay cancels it) are both caught.

Tolerance: the paired excess mean(|err_attack| - |err_y~|) over 20k samples, Z = 6.5 standard errors (one-sided
normal tail 4e-11 per candidate; <= 300 candidates keep a false failure below 1.2e-8). The leaks move the excess by
more than 20 standard errors."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from privacy.attacks.follower_view_regression import follower_view_regression
from privacy.label.regression_mechanisms import laplace_label
from privacy.label.store import LabelDPStore, dataset_id
from privacy.public_hash import uniform_from_ids
from vfl.config.schema import LabelDPConfig
from vfl.data.task import Task
from vfl.labeldp.release import LabelDPRelease, LabelKey, training_labels

Z = 6.5
CLIP = (0.0, 40.0)
N = 20_000


@pytest.fixture(scope="module")
def truth():
    return np.clip(np.random.default_rng(7).normal(20, 5, N), *CLIP), np.arange(N, dtype=np.int64) * 3 + 11


def _record(ids, noisy_per_epoch: list[np.ndarray], batch: int = 512) -> dict:
    """What a follower records under a linear top and MSE: per sample (prediction - y~_std) times the top's weights
    on its cut (scaled per step), the prediction moving from epoch to epoch."""
    rec = {"ids": [], "epoch": [], "step": [], "grad": []}
    rng = np.random.default_rng(0)
    for e, noisy in enumerate(noisy_per_epoch):
        std = (noisy - noisy.mean()) / noisy.std()
        order = rng.permutation(ids.size)
        for s in range(0, ids.size, batch):
            r = order[s : s + batch]
            resid = rng.uniform(-0.3, 0.3, r.size) - std[r]
            w = np.array([1.0, 0.5]) * rng.uniform(0.5, 2.0)
            rec["ids"].append(ids[r])
            rec["epoch"].append(np.full(r.size, e))
            rec["step"].append(np.full(r.size, s // batch))
            rec["grad"].append(resid[:, None] * w[None, :] * (2.0 / r.size))
    return {k: np.concatenate(v) for k, v in rec.items()}


@pytest.mark.parametrize("mechanism", ["laplace", "rr_on_bins", "unbiased"])
def test_keyed_once_per_release_labels_are_not_recovered_beyond_the_noisy_labels(tmp_path, truth, mechanism):
    # Prepare: the leader's release at eps 1; 5 epochs of gradients of the same noisy labels
    y, ids = truth
    store = LabelDPStore(str(tmp_path / "store"))
    key = LabelKey(store.key(), store, dataset_id(hashlib.sha256(b"attack").hexdigest()), {})
    release = LabelDPRelease.from_config(LabelDPConfig(eps=1.0, mechanism=mechanism, clip=CLIP), Task("regression"))
    noisy = training_labels(y, ids, release, key, real_valued=True).labels.astype(np.float64)
    record = _record(ids, [noisy] * 5)
    # Execute
    view = follower_view_regression(record, ids, y, noisy, 1.0, CLIP, follower_seed=0)
    # Assert: step 1 recovers the noisy label, and nothing gets closer to the truth than it
    assert view["noisy_label_correlation"] > 0.9, view
    assert view["excess"] >= -Z * view["excess_se"], view
    assert view["candidates"] > 200


def test_labels_re_randomized_every_epoch_are_caught_by_the_vote(truth):
    # Prepare: a leader drawing fresh Laplace noise every epoch (what a once-per-release rule forbids), at eps 4
    # (noise sd 14 against a label sd of 5: 9 epochs average it to 4.7)
    y, ids = truth
    rng = np.random.default_rng(8)
    epochs = [laplace_label(y, *CLIP, 4.0, *rng.random((3, N))) for _ in range(9)]
    # Execute
    view = follower_view_regression(_record(ids, epochs), ids, y, epochs[0], 4.0, CLIP, follower_seed=0)
    # Assert: the vote over 9 epochs is far closer to the truth than one epoch's noisy label
    assert view["excess"] < -20 * view["excess_se"], view
    assert view["best"].startswith("gradient residual")


def test_laplace_noise_from_a_public_seed_is_cancelled_by_the_replay(truth):
    # Prepare: a leader drawing its Laplace uniforms from train.seed and public salts instead of its key
    y, ids = truth
    u = [uniform_from_ids(ids, 0, salt) for salt in (0x1AB3, 0x1AB1, 0x1AB2)]
    noisy = laplace_label(y, *CLIP, 1.0, *u)
    # Execute
    view = follower_view_regression(_record(ids, [noisy] * 3), ids, y, noisy, 1.0, CLIP, follower_seed=0)
    # Assert: the replayed noise cancels, and the scorer names the seed and salts
    assert view["excess"] < -20 * view["excess_se"], view
    assert "seed=0, salts=0x1ab1, 0x1ab2" in view["best"]
