"""Multi-class data: K-class label columns in prepare, the K-class synthetic generator with its Bayes
accuracy, the digits shards, and the leader's check of train.task against its shard."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.criteo_lines import raw_line, write_lines
from vfl.data.errors import DataError
from vfl.data.parties import load_parties
from vfl.data.prepare import PrepareOptions, prepare
from vfl.data.readers.tokenizer import parse_block
from vfl.data.shards import PartyShard
from vfl.labeldp.release import leader_task


def test_class_id_labels_parse_below_k_and_others_are_named_bad_lines():
    # Prepare
    lines = [raw_line(label=v) for v in ("0", "9", "12", "10", "x", "")]
    # Execute
    block, bad = parse_block("".join(x + "\n" for x in lines).encode(), 0, False, num_classes=11)
    binary, bad_binary = parse_block("".join(x + "\n" for x in lines).encode(), 0, False)
    # Assert: 0, 9, 10 are class ids of an 11-class label; 12, x and an empty label are refused
    assert block.label.tolist() == [0, 9, 10]
    assert [(b.line_index, b.reason) for b in bad] == [
        (2, "label must be a class id in 0..10"),
        (4, "label must be a class id in 0..10"),
        (5, "label must be a class id in 0..10"),
    ]
    assert binary.label.tolist() == [0] and len(bad_binary) == 5  # the binary parser is unchanged
    with pytest.raises(ValueError, match=r"num_classes must be in \[2, 127\], got 500"):
        parse_block(b"", 0, False, num_classes=500)


def test_prepare_with_num_classes_records_the_task_on_the_leader_only(tmp_path):
    # Prepare
    src = write_lines(tmp_path / "k.tsv", [raw_line(label=str(i % 4)) for i in range(400)])
    bad = write_lines(tmp_path / "bad.tsv", [raw_line(label="7")] * 3)
    # Execute
    prepare(src, str(tmp_path / "out"), load_parties(None), PrepareOptions(num_classes=4, hash_buckets=100))
    leader = json.loads((tmp_path / "out/leader/manifest.json").read_text())
    follower = json.loads((tmp_path / "out/follower0/manifest.json").read_text())
    with pytest.raises(DataError) as strict:
        prepare(bad, str(tmp_path / "bad"), load_parties(None), PrepareOptions(num_classes=4, strict=True))
    with pytest.raises(DataError) as domain:
        prepare(src, str(tmp_path / "k1"), load_parties(None), PrepareOptions(num_classes=1))
    # Assert
    assert leader["label"]["task"] == "multiclass" and leader["label"]["num_classes"] == 4
    assert sum(sum(v) for v in leader["label"]["class_counts"].values()) == 400
    assert "label" not in follower and "positives" not in follower
    assert PartyShard(str(tmp_path / "out/leader")).num_classes == 4
    assert PartyShard(str(tmp_path / "out/follower0")).num_classes is None
    assert "line 1: label must be a class id in 0..3" in str(strict.value)
    assert "num_classes must be an integer in [2, 127], got 1" in str(domain.value)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "k1").exists()


def test_synthetic_k_class_data_spreads_signal_and_knows_its_bayes_accuracy(shards_k10):
    # Prepare
    leader = json.loads((shards_k10 / "leader/manifest.json").read_text())
    truth = np.load(leader["truth_path"])
    labels = np.concatenate([np.load(shards_k10 / f"leader/{s}/labels.npy") for s in ("train", "valid", "test")])
    # Execute
    bayes = leader["bayes_test_accuracy"]
    # Assert: (rows, 10) probabilities; the Bayes classifier beats the majority class by far and stays
    # below 1 (a random label given x); every class occurs
    assert truth.shape == (6000, 10) and np.allclose(truth.sum(axis=1), 1.0, atol=1e-5)
    majority = np.bincount(labels, minlength=10).max() / labels.size
    assert majority + 0.2 < bayes < 0.95
    assert np.bincount(labels, minlength=10).min() > 0


def test_digits_shards_split_images_left_right_with_ten_classes(tmp_path):
    # Prepare
    from vfl.data.synth.digits import write_digits_shards

    # Execute
    m = write_digits_shards(str(tmp_path / "digits"))
    leader, follower = PartyShard(str(tmp_path / "digits/leader")), PartyShard(str(tmp_path / "digits/follower0"))
    # Assert: 1797 images, 32 pixels each side, aligned ids, labels (10 classes) on the leader only
    assert sum(m["rows"].values()) == 1797 and leader.num_classes == 10 and follower.num_classes is None
    assert leader.n_dense == follower.n_dense == 32 and leader.field_sizes == []
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(leader.split(s).ids, follower.split(s).ids)
    assert follower.split("train").labels is None
    assert set(np.unique(leader.split("train").labels)) == set(range(10))
    fm = json.loads((tmp_path / "digits/follower0/manifest.json").read_text())
    assert "label" not in fm and "source" not in fm
    with pytest.raises(DataError, match="already exists"):
        write_digits_shards(str(tmp_path / "digits"))


def test_the_leader_refuses_a_task_its_shard_does_not_hold(shards_small, shards_k10):
    # Prepare
    binary, multi = PartyShard(str(shards_small / "leader")), PartyShard(str(shards_k10 / "leader"))
    # Execute / Assert
    assert leader_task("binary", binary).classes is None and leader_task("multiclass", multi).classes == 10
    with pytest.raises(DataError, match="train.task is binary but the leader's shard .* holds 10-class labels"):
        leader_task("binary", multi)
    with pytest.raises(DataError, match="train.task is multiclass but the leader's shard .* holds 0/1 labels"):
        leader_task("multiclass", binary)
