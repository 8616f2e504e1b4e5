"""Keyed label DP: each sample's noisy label is a function of the leader's key, the release and its id (binary and
K-ary RR), drawn afresh for another label set or eps, and a replay of public draws fails on it. Statistical checks use
5.5-sigma binomial bounds (false failure < 4e-8 each) or Hoeffding bounds at beta = 1e-8 per bin; the whole module
(with the K = 10 keyed k-ary RR checks: 40 binomial bounds and 20 histogram bins) fails by chance with probability
< 3e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy import LabelDP, keep_probability
from privacy.label.randomized_response import kary_rr
from privacy.label.release_draws import randomize_binary_once, randomize_classes_once
from privacy.public_hash import uniform_from_ids
from tests.support.dp_stats import binomial_tolerance, dp_histogram_violations

N = 200_000


def test_release_noise_is_a_function_of_key_release_and_sample_id():
    # Prepare
    ids = np.arange(10_000) * 7 + 3
    labels = np.random.default_rng(13).integers(0, 2, ids.size)
    perm = np.random.default_rng(14).permutation(ids.size)
    key, other_key = bytes(range(32)), bytes(range(1, 33))
    # Execute
    full = randomize_binary_once(labels, ids, 1.0, key, "r1")
    shuffled = randomize_binary_once(labels[perm], ids[perm], 1.0, key, "r1")
    resumed = randomize_binary_once(labels[5000:], ids[5000:], 1.0, key, "r1")
    other_key_run = randomize_binary_once(labels, ids, 1.0, other_key, "r1")
    other_release = randomize_binary_once(labels, ids, 1.0, key, "r2")
    # Assert: same noisy label for the same (key, release, id), whatever order or subset; another key
    # or release disagrees at 2 rho (1 - rho) = 0.393 (sd 0.005 at n = 10k: > 0.3 is a 19-sigma margin)
    np.testing.assert_array_equal(full[perm], shuffled)
    np.testing.assert_array_equal(full[5000:], resumed)
    assert np.mean(full != other_key_run) > 0.3
    assert np.mean(full != other_release) > 0.3


def test_keyed_labeldp_gives_each_sample_the_same_noisy_label_on_every_call(tmp_path):
    # Prepare
    ids = np.arange(50_000) * 3 + 1
    labels = np.random.default_rng(20).integers(0, 2, ids.size)
    perm = np.random.default_rng(21).permutation(ids.size)
    dp = LabelDP(1.0, dataset="clicks", store_dir=str(tmp_path))
    # Execute
    first = dp(labels, ids=ids)
    again = LabelDP(1.0, dataset="clicks", store_dir=str(tmp_path))(labels[perm], ids=ids[perm])
    # Assert: one release, reproduced exactly, flipping at rho; the ledger counts its eps once
    rho = 1 / (1 + math.e)
    np.testing.assert_array_equal(first[perm], again)
    assert abs(np.mean(first != labels) - rho) < binomial_tolerance(ids.size, rho)
    assert dp.last_release["dataset_total_eps"] == 1.0 and dp.privacy_cost() == {"eps": 1.0, "delta": 0.0}


@pytest.mark.filterwarnings("ignore:label DP. dataset")
def test_keyed_labeldp_draws_independently_for_another_label_set_or_eps(tmp_path):
    # Prepare
    ids = np.arange(50_000)
    labels = np.random.default_rng(22).integers(0, 2, ids.size)
    # Execute
    clicks = LabelDP(1.0, dataset="clicks", store_dir=str(tmp_path))(labels, ids=ids)
    buys = LabelDP(1.0, dataset="purchases", store_dir=str(tmp_path))(labels, ids=ids)
    dp2 = LabelDP(2.0, dataset="clicks", store_dir=str(tmp_path))
    clicks2 = dp2(labels, ids=ids)
    # Assert: independent draws disagree at r1 (1 - r2) + r2 (1 - r1)
    r1, r2 = 1 / (1 + math.e), 1 / (1 + math.e**2)
    for other, ra in ((buys, r1), (clicks2, r2)):
        want = r1 * (1 - ra) + ra * (1 - r1)
        assert abs(np.mean(clicks != other) - want) < binomial_tolerance(ids.size, want)
    assert dp2.last_release["dataset_total_eps"] == 4.0  # clicks 1 + 2, purchases 1: same ids, charged together


def test_two_classes_are_one_release_whatever_their_encoding():
    # Prepare
    ids = np.arange(5_000)
    cls = np.random.default_rng(23).integers(0, 2, ids.size)
    key = bytes(range(32))
    # Execute
    binary = LabelDP(1.0, dataset="d", key=key)(cls, ids=ids)
    onehot = LabelDP(1.0, dataset="d", key=key)(np.eye(2)[cls], ids=ids).argmax(axis=1)
    classes = LabelDP(1.0, dataset="d", key=key, num_classes=2)(cls, ids=ids)
    # Assert
    np.testing.assert_array_equal(binary, onehot)
    np.testing.assert_array_equal(binary, classes)


def test_keyed_class_ids_keep_their_class_with_p1():
    # Prepare
    k, eps = 5, 1.0
    ids = np.arange(N)
    cls = np.random.default_rng(24).integers(0, k, N)
    # Execute
    out = LabelDP(eps, dataset="d", key=bytes(32), num_classes=k)(cls, ids=ids)
    # Assert
    p1 = math.exp(eps) / (k - 1 + math.exp(eps))
    assert out.dtype == cls.dtype and out.min() >= 0 and out.max() < k
    assert abs(np.mean(out == cls) - p1) < binomial_tolerance(N, p1)


@pytest.mark.parametrize(
    "kwargs, call, needle",
    [
        ({}, {"ids": np.arange(4)}, "dataset=NAME"),
        ({"dataset": "d", "key": bytes(32)}, {"ids": np.arange(3)}, "ids must be 4 integer sample ids"),
        ({"dataset": "d", "key": bytes(32)}, {"ids": np.array([0, 1, 1, 2])}, "ids must be unique"),
        ({"dataset": "d", "key": b"short"}, None, "32 secret random bytes"),
        ({"num_classes": 1}, None, "num_classes must be an integer >= 2"),
        ({"budget": 0}, None, "budget must be > 0"),
        ({"budget": "8"}, None, "budget must be a number > 0 or None (no cap), got str '8'"),
        ({"budget": True}, None, "budget must be a number > 0 or None (no cap), got bool True"),
        ({"budget": 5, "key": bytes(32)}, None, "budget=5 is enforced by the store's ledger"),
        ({"budget": 5}, None, "fresh noise is recorded nowhere"),
    ],
)
def test_keyed_labeldp_rejects_bad_arguments_naming_them(kwargs, call, needle):
    with pytest.raises(ValueError) as e:
        LabelDP(1.0, **kwargs)(np.array([0, 1, 1, 0]), **(call or {}))
    assert needle in str(e.value)


# -- K = 10: the k-ary RR release the multi-class trainer uses (randomize_classes_once, leader's PRF) --------
K10 = 10


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_keyed_kary_rr_keeps_with_p1_and_moves_uniformly_for_ten_classes(eps):
    # Prepare
    ids = np.arange(N) * 3 + 11
    cls = np.random.default_rng(30).integers(0, K10, N)
    # Execute
    out = randomize_classes_once(cls, ids, K10, eps, bytes(range(32)), "k10-release")
    # Assert: keep rate p1 and each of the 9 shifts at (1 - p1)/9, every one within 5.5 sigma
    # (10 checks per eps at < 4e-8 each)
    p1 = math.exp(eps) / (K10 - 1 + math.exp(eps))
    assert keep_probability(eps, K10) == pytest.approx(p1)
    assert abs(np.mean(out == cls) - p1) < binomial_tolerance(N, p1)
    moved_by = (out - cls) % K10
    q = (1 - p1) / (K10 - 1)
    for shift in range(1, K10):
        assert abs(np.mean(moved_by == shift) - q) < binomial_tolerance(N, q)


def test_dp_histogram_on_neighbouring_ten_class_labels():
    # Prepare: one record's label is 0 in one dataset and 1 in its neighbour; the keyed draws of N
    # distinct sample ids stand in for N independent runs of the mechanism on that record
    eps, ids = 1.0, np.arange(N)
    key = bytes(range(32))
    # Execute
    out_a = randomize_classes_once(np.zeros(N, np.int64), ids, K10, eps, key, "hist-a")
    out_b = randomize_classes_once(np.ones(N, np.int64), ids, K10, eps, key, "hist-b")
    # Assert: P_a(o) <= e^eps P_b(o) and back on all 10 outputs (false failure <= 2 * 10 * 1e-8)
    assert dp_histogram_violations(out_a, out_b, eps, bins=K10) == []


def test_ten_class_dp_histogram_test_has_power_against_a_miscalibrated_mechanism():
    # Prepare: a k-ary RR that claims eps = 1 but keeps with the p1 of eps = 2 is only 2-DP
    eps, ids = 1.0, np.arange(N)
    key = bytes(range(32))
    # Execute
    out_a = randomize_classes_once(np.zeros(N, np.int64), ids, K10, 2 * eps, key, "power-a")
    out_b = randomize_classes_once(np.ones(N, np.int64), ids, K10, 2 * eps, key, "power-b")
    # Assert: the true ratio e^2 exceeds e^1 by far more than the Hoeffding slack at N = 200k
    assert dp_histogram_violations(out_a, out_b, eps, bins=K10) != []


def test_kary_rr_is_exact_without_noise_and_near_uniform_at_the_smallest_eps():
    # Prepare
    ids = np.arange(N)
    cls = np.random.default_rng(31).integers(0, K10, N)
    # Execute
    exact = randomize_classes_once(cls, ids, K10, math.inf, bytes(32), "r")
    flat = randomize_classes_once(cls, ids, K10, 0.001, bytes(32), "r")
    # Assert: eps = inf keeps every label; eps = 0.001 outputs each class with ~1/10 whatever the label
    np.testing.assert_array_equal(exact, cls)
    for c in range(K10):
        assert abs(np.mean(flat == c) - 0.1) < binomial_tolerance(N, 0.1)


def test_kary_replay_attack_has_power_against_public_seed_draws_and_none_against_the_keyed_release():
    # Prepare: K = 10 labels randomized (a) with public uniforms a follower can recompute, (b) by the leader's PRF
    from privacy.attacks.follower_view_multiclass import macro_recall, replay_uniforms, undo_kary_rr

    eps, ids = 1.0, np.arange(N) * 5 + 2
    y = np.random.default_rng(32).integers(0, K10, N)
    public = kary_rr(y, K10, eps, u_keep=uniform_from_ids(ids, 0, 0x1AB1), u_other=uniform_from_ids(ids, 0, 0x1AB2))
    keyed = randomize_classes_once(y, ids, K10, eps, bytes(range(32)), "replay")
    # Execute: every (u_keep, u_other) pair the follower can name, undone on each release
    cands = replay_uniforms(ids, np.arange(N), [0, 1])
    best_public = max(macro_recall(undo_kary_rr(public, K10, eps, *u), y, K10) for u in cands.values())
    best_keyed = max(macro_recall(undo_kary_rr(keyed, K10, eps, *u), y, K10) for u in cands.values())
    # Assert: the public draws are undone exactly; against the keyed release the best of ~90 candidates
    # stays within 5.5 sigma of p1 (a union bound over the candidates keeps the false failure < 4e-6)
    p1 = keep_probability(eps, K10)
    assert best_public == 1.0
    assert best_keyed < p1 + binomial_tolerance(N // K10, p1)
