"""Keyed releases against the key store and its pins: over the budget refused before any draw, a changed label under
the same release refused, pins lost or rolled back refused, key bytes without pins drawing a changed label afresh.
Statistical checks use 5.5-sigma binomial bounds (false failure < 1e-7 each); the whole module fails by chance with
probability < 3e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy import LabelDP
from privacy.label.ledger.store import LabelDPBudgetError
from privacy.label.release_draws import randomize_binary_once, randomize_classes_once
from tests.support.dp_stats import binomial_tolerance


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
