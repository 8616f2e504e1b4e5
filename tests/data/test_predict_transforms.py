"""The frozen transforms of prediction (vfl/data/frozen.py): a party's own training file read back through the
transforms its shard saved gives exactly the shard's arrays (Criteo-style shards with vocabularies or hashing, and a
table shard under its schema); a category no training row had gets the out-of-vocabulary id, a missing one id 0."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.own_table import SCHEMAS, own_table


def _read(shard_dir, path):
    from vfl.data.frozen import FrozenTransforms

    frozen = FrozenTransforms.of_shard(str(shard_dir))
    blocks = list(frozen.read(str(path)))
    cat = lambda name: np.concatenate([getattr(b, name) for b in blocks])  # noqa: E731
    return frozen, cat("ids"), cat("dense"), cat("dense_missing"), cat("cat"), blocks


def _assert_same_as_shard(shard_dir, ids, dense, missing, cat):
    from vfl.data.shards import PartyShard
    from vfl.splits import SPLITS

    where = {int(i): k for k, i in enumerate(ids)}
    shard = PartyShard(str(shard_dir))
    for s in SPLITS:
        split = shard.split(s)
        rows = np.array([where[int(i)] for i in np.asarray(split.ids)], np.int64)
        assert np.array_equal(dense[rows], np.asarray(split.dense))
        assert np.array_equal(missing[rows], np.asarray(split.dense_missing))
        assert np.array_equal(cat[rows], np.asarray(split.cat))


@pytest.mark.parametrize("mode", [{"vocab_min_count": 2}, {"hash_buckets": 500}], ids=["vocabulary", "hash"])
def test_a_criteo_style_partys_own_file_gives_its_shard_through_the_frozen_transforms(synth_tiny, tmp_path, mode):
    # Prepare
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    prepare(str(synth_tiny), str(tmp_path / "s"), load_parties(None), PrepareOptions(**mode))
    for party in ("leader", "follower0"):
        # Execute
        frozen, ids, dense, missing, cat, blocks = _read(
            tmp_path / "s" / party, tmp_path / "s" / "raw" / f"{party}.tsv"
        )
        # Assert: the shard's arrays, the label read by the leader only
        _assert_same_as_shard(tmp_path / "s" / party, ids, dense, missing, cat)
        assert (blocks[0].label is not None) == (party == "leader")


def test_a_table_shard_under_its_schema_and_an_unseen_category(tmp_path):
    """standardize, log1p and vocabulary (leader), quantile bins (shop), hashing (telco): the own file gives the shard;
    a city no training row had maps to id 1, a missing one to 0."""
    # Prepare
    from vfl.config.table_schema import SchemaConfig
    from vfl.data.prepare import PrepareOptions
    from vfl.data.prepare_table import prepare_table
    from vfl.data.transforms import MISSING_ID, OOV_ID

    frames = own_table(1500, seed=3)
    for party, frame in frames.items():
        path = tmp_path / f"{party}.csv"
        frame.to_csv(path, index=False)
        task = "binary" if party == "leader" else None
        prepare_table(str(path), str(tmp_path / party), party, SchemaConfig(**SCHEMAS[party]), task, PrepareOptions())
        # Execute
        _, ids, dense, missing, cat, _ = _read(tmp_path / party, path)
        # Assert
        _assert_same_as_shard(tmp_path / party, ids, dense, missing, cat)
    new = frames["leader"].iloc[:3].copy()
    new["city"] = ["atlantis", "", "paris"]
    new.to_csv(tmp_path / "new.csv", index=False)
    frozen, _, _, _, cat, blocks = _read(tmp_path / "leader", tmp_path / "new.csv")
    city = frozen.table.cat_names.index("city")
    assert cat[0, city] == OOV_ID and cat[1, city] == MISSING_ID and cat[2, city] > OOV_ID
    assert frozen.oov == 1 and frozen.cat_values == 2
    assert blocks[0].label.tolist() == [int(c == "yes") for c in new["churn"]]
    assert blocks[0].label_valid.all()


def test_a_new_row_with_a_missing_or_invalid_label_is_read_and_only_marked(tmp_path):
    """A table shard's leader file of new rows whose label is blank, NA or no class at all (an outcome not known yet):
    every row is read and transformed (before, the file was refused with a DataError), and `label_valid` marks the
    rows whose label the metrics may use."""
    # Prepare
    from vfl.config.table_schema import SchemaConfig
    from vfl.data.prepare import PrepareOptions
    from vfl.data.prepare_table import prepare_table

    frame = own_table(400, seed=4)["leader"]
    frame.to_csv(tmp_path / "leader.csv", index=False)
    prepare_table(
        str(tmp_path / "leader.csv"),
        str(tmp_path / "s"),
        "leader",
        SchemaConfig(**SCHEMAS["leader"]),
        "binary",
        PrepareOptions(),
    )
    new = frame.iloc[:6].copy()
    new["churn"] = ["yes", "", "NA", "maybe", "no", " "]
    new.to_csv(tmp_path / "new.csv", index=False)
    # Execute
    _, ids, dense, _, _, blocks = _read(tmp_path / "s", tmp_path / "new.csv")
    # Assert: six rows, the same features as with valid labels; labels valid only for "yes" and "no"
    _, ids_ok, dense_ok, _, _, _ = _read(tmp_path / "s", tmp_path / "leader.csv")
    assert ids.size == 6 and np.array_equal(dense, dense_ok[:6]) and np.array_equal(ids, ids_ok[:6])
    valid = np.concatenate([b.label_valid for b in blocks])
    assert valid.tolist() == [True, False, False, False, True, False]
    assert np.concatenate([b.label for b in blocks])[valid].tolist() == [1, 0]
