"""The label-DP ledger's id sets (privacy/label/ledger/store.py): every run's ids are merged into its dataset's set, overlap
is tested on whole sets (a single shared id among 200k is found), older ledgers are migrated on the conservative side,
and a lost id file over-counts, never under-counts. Pure store calls, no training."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from privacy.keyed_random import keyed_words
from privacy.label.ledger.ledger_math import SKETCH_K
from privacy.label.ledger.store import LEDGER_FORMAT, LabelDPBudgetError, LabelDPStore, Release, read_key


def _release(dataset: str, eps: float = 1.0, rows: int = 0) -> Release:
    return Release(f"release-of-{dataset}-{eps}", dataset, "binary_rr", eps, {"eps": eps}, rows)


def _store(tmp_path) -> tuple[LabelDPStore, bytes]:
    store = LabelDPStore(str(tmp_path / "store"))
    return store, store.key()


def _ledger(store: LabelDPStore) -> dict:
    return json.loads(open(store.ledger_path).read())


def _highest_hash_ids(store: LabelDPStore, ids: np.ndarray, n: int) -> np.ndarray:
    """The n ids whose ledger hashes are largest: never in a bottom-k sketch of a set over k ids."""
    hashes = keyed_words(read_key(store.secret_path), "ledger", "id-sketch", ids)
    return ids[np.argsort(hashes)[-n:]]


def test_a_later_run_of_a_release_over_more_ids_is_merged_into_its_dataset(tmp_path):
    """The review's repro: A released over ids 0..9, then the same release over 100k ids; a re-export B whose
    intersection leaves out 0..9 was charged 1.0 with no overlap (A's sketch was frozen at its first 10 ids)."""
    # Prepare
    store, key = _store(tmp_path)
    store.record(_release("A", rows=10), key, np.arange(10))
    # Execute
    is_new, _ = store.record(_release("A", rows=100_000), key, np.arange(100_000))
    _, summary = store.record(_release("B"), key, np.arange(10, 100_000))
    # Assert: A's set is the union of its runs; B is charged with A's release (ids 10..99,999 saw both: eps 2)
    a = _ledger(store)["datasets"]["A"]
    assert is_new is False and a["rows"] == 100_000 and a["id_hashes"]["rows"] == 100_000
    assert summary["total_eps"] == 2.0 and summary["overlapping_datasets"] == ["A"]
    path = os.path.join(store.dir, a["id_hashes"]["file"])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and os.path.getsize(path) < 8 * 100_000 + 200
    assert sorted(os.listdir(os.path.join(store.dir, "id_hashes"))) == sorted(
        os.path.basename(d["id_hashes"]["file"]) for d in _ledger(store)["datasets"].values()
    )  # the file of A's 10-id run is gone (below k it had none), no temporary file left


def test_one_shared_id_between_two_large_datasets_is_charged_and_disjoint_ones_are_not(tmp_path):
    """Bottom-k sketches of 200k ids each share no hash when one id is shared (the old estimate said 0 overlap); the
    whole sets find it. Disjoint sets of the same size are not charged to each other (no false alarm)."""
    # Prepare: the shared id is the one of A's with the largest hash, so no sketch of either set holds it
    store, key = _store(tmp_path)
    a_ids = np.arange(200_000)
    store.record(_release("A"), key, a_ids)
    shared = _highest_hash_ids(store, a_ids[-2_000:], 1)
    b_ids = np.concatenate([np.arange(1_000_000, 1_199_999), shared])
    # Execute
    _, disjoint = store.record(_release("C"), key, np.arange(2_000_000, 2_200_000))
    _, one_shared = store.record(_release("B"), key, b_ids)
    # Assert
    datasets = _ledger(store)["datasets"]
    assert not set(datasets["A"]["sketch"][i : i + 16] for i in range(0, SKETCH_K * 16, 16)) & set(
        datasets["B"]["sketch"][i : i + 16] for i in range(0, SKETCH_K * 16, 16)
    )
    assert one_shared["total_eps"] == 2.0 and one_shared["overlapping_datasets"] == ["A"]
    assert disjoint["total_eps"] == 1.0 and disjoint["overlapping_datasets"] == []
    with pytest.raises(LabelDPBudgetError, match="to 3.5,"):  # before followers connect, from the recorded sets
        store.check_budget(_release("B", eps=1.5), (), 2.5)


@pytest.mark.parametrize(
    "uses, rows, charged",
    [(1, 10, False), (2, 10, True), (1, SKETCH_K + 1, True)],
    ids=["one-run-small: exact", "two-runs: partial", "over-k: partial"],
)
def test_a_format_3_ledger_is_migrated_and_a_dataset_it_may_not_have_recorded_whole_is_charged(
    tmp_path, uses, rows, charged
):
    """Format 3 kept the sketch of a dataset's first run: whole only for one run of at most k ids."""
    # Prepare: the ledger as format 3 wrote it
    store, key = _store(tmp_path)
    store.record(_release("A"), key, np.arange(rows))
    doc = _ledger(store)
    (a,) = doc["datasets"].values()
    a.pop("id_hashes", None)
    a["sketch"] = a["sketch"][: 16 * SKETCH_K]
    doc["format"], doc["releases"][0]["uses"] = 3, uses
    doc.pop("generation")  # written before seals: no write count, no seal
    open(store.ledger_path, "w").write(json.dumps(doc))
    os.remove(store.seal_path)
    os.remove(os.path.join(store.dir, "ledger_sealed"))  # and the marker of the first seal
    with open(store.secret_path) as f:  # and the ledger secret's `sealed` line
        secret_hex = f.read().split()[0]
    with open(store.secret_path, "w") as f:
        f.write(secret_hex + "\n")
    store.warnings.clear()
    # Execute
    _, summary = store.record(_release("B"), key, np.arange(100_000, 100_010))
    # Assert
    assert summary["total_eps"] == (2.0 if charged else 1.0)
    assert summary["unverifiable_datasets"] == (["A"] if charged else [])
    assert any("format-3 ledger" in w and "over-count" in w for w in store.warnings) == charged
    assert _ledger(store)["format"] == LEDGER_FORMAT == 4


def test_a_lost_id_file_charges_its_dataset_to_every_other_and_is_left_in_place(tmp_path):
    # Prepare
    store, key = _store(tmp_path)
    store.record(_release("A"), key, np.arange(10_000))
    path = os.path.join(store.dir, _ledger(store)["datasets"]["A"]["id_hashes"]["file"])
    os.chmod(path, 0o644)  # unreadable for the ledger (others could read it)
    # Execute
    _, other = store.record(_release("B"), key, np.arange(50_000, 50_010))
    _, again = store.record(_release("A", eps=2.0), key, np.arange(10_000))
    # Assert: B is charged with A although they are disjoint; A is partial from now on; its old file stays
    assert other["total_eps"] == 2.0 and other["unverifiable_datasets"] == ["A"]
    assert again["total_eps"] == 4.0 and "partial" in _ledger(store)["datasets"]["A"]
    assert os.path.exists(path) and any("left where it is" in w for w in store.warnings)


def test_a_small_format_2_sketch_is_compared_exactly_under_its_key_and_absorbed_when_released_again(tmp_path):
    """A format-2 sketch of one run over at most k ids is the whole set under the label key of its time: while that
    key is held, a new dataset's ids are compared with it exactly, and a later run of the dataset over the same ids
    moves it under the ledger secret."""
    # Prepare: the ledger as format 2 wrote it (the sketch under the label key, no ledger secret)
    from privacy.label.ledger.ledger_math import id_sketch

    store, key = _store(tmp_path)
    store.record(_release("A"), key, np.arange(10))
    doc = _ledger(store)
    doc["datasets"]["A"]["sketch"] = id_sketch(key, np.arange(10))
    doc["format"] = 2
    doc.pop("ledger_secret")
    doc.pop("generation")  # written before seals: no write count, no seal
    open(store.ledger_path, "w").write(json.dumps(doc))
    os.remove(store.secret_path)
    os.remove(store.seal_path)
    os.remove(os.path.join(store.dir, "ledger_sealed"))  # and the marker of the first seal
    # Execute
    _, disjoint = store.record(_release("B"), key, np.arange(100, 110))
    _, sharing = store.record(_release("C"), key, np.arange(9, 20))
    store.record(_release("A"), key, np.arange(10))
    # Assert
    assert disjoint["total_eps"] == 1.0 and disjoint["overlapping_datasets"] == []
    assert sharing["total_eps"] == 2.0 and sharing["overlapping_datasets"] == ["A"]
    a = _ledger(store)["datasets"]["A"]
    assert "legacy" not in a and "partial" not in a and a["rows"] == 10


def test_the_overlap_warning_names_each_earlier_release_it_charges(tmp_path):
    """A newcomer saw 'total eps 3.0 over 3 releases' with two of them from other runs and no word of which (issue
    30): the warning names each charged release's source file, mechanism, eps and date."""
    # Prepare
    store, key = _store(tmp_path)
    store.record(_release("A", eps=1.0), key, np.arange(100), source={"path": "/data/clicks-2026-10.csv"})
    # Execute
    _, summary = store.record(_release("B", eps=2.0), key, np.arange(50, 150), source={"path": "/data/clicks.csv"})
    # Assert
    assert summary["charged_from_others"] == [f"/data/clicks-2026-10.csv (binary_rr eps 1.0, {summary_date(store)})"]
    warning = next(w for w in store.warnings if "shares sample ids" in w)
    assert "charged: /data/clicks-2026-10.csv (binary_rr eps 1.0" in warning and "total eps 3.0" in warning


def summary_date(store: LabelDPStore) -> str:
    return _ledger(store)["releases"][0]["created"][:10]
