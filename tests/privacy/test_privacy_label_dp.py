"""LabelDP flips and keeps at the stated rates, satisfies eps-DP on neighbouring labels, is exact
at eps = inf, and rejects bad input naming the value. Statistical checks use 5.5-sigma binomial
bounds (false failure < 4e-8 each) or Hoeffding bounds at beta = 1e-8 per bin; the whole module
(with the K = 10 keyed k-ary RR checks: 40 binomial bounds and 20 histogram bins) fails by chance with
probability < 3e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privacy import LabelDP, flip_probability, keep_probability
from privacy.label.ledger.store import LabelDPBudgetError
from privacy.label.randomized_response import kary_rr
from privacy.label.release_draws import randomize_binary_once, randomize_classes_once
from privacy.public_hash import uniform_from_ids
from tests.support.dp_stats import binomial_tolerance, dp_histogram_violations

N = 200_000


@pytest.mark.parametrize("eps", [0.001, 0.5, 1.0, 2.0, 4.0])
def test_binary_flip_rate_matches_one_over_one_plus_e_eps(eps):
    # Prepare
    labels = np.random.default_rng(1).integers(0, 2, N)
    # Execute
    noisy = LabelDP(eps)(labels, generator=np.random.default_rng(2), insecure_seed=True)
    # Assert
    rho = 1 / (1 + math.exp(eps))
    assert abs(np.mean(noisy != labels) - rho) < binomial_tolerance(N, rho)


@pytest.mark.parametrize("eps, k", [(0.001, 4), (1.0, 4), (2.0, 10), (1.0, 2)])
def test_one_hot_keep_and_move_rates(eps, k):
    # Prepare
    cls = np.random.default_rng(3).integers(0, k, N)
    onehot = np.eye(k, dtype=np.float32)[cls]
    # Execute
    out = LabelDP(eps)(onehot, generator=np.random.default_rng(4), insecure_seed=True)
    new = out.argmax(axis=1)
    # Assert: keep rate p1, and each other class gets p2 = 1/(k-1+e^eps)
    p1 = math.exp(eps) / (k - 1 + math.exp(eps))
    assert abs(np.mean(new == cls) - p1) < binomial_tolerance(N, p1)
    moved_by = (new - cls) % k
    p2 = 1 / (k - 1 + math.exp(eps))
    for shift in range(1, k):
        assert abs(np.mean(moved_by == shift) - p2) < binomial_tolerance(N, p2)
    assert out.dtype == np.float32 and (out.sum(axis=1) == 1).all()


def test_torch_input_keeps_type_shape_dtype_and_device():
    # Prepare
    y = torch.tensor([[0.0], [1.0], [1.0]], dtype=torch.float64)
    oh = torch.tensor([[0, 1, 0], [1, 0, 0]], dtype=torch.int32)
    # Execute
    a = LabelDP(1.0)(y, generator=torch.Generator().manual_seed(0), insecure_seed=True)
    b = LabelDP(1.0)(oh, generator=np.random.default_rng(5), insecure_seed=True)
    # Assert
    assert isinstance(a, torch.Tensor) and a.shape == (3, 1) and a.dtype == torch.float64 and a.device == y.device
    assert isinstance(b, torch.Tensor) and b.shape == (2, 3) and b.dtype == torch.int32 and (b.sum(1) == 1).all()


def test_eps_infinity_is_exact_and_the_smallest_eps_is_near_uniform():
    # Prepare
    labels = np.random.default_rng(6).integers(0, 2, N).astype(np.int8)
    onehot = torch.eye(3)[torch.from_numpy(np.random.default_rng(7).integers(0, 3, 1000))]
    # Execute
    exact = LabelDP(math.inf)(labels)
    exact_t = LabelDP(float("inf"))(onehot)
    uniform = LabelDP(0.001)(np.zeros(N, np.int64), generator=np.random.default_rng(8), insecure_seed=True)
    # Assert
    np.testing.assert_array_equal(exact, labels)
    assert exact.dtype == np.int8 and torch.equal(exact_t, onehot)
    assert abs(uniform.mean() - 0.5) < binomial_tolerance(N, 0.5)
    assert flip_probability(math.inf) == 0.0 and keep_probability(math.inf, 5) == 1.0
    assert keep_probability(50.0, 3) == 1.0 and 0 < flip_probability(50.0) < 2e-21  # the largest eps: no overflow


def test_same_generator_seed_reproduces_the_output_and_no_generator_never_repeats():
    # Prepare
    labels = np.random.default_rng(9).integers(0, 2, 1000)
    # Execute
    a = LabelDP(1.0)(labels, generator=np.random.default_rng(42), insecure_seed=True)
    b = LabelDP(1.0)(labels, generator=np.random.default_rng(42), insecure_seed=True)
    c = LabelDP(1.0)(labels, generator=42, insecure_seed=True)
    d = LabelDP(1.0)(labels, generator=torch.Generator().manual_seed(42), insecure_seed=True)
    os_a, os_b = LabelDP(1.0)(labels), LabelDP(1.0)(labels)
    # Assert: the opted-in Generator or seed replays; OS entropy is another key every call
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, LabelDP(1.0)(labels, generator=42, insecure_seed=True))
    assert d.shape == a.shape and not np.array_equal(os_a, os_b)


def test_a_seed_or_a_generator_is_refused_without_the_insecure_opt_in_and_a_store_warning_is_shown(tmp_path):
    # Prepare
    labels = np.array([0, 1, 1, 0])
    # Execute / Assert: a seed others may know replays the flips (tests/privacy/test_regression_label_dp.py shows the attack)
    with pytest.raises(ValueError, match=r"generator=7: a seed others can know voids the DP guarantee.*ids=") as e:
        LabelDP(1.0)(labels, generator=7)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="generator must be a numpy Generator or a torch Generator"):
        LabelDP(1.0)(labels, generator="x")
    for gen in (np.random.default_rng(7), torch.Generator(), torch.Generator().manual_seed(7)):
        with pytest.raises(ValueError, match=r"generator=(Generator): a seed others can know voids the DP guarantee"):
            LabelDP(1.0)(labels, generator=gen)
    dp = LabelDP(1.0, dataset="clicks", store_dir=str(tmp_path / "store"))
    with pytest.warns(UserWarning, match="created a new key store"):
        dp(labels, ids=np.arange(4))
    assert len(dp.last_release["warnings"]) == 1


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_dp_histogram_on_neighbouring_binary_labels(eps):
    # Prepare: the same mechanism on label 0 and on label 1 (neighbouring datasets of one record)
    rng = np.random.default_rng(10)
    # Execute
    out0 = LabelDP(eps)(np.zeros(N, np.int64), generator=rng, insecure_seed=True)
    out1 = LabelDP(eps)(np.ones(N, np.int64), generator=rng, insecure_seed=True)
    # Assert
    assert dp_histogram_violations(out0, out1, eps, bins=2) == []


def test_dp_histogram_on_neighbouring_one_hot_labels():
    rng = np.random.default_rng(11)
    a = LabelDP(1.0)(np.tile(np.eye(4)[0], (N, 1)), generator=rng, insecure_seed=True).argmax(1)
    b = LabelDP(1.0)(np.tile(np.eye(4)[1], (N, 1)), generator=rng, insecure_seed=True).argmax(1)
    assert dp_histogram_violations(a, b, 1.0, bins=4) == []


def test_dp_histogram_test_has_power_against_a_miscalibrated_mechanism():
    # Prepare: a mechanism that claims eps but flips with 1/(1+e^(2 eps)) is only 2eps-DP
    eps = 1.0
    rng = np.random.default_rng(12)
    rho_wrong = 1 / (1 + math.exp(2 * eps))
    # Execute
    out0 = (rng.random(N) < rho_wrong).astype(np.int64)
    out1 = 1 - (rng.random(N) < rho_wrong).astype(np.int64)
    # Assert
    assert dp_histogram_violations(out0, out1, eps, bins=2) != []


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


@pytest.mark.parametrize(
    "eps, exc, needle",
    [
        (True, ValueError, "eps must be a real number in [0.001, 50], or inf for no noise, got bool True"),
        ("1.0", ValueError, "got str '1.0'"),
        (-1.0, ValueError, "eps must be in [0.001, 50], or inf for no noise, got eps=-1.0"),
        (float("nan"), ValueError, "got eps=nan"),
        (0.0, ValueError, "eps must be in [0.001, 50], or inf for no noise, got eps=0.0"),
        (-0.0, ValueError, "got eps=-0.0"),
        (1e-300, ValueError, "got eps=1e-300"),
        (51.0, ValueError, "got eps=51.0"),
        (1000.0, ValueError, "got eps=1000.0"),
    ],
)
def test_bad_eps_raises_quoting_the_value(eps, exc, needle):
    with pytest.raises(exc) as e:
        LabelDP(eps)
    assert needle in str(e.value)


@pytest.mark.parametrize(
    "labels, needle",
    [
        (np.array([0, 1, 2, 1]), "row 2 is 2"),
        (np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0]]), "row 1 is [1, 1, 0]"),
        (np.array([[1, 0, 0], [0, 0, 0]]), "row 1 is [0, 0, 0]"),
        (np.array([[0.5, 0.5], [1, 0]]), "row 0"),
        (np.zeros((2, 2, 2)), "ndim=3"),
        (np.zeros((3, 0)), "K >= 2"),
    ],
)
def test_bad_labels_raise_naming_the_first_bad_row(labels, needle):
    with pytest.raises(ValueError) as e:
        LabelDP(1.0)(labels)
    assert needle in str(e.value)


def test_non_array_labels_raise_type_error():
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        LabelDP(1.0)([0, 1])


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


@pytest.mark.filterwarnings("ignore:label DP. created a new key store")
def test_a_release_over_the_budget_is_refused_before_anything_is_drawn_or_recorded_and_a_replay_is_free(tmp_path):
    # Prepare: one dataset's release at eps 3 under a budget of 5
    store = str(tmp_path / "store")
    labels, ids = np.array([0, 1, 1, 0] * 25), np.arange(100)
    first = LabelDP(3.0, dataset="clicks", store_dir=store, budget=5)(labels, ids=ids)
    ledger = (tmp_path / "store" / "ledger.json").read_text()
    # Execute / Assert: a second release (eps 2.5) would spend 5.5: refused in one line, the ledger unchanged
    refused = LabelDP(2.5, dataset="clicks", store_dir=store, budget=5)
    with pytest.raises(LabelDPBudgetError) as e:
        refused(labels, ids=ids)
    assert "\n" not in str(e.value) and "to 5.5, over LabelDP's budget 5;" in str(e.value)
    assert (tmp_path / "store" / "ledger.json").read_text() == ledger and refused.last_release is None
    # the same release replays at no cost; budget=None (no cap) and the default 8 let the second one through
    assert np.array_equal(LabelDP(3.0, dataset="clicks", store_dir=store, budget=5)(labels, ids=ids), first)
    second = LabelDP(2.5, dataset="clicks", store_dir=store)
    second(labels, ids=ids)
    assert second.last_release["dataset_total_eps"] == pytest.approx(5.5)
    with pytest.raises(LabelDPBudgetError, match="to 9.5, over LabelDP's budget 8;"):
        LabelDP(4.0, dataset="clicks", store_dir=store)(labels, ids=ids)
    LabelDP(4.0, dataset="clicks", store_dir=store, budget=None)(labels, ids=ids)
    # eps = inf keyed: over any finite budget, refused before anything is recorded; with budget=None the true labels
    # are a release the ledger records (its total is then inf); fresh noise at eps = inf stays the exact labels
    ledger = (tmp_path / "store" / "ledger.json").read_text()
    with pytest.raises(LabelDPBudgetError, match=r"LabelDP eps=inf is over its budget=8: .*budget=None"):
        LabelDP(math.inf, dataset="clicks", store_dir=store)(labels, ids=ids)
    assert (tmp_path / "store" / "ledger.json").read_text() == ledger
    exact = LabelDP(math.inf, dataset="clicks", store_dir=store, budget=None)
    assert np.array_equal(exact(labels, ids=ids), labels) and exact.last_release["dataset_total_eps"] == "inf"
    assert np.array_equal(LabelDP(math.inf)(labels), labels)


@pytest.mark.filterwarnings("ignore:label DP. (created a new key store|dataset)")
@pytest.mark.parametrize("k", [2, 10])
def test_a_changed_label_under_the_same_release_is_refused_and_batches_of_one_label_set_replay_it(tmp_path, k):
    # Prepare: a label set given batch by batch, then the whole of it; a corrected copy with 5% of its labels changed
    store = str(tmp_path / "store")
    rng = np.random.default_rng(40 + k)
    ids = rng.permutation(20_000).astype(np.int64) * 7 + 3
    labels = rng.integers(0, k, ids.size)
    changed = rng.random(ids.size) < 0.05
    corrected = np.where(changed, (labels + 1) % k, labels)
    make = lambda name: LabelDP(1.0, dataset=name, store_dir=store, num_classes=None if k == 2 else k)
    # Execute: two batches, then the whole set (a replay), then the corrected set under the same name
    halves = [make("clicks")(labels[part], ids=ids[part]) for part in (slice(0, 12_000), slice(12_000, None))]
    whole = make("clicks")
    out = whole(labels, ids=ids)
    ledger = (tmp_path / "store" / "ledger.json").read_text()
    pins = sorted((tmp_path / "store" / "label_pins").iterdir())
    refused = make("clicks")
    with pytest.raises(ValueError) as e:
        refused(corrected, ids=ids)
    # Assert: batches and the whole set are one release (same labels, no new cost); the changed labels are refused in
    # one line naming the count and the way out, with the ledger and the pins as they were and nothing drawn
    np.testing.assert_array_equal(np.concatenate(halves), out)
    assert whole.last_release["new_release"] is False and whole.last_release["dataset_total_eps"] == 1.0
    assert f"{changed.sum()} of the {ids.size} ids already have another label in dataset 'clicks'" in str(e.value)
    assert "\n" not in str(e.value) and "another dataset= name" in str(e.value) and refused.last_release is None
    assert (tmp_path / "store" / "ledger.json").read_text() == ledger
    assert sorted((tmp_path / "store" / "label_pins").iterdir()) == pins and len(pins) == 1
    # the way out: another name draws new coins, and the ledger charges both (they share every id)
    fixed = make("clicks-corrected")
    again = fixed(corrected, ids=ids)
    keep = math.e / (k - 1 + math.e)
    same = keep * keep + (1 - keep) ** 2 / (k - 1)  # independent draws on the unchanged labels agree this often
    assert abs(np.mean(again[~changed] == out[~changed]) - same) < binomial_tolerance(int((~changed).sum()), same)
    assert fixed.last_release["dataset_total_eps"] == 2.0


@pytest.mark.filterwarnings("ignore:label DP. (created a new key store|dataset)")
def test_pins_lost_or_rolled_back_are_refused_and_a_key_shared_by_two_stores_draws_other_coins(tmp_path):
    # Prepare: a release pinned in store A over two batches; a copy of its pins after the first batch
    from privacy.label.ledger.secret_files import LabelDPStoreError

    ids = np.arange(4_000, dtype=np.int64)
    labels = np.random.default_rng(45).integers(0, 2, ids.size)
    key_file = str(tmp_path / "keys" / "label.key")
    (tmp_path / "keys").mkdir(mode=0o700)
    make = lambda store: LabelDP(1.0, dataset="clicks", store_dir=str(tmp_path / store), key_file=key_file)
    make("a")(labels[:2_000], ids=ids[:2_000])
    (pins,) = (tmp_path / "a" / "label_pins").iterdir()
    first_batch = pins.read_bytes()
    out_a = make("a")(labels[2_000:], ids=ids[2_000:])
    flipped = labels.copy()
    flipped[3_000] ^= 1
    # Execute / Assert: the pins rolled back to the first batch, or deleted, are refused by name; restored, they
    # refuse the changed label again
    whole = pins.read_bytes()
    for damage in (lambda: pins.write_bytes(first_batch), pins.unlink):
        damage()
        with pytest.raises(LabelDPStoreError, match="label pins .* are missing or not the ones ledger .* recorded"):
            make("a")(flipped, ids=ids)
    pins.write_bytes(whole)
    pins.chmod(0o600)
    with pytest.raises(ValueError, match="1 of the 4000 ids already have another label"):
        make("a")(flipped, ids=ids)
    # the same key in store B is another release: other coins, so its outputs say nothing of A's labels' changes
    dp_b = make("b")
    out_b = dp_b(flipped[2_000:], ids=ids[2_000:])
    assert dp_b.release_id("binary", 2) != make("a").release_id("binary", 2)
    r = 1 / (1 + math.e)
    want = 2 * r * (1 - r)  # independent draws on (mostly) the same labels disagree this often
    assert abs(np.mean(out_a != out_b) - want) < binomial_tolerance(2_000, want)


@pytest.mark.parametrize("k", [2, 10])
def test_key_bytes_without_pins_give_a_changed_label_fresh_coins_and_the_planted_leak_reads_it(k):
    """With `key=` bytes (no store, no pins) the same release on a changed label set draws each changed label's coins
    per (id, label): on the changed rows the two outputs agree with the labels' change only as two independent RR
    draws do (binary: the XOR matches where both flips agree, rho^2 + (1-rho)^2; K-ary: an output repeats across two
    independent draws on two classes with 2 p1 q + (K-2) q^2, q = (1-p1)/(K-1)); 5.5-sigma bounds, false failure
    < 1e-7 each. Power: coins per id alone (the planted leak) make the XOR (binary) the labels' XOR on every row."""
    from privacy.label.release_draws import randomize_binary_once, randomize_classes_once

    # Prepare
    ids = np.arange(20_000, dtype=np.int64)
    rng = np.random.default_rng(44 + k)
    labels = rng.integers(0, k, ids.size)
    changed = rng.random(ids.size) < 0.25
    corrected = np.where(changed, (labels + 1 + rng.integers(0, k - 1, ids.size)) % k, labels)
    key = bytes(range(32))
    make = lambda: LabelDP(1.0, dataset="clicks", key=key, num_classes=None if k == 2 else k)
    # Execute
    a, b = make()(labels, ids=ids), make()(corrected, ids=ids)
    if k == 2:
        leak_a, leak_b = (randomize_binary_once(y, ids, 1.0, key, "r") for y in (labels, corrected))
    else:
        leak_a, leak_b = (randomize_classes_once(y, ids, k, 1.0, key, "r") for y in (labels, corrected))
    # Assert: unchanged labels replay exactly; changed ones draw independently
    np.testing.assert_array_equal(a[~changed], b[~changed])
    p1 = math.e / (k - 1 + math.e)
    q = (1 - p1) / (k - 1)
    n = int(changed.sum())
    if k == 2:
        agree = p1**2 + q**2
        stat, planted = (a ^ b) == (labels ^ corrected), (leak_a ^ leak_b) == (labels ^ corrected)
    else:
        agree = 2 * p1 * q + (k - 2) * q**2
        stat, planted = a == b, (leak_a - leak_b) % k == (labels - corrected) % k
    assert abs(np.mean(stat[changed]) - agree) < binomial_tolerance(n, agree)
    assert planted[changed].all()  # the planted leak: same coins on a changed label


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
