"""The synthetic generator writes Criteo-shaped raw data whose signal needs both parties."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score

from vfl.data.readers.criteo_tsv import read_blocks
from vfl.data.readers.read_stats import ReadStats
from vfl.data.synth.criteo import SyntheticCriteo


def _read(path):
    blocks = list(read_blocks(str(path), True, ReadStats()))
    cat = lambda f: np.concatenate([getattr(b, f) for b in blocks])  # noqa: E731
    return {f: cat(f) for f in ("label", "dense", "dense_missing", "cat_key", "cat_missing")}


def test_marginals_look_like_criteo(synth_small):
    # Prepare / Execute
    d = _read(synth_small)
    n = d["label"].size
    # Assert (12000 rows; each bound is > 6 binomial sd wide: false failure < 1e-8)
    assert n == 12_000
    assert abs(d["label"].mean() - 0.25) < 0.03
    assert abs(d["dense_missing"][:, 11].mean() - 0.78) < 0.03  # I12
    assert abs(d["cat_missing"][:, 21].mean() - 0.82) < 0.03  # C22
    assert d["dense"][:, 1].min() == -1  # I2 goes negative
    assert np.percentile(d["dense"][:, 4], 99) > 20 * np.median(d["dense"][:, 4])  # heavy tail (I5)
    # Zipf: the most frequent C1 value covers far more rows than uniform would
    _, counts = np.unique(d["cat_key"][:, 0], return_counts=True)
    assert counts.max() / n > 0.05 and counts.size > 100


def test_truth_file_matches_labels(synth_small):
    # Prepare
    p = np.load(str(synth_small) + ".truth.npy")
    y = _read(synth_small)["label"]
    # Execute
    auc = roc_auc_score(y, p)
    # Assert
    assert p.shape == y.shape and p.min() > 0 and p.max() < 1
    assert abs(p.mean() - y.mean()) < 0.03
    assert auc > 0.75


def test_signal_needs_both_parties_and_has_interactions():
    # Prepare
    world = SyntheticCriteo(seed=1, max_vocab=2_000, label_seed=11)
    z = world._latents(np.random.default_rng(5), 50_000)
    full = world._logit(z)
    y = np.random.default_rng(6).random(full.size) < 1 / (1 + np.exp(-full))

    def partial(keep_cat, keep_dense, pairs=True):
        zz = {k: v.copy() for k, v in z.items()}
        zz["cat_missing"][:, ~keep_cat] = True
        zz["dense_missing"][:, ~keep_dense] = True
        return world._logit(zz)

    lead_c, lead_d = np.arange(26) < 13, np.arange(13) < 7
    # Execute
    auc_full = roc_auc_score(y, full)
    auc_leader = roc_auc_score(y, partial(lead_c, lead_d))
    auc_follower = roc_auc_score(y, partial(~lead_c, ~lead_d))
    saved = world.pair_gain
    world.pair_gain = [0.0] * len(saved)
    auc_no_pairs = roc_auc_score(y, world._logit(z))
    # Assert
    assert auc_full > auc_leader + 0.05 and auc_full > auc_follower + 0.05
    assert auc_full > auc_no_pairs + 0.01


def test_synth_command_rejects_bad_sizes(tmp_path):
    import subprocess
    import sys

    from tests.support.paths import REPO

    r = subprocess.run(
        [sys.executable, "-m", "vfl.data", "synth", "--rows", "0", "--out", str(tmp_path / "x.tsv")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--rows must be >= 1, got 0" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.tsv").exists()


def _ids(path):
    return np.concatenate([b.sample_id for b in read_blocks(str(path), True, ReadStats())])


def test_every_generated_file_holds_its_own_people(tmp_path):
    """Synthetic files draw their ids per file (issue 30): the ledger must not count two generated files as one
    set of customers, while a file written with an explicit label seed stays reproducible."""
    from vfl.data.synth.criteo import write_synthetic

    # Prepare / Execute: two files with the OS's id base, two with the same explicit label seed
    for name, label_seed in (("a", None), ("b", None), ("c", 5), ("d", 5)):
        write_synthetic(str(tmp_path / f"{name}.tsv"), 2_000, seed=0, max_vocab=200, label_seed=label_seed)
    a, b, c, d = (_ids(tmp_path / f"{n}.tsv") for n in "abcd")
    # Assert: distinct within a file, disjoint across fresh files, identical for the same explicit label seed
    assert np.unique(a).size == a.size == 2_000 and np.unique(b).size == 2_000
    assert np.intersect1d(a, b).size == 0  # 2,000^2 pairs of 64-bit ids: a chance meeting has p < 1e-12
    assert np.array_equal(c, d) and np.intersect1d(a, c).size == 0
