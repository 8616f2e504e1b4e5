"""prepare writes aligned, memory-mappable party shards atomically and rejects bad input clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support.criteo_lines import raw_line, write_lines
from tests.support.paths import REPO
from vfl.data.errors import DataError
from vfl.data.parties import load_parties, parse_parties
from vfl.data.prepare import PrepareOptions, prepare


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "vfl.data", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_default_shards_hold_mindspore_columns_and_labels_only_on_the_leader(shards_small):
    # Prepare / Execute
    m = json.loads((shards_small / "manifest.json").read_text())
    # Assert
    assert m["parties"]["leader"]["dense"] == [f"I{i}" for i in range(1, 8)]
    assert m["parties"]["follower0"]["categorical"] == [f"C{i}" for i in range(14, 27)]
    assert (shards_small / "leader/train/labels.npy").exists()
    assert not (shards_small / "follower0/train/labels.npy").exists()
    dense = np.load(shards_small / "follower0/train/dense.npy", mmap_mode="r")
    cat = np.load(shards_small / "leader/train/cat.npy", mmap_mode="r")
    assert dense.dtype == np.float32 and dense.shape[1] == 6
    assert cat.dtype == np.int32 and cat.shape[1] == 13 and cat.max() < 2000


def test_parties_are_aligned_sorted_and_split_near_the_test_fraction(shards_small):
    # Prepare
    m = json.loads((shards_small / "manifest.json").read_text())
    # Execute
    ids = {
        p: {s: np.load(shards_small / p / s / "ids.npy") for s in ("train", "valid", "test")}
        for p in ("leader", "follower0")
    }
    # Assert
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(ids["leader"][s], ids["follower0"][s])
        assert np.all(np.diff(ids["leader"][s]) > 0)
    assert not set(ids["leader"]["train"]) & set(ids["leader"]["test"])
    n_test, n = m["rows"]["test"], m["rows"]["train"] + m["rows"]["valid"] + m["rows"]["test"]
    # binomial(12000, 0.1): sd = 33 rows; 6 sd bound gives false failure < 1e-8
    assert abs(n_test - 0.1 * n) < 6 * np.sqrt(n * 0.1 * 0.9)
    assert 0.5 < m["bayes_test_auc"] <= 1.0
    assert m["source"]["sha256"] and m["id_digest"]["train"]


def test_split_is_decided_per_sample_id_whatever_the_other_rows(tmp_path, synth_small):
    # Prepare: the same rows prepared twice, once with a party dropping rows
    parties = load_parties(None)
    a = prepare(str(synth_small), str(tmp_path / "a"), parties, PrepareOptions(seed=3))
    dropped = [p.__class__(**{**p.__dict__, "drop_fraction": 0.3}) if p.name == "follower0" else p for p in parties]
    b = prepare(str(synth_small), str(tmp_path / "b"), dropped, PrepareOptions(seed=3))
    # Execute
    test_a = set(np.load(tmp_path / "a/leader/test/ids.npy"))
    test_b = set(np.load(tmp_path / "b/leader/test/ids.npy"))
    # Assert: b's test ids are a's minus the dropped rows; the intersection is what both hold
    assert test_b <= test_a
    assert b["parties"]["follower0"]["rows_before_alignment"] < b["parties"]["leader"]["rows_before_alignment"]
    total_b = b["rows"]["train"] + b["rows"]["valid"] + b["rows"]["test"]
    assert total_b == b["parties"]["follower0"]["rows_before_alignment"]
    assert b["id_digest"]["train"] != a["id_digest"]["train"]


def test_malformed_lines_are_skipped_with_a_warning_naming_them(tmp_path):
    # Prepare
    src = write_lines(tmp_path / "in.tsv", [raw_line(), raw_line(ints=["z"] * 13), raw_line(label="1"), "a\tb"])
    # Execute
    r = _cli("prepare", "--input", src, "--out", str(tmp_path / "out"))
    # Assert
    assert r.returncode == 0, r.stderr
    assert "skipped 2 malformed" in r.stderr and "line 2" in r.stderr and "line 4" in r.stderr
    m = json.loads((tmp_path / "out/manifest.json").read_text())
    assert m["source"]["malformed_rows_skipped"] == 2
    assert m["rows"]["train"] + m["rows"]["valid"] + m["rows"]["test"] == 2


def test_strict_mode_names_the_line_and_leaves_nothing_behind(tmp_path):
    # Prepare
    src = write_lines(tmp_path / "in.tsv", [raw_line()] * 3 + [raw_line(ints=["1"] * 12 + ["1.5"])])
    # Execute
    r = _cli("prepare", "--input", src, "--out", str(tmp_path / "out"), "--strict")
    # Assert
    assert r.returncode != 0
    assert "line 4" in r.stderr and "I13" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.tsv"]


@pytest.mark.parametrize("content, needle", [("", "empty"), (None, "not found")])
def test_empty_or_missing_input_is_a_clear_error(tmp_path, content, needle):
    # Prepare
    src = tmp_path / "in.tsv"
    if content is not None:
        src.write_text(content)
    # Execute
    r = _cli("prepare", "--input", str(src), "--out", str(tmp_path / "out"))
    # Assert
    assert r.returncode == 2
    assert needle in r.stderr and str(src) in r.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_column_in_parties_yaml_suggests_the_nearest(tmp_path, real_1k):
    # Prepare
    y = tmp_path / "parties.yaml"
    y.write_text(
        "leader: {dense: [I1], categorical: [C1], label: true}\nfollower0: {dense: [I99], categorical: [c2]}\n"
    )
    # Execute
    r = _cli("prepare", "--input", str(real_1k), "--out", str(tmp_path / "out"), "--parties", str(y))
    # Assert
    assert r.returncode == 2
    assert "'I99'" in r.stderr and "'c2'" in r.stderr and "did you mean 'C2'" in r.stderr


def test_parties_yaml_rejects_two_label_parties_and_shared_columns():
    # Prepare
    doc = {"a": {"dense": ["I1"], "label": True}, "b": {"dense": ["I1"], "label": True}}
    # Execute / Assert
    with pytest.raises(DataError, match="already held by party a") as e:
        parse_parties(doc)
    assert "exactly one party" in str(e.value)


def test_three_parties_get_their_own_columns(tmp_path, real_1k):
    # Prepare
    doc = {
        "leader": {"dense": ["I1"], "categorical": ["C1"], "label": True},
        "f0": {"dense": ["I2", "I3"]},
        "f1": {"categorical": ["C5", "C6", "C7"]},
    }
    # Execute
    m = prepare(str(real_1k), str(tmp_path / "o"), parse_parties(doc), PrepareOptions(test_fraction=0.2))
    # Assert
    assert set(m["parties"]) == {"leader", "f0", "f1"}
    assert np.load(tmp_path / "o/f1/train/cat.npy").shape[1] == 3
    assert np.load(tmp_path / "o/f0/test/dense.npy").shape[1] == 2
    assert "I4" in m["unassigned_columns"]


def test_vocabulary_mode_maps_rare_values_to_oov(tmp_path, real_1k):
    # Prepare / Execute
    m = prepare(str(real_1k), str(tmp_path / "o"), load_parties(None), PrepareOptions(vocab_min_count=10))
    cat = np.concatenate([np.load(tmp_path / f"o/leader/{s}/cat.npy") for s in ("train", "valid", "test")])
    # Assert: C9 (3 distinct values in Criteo) keeps all; C3 (millions) is mostly OOV
    sizes = m["parties"]["leader"]["field_sizes"]
    assert sizes["C9"] <= 5 and (cat[:, 8] >= 2).all()
    assert (cat[:, 2] == 1).mean() > 0.5
    assert cat.max(axis=0).tolist() < [sizes[c] for c in m["parties"]["leader"]["categorical"]]


def test_existing_output_is_kept_unless_forced(tmp_path, real_1k):
    # Prepare
    out = tmp_path / "o"
    prepare(str(real_1k), str(out), load_parties(None))
    # Execute / Assert
    with pytest.raises(DataError, match="already exists"):
        prepare(str(real_1k), str(out), load_parties(None))
    prepare(str(real_1k), str(out), load_parties(None), PrepareOptions(force=True, test_fraction=0.5))
    assert json.loads((out / "manifest.json").read_text())["split"]["test_fraction"] == 0.5


def test_ids_in_any_order_are_sorted_and_duplicates_are_refused_naming_the_id(tmp_path):
    # Prepare
    src = write_lines(tmp_path / "in.tsv", ["5\t" + raw_line(), "3\t" + raw_line(), "9\t" + raw_line()])
    dup = write_lines(tmp_path / "dup.tsv", ["5\t" + raw_line(), "3\t" + raw_line(), "5\t" + raw_line()])
    # Execute
    m = prepare(src, str(tmp_path / "o"), load_parties(None), PrepareOptions(test_fraction=0.0, valid_fraction=0.0))
    # Assert
    assert np.load(tmp_path / "o/leader/train/ids.npy").tolist() == [3, 5, 9] and m["rows"]["train"] == 3
    with pytest.raises(DataError, match="sample id '5' appears more than once"):
        prepare(dup, str(tmp_path / "d"), load_parties(None))
    assert not (tmp_path / "d").exists()


def test_memory_mapped_and_in_memory_shards_give_the_same_batches(shards_small):
    # Prepare
    from vfl.data.shards import PartyShard

    mapped = PartyShard(str(shards_small / "follower0"), in_memory=False).split("test")
    loaded = PartyShard(str(shards_small / "follower0"), in_memory=True).split("test")
    rows = np.array([5, 0, 17, 3])
    # Execute / Assert: fancy-indexed (training) and sliced (evaluation) batches agree and are writable
    for sel in (rows, slice(2, 9)):
        for a, b in zip(mapped.features(sel), loaded.features(sel)):
            assert a.dtype == b.dtype and bool((a == b).all())
            a.add_(0)  # writable: would fail on a read-only memory-map view


def test_a_party_prepares_its_own_file_opening_no_other_party_file(vertical_raw, tmp_path):
    # Prepare: follower0's preparation, every file open of the process audited (sys.addaudithook)
    code = (
        "import json, sys\n"
        "opened = []\n"
        "sys.addaudithook(lambda e, a: opened.append(str(a[0])) if e == 'open' and isinstance(a[0], (str, bytes)) else None)\n"
        "from vfl.data.__main__ import main\n"
        f"rc = main(['prepare', '--party', 'follower0', '--input', {str(vertical_raw['follower0'])!r}, '--out', {str(tmp_path)!r},"
        " '--hash-buckets', '500'])\n"
        "print(json.dumps({'rc': rc, 'opened': opened}))\n"
    )
    # Execute
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    # Assert: the only raw file it touched is its own; its shard and manifest hold nothing from labels
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["rc"] == 0
    raw_dir = str(vertical_raw["dir"])
    touched = {p for p in doc["opened"] if p.startswith(raw_dir)}
    assert touched == {str(vertical_raw["follower0"])}, touched
    m = json.loads((tmp_path / "follower0/manifest.json").read_text())
    from vfl.data.manifest import FOLLOWER_MANIFEST_KEYS

    assert set(m) <= set(FOLLOWER_MANIFEST_KEYS) | {"party"} and not m["party"]["has_labels"]
    assert not list(tmp_path.rglob("labels.npy"))


def test_own_file_ids_as_strings_and_integers_map_to_the_same_int64_at_every_party(vertical_raw, vertical_shards):
    # Prepare
    from vfl.data.ids import ids64
    from vfl.data.shards import PartyShard

    # Execute
    lead, fol = PartyShard(str(vertical_shards / "leader")), PartyShard(str(vertical_shards / "follower0"))
    common = np.intersect1d(lead.all_ids(), fol.all_ids())
    # Assert: the ids both hold are exactly the shared texts; splits are sorted by id
    np.testing.assert_array_equal(common, np.sort(ids64(vertical_raw["common"])))
    assert lead.all_ids().size > common.size and fol.all_ids().size > common.size
    for s in ("train", "valid", "test"):
        assert np.all(np.diff(np.asarray(fol.split(s).ids)) > 0)


def test_duplicate_string_ids_in_a_party_file_are_refused_naming_them(tmp_path):
    # Prepare
    from vfl.data.parties import PartyColumns
    from vfl.data.prepare import prepare_party

    src = write_lines(tmp_path / "f.csv", ["id,I1,C1", "a@x.org,1,68fd1e64", "b@x.org,2,", "a@x.org,3,68fd1e64"])
    party = PartyColumns("f", ("I1",), ("C1",))
    # Execute / Assert
    with pytest.raises(DataError, match="sample id 'a@x.org' appears more than once"):
        prepare_party(src, str(tmp_path / "o"), party)
    assert not (tmp_path / "o").exists()


def test_a_missing_column_in_a_party_file_is_named_with_the_nearest(tmp_path):
    # Prepare
    src = write_lines(tmp_path / "f.tsv", ["id\tI1\tC1", "1\t1\t68fd1e64"])
    # Execute
    r = _cli(
        "prepare", "--party", "f", "--input", src, "--out", str(tmp_path / "o"), "--dense", "i1", "--categorical", "C1"
    )
    # Assert
    assert r.returncode == 2 and "column 'i1' is not in the header" in r.stderr and "did you mean 'I1'" in r.stderr


def test_hash_buckets_and_a_vocabulary_are_alternatives_not_a_silent_choice(tmp_path, real_1k):
    # Execute
    r = _cli(
        "prepare",
        "--input",
        str(real_1k),
        "--out",
        str(tmp_path / "o"),
        "--hash-buckets",
        "1000",
        "--vocab-min-count",
        "10",
    )
    # Assert: a one-line error naming both flags, and nothing written
    assert r.returncode == 2 and "--vocab-min-count: not allowed with argument --hash-buckets" in r.stderr
    assert not (tmp_path / "o").exists()
