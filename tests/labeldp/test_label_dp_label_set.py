"""A release names the labels it randomizes: the same source file prepared with another label column, another label
encoding (clip) or other label values is another release, drawn independently and charged by the ledger; the same
shard replays its release at no cost.

Statistical checks: the correlation of two independent noise vectors over n rows is compared with 5.5 / sqrt(n)
(two-sided normal tail < 4e-8 per check); disagreement rates with 5.5-sigma binomial bounds (false failure < 4e-8)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from privacy.label.randomized_response import flip_probability
from tests.support.dp_stats import binomial_tolerance
from vfl.config.schema import LabelDPConfig
from vfl.data.shards import PartyShard
from vfl.data.task import Task
from vfl.labeldp.release import LabelDPRelease, leader_training_labels

Z = 5.5
CLIP = (0.0, 40.0)


@pytest.fixture(scope="module")
def claims(tmp_path_factory):
    """One claims file with two real-valued label columns (amount, count); three leader shards prepared from it:
    amount, count, and amount under a narrower declared clip."""
    from vfl.config.table_schema import SchemaConfig
    from vfl.data.prepare import PrepareOptions
    from vfl.data.prepare_table import prepare_table

    root = tmp_path_factory.mktemp("claims")
    rng = np.random.default_rng(3)
    n = 3000
    frame = pd.DataFrame(
        {
            "cust": np.arange(n) * 7 + 1,
            "age": rng.normal(40, 10, n).round(1),
            "amount": np.clip(rng.gamma(2.0, 6.0, n), 0, 40).round(3),
            "count": rng.poisson(8, n).astype(float),
        }
    )
    frame.to_csv(root / "claims.csv", index=False)
    shards = {}
    for name, label in (
        ("amount", {"column": "amount"}),
        ("count", {"column": "count"}),
        ("amount_clip30", {"column": "amount", "clip": [0.0, 30.0]}),
    ):
        schema = SchemaConfig(id="cust", columns={"age": "numeric"}, label=label)
        prepare_table(str(root / "claims.csv"), str(root / name), "leader", schema, "regression", PrepareOptions())
        shards[name] = root / name
    return shards


def _draw(shard_dir, store, mechanism="laplace", eps=1.0):
    release = LabelDPRelease.from_config(
        LabelDPConfig(eps=eps, mechanism=mechanism, clip=CLIP, bins=16, store_dir=str(store)), Task("regression")
    )
    shard = PartyShard(str(shard_dir))
    noisy = leader_training_labels(release, shard)
    truth = np.clip(np.asarray(shard.split("train").labels, np.float64), *CLIP)
    return noisy, truth


def test_two_label_columns_of_one_file_are_two_charged_releases_with_independent_noise(tmp_path, claims):
    # Prepare: both shards come from the same source file (one source.sha256)
    manifests = [json.loads((claims[k] / "manifest.json").read_text()) for k in ("amount", "count")]
    assert manifests[0]["source"]["sha256"] == manifests[1]["source"]["sha256"]
    # Execute: Laplace at eps 1 on the amount, then on the count, in one store
    a, y_a = _draw(claims["amount"], tmp_path / "store")
    b, y_b = _draw(claims["count"], tmp_path / "store")
    # Assert: two datasets and two releases; the second is new and charged with the first (they share every id)
    assert a.report["dataset_id"] != b.report["dataset_id"] and a.release != b.release
    assert b.report["new_release"] is True and b.report["dataset_total_eps"] == 2.0
    assert b.report["overlapping_datasets"] == [a.report["dataset_id"]]
    # Assert: the noise of the two releases is uncorrelated (one keyed noise on both gave y~1 - y~2 = y1 - y2)
    noise_a, noise_b = a.labels.astype(np.float64) - y_a, b.labels.astype(np.float64) - y_b
    assert abs(np.corrcoef(noise_a, noise_b)[0, 1]) < Z / np.sqrt(noise_a.size)
    assert np.mean(np.abs((a.labels - b.labels) - (y_a - y_b)) < 0.02) < 0.05


@pytest.mark.parametrize("mechanism", ["rr_on_bins", "unbiased"])
def test_a_narrower_label_clip_is_another_release_whose_picks_are_independent(tmp_path, claims, mechanism):
    # Prepare: the amount column, then the same column prepared with data.schema.label.clip [0, 30]
    a, y_a = _draw(claims["amount"], tmp_path / "store", mechanism)
    # Execute
    c, y_c = _draw(claims["amount_clip30"], tmp_path / "store", mechanism)
    # Assert: another dataset and release, charged (prior and randomizer of both: 2 x eps)
    assert c.report["dataset_id"] != a.report["dataset_id"] and c.release != a.release
    assert c.report["new_release"] is True and c.report["dataset_total_eps"] == 2.0
    # Assert: on rows whose two labels are equal (amount <= 30), equal outputs are no likelier than under independent
    # picks with the same output frequencies (one keyed pick on both made them equal whenever their bins agreed)
    same = y_a == y_c
    equal = a.labels[same] == c.labels[same]
    values_a, counts_a = np.unique(a.labels[same], return_counts=True)
    freq_c = {v: k / same.sum() for v, k in zip(*np.unique(c.labels[same], return_counts=True))}
    want = float(sum(k / same.sum() * freq_c.get(v, 0.0) for v, k in zip(values_a, counts_a)))
    assert equal.mean() - want < binomial_tolerance(int(same.sum()), want) + 0.02


def test_the_same_shard_replays_its_release_at_no_cost(tmp_path, claims):
    # Execute
    a, _ = _draw(claims["count"], tmp_path / "store", "rr_on_bins")
    b, _ = _draw(claims["count"], tmp_path / "store", "rr_on_bins")
    # Assert
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.release == b.release and b.report["new_release"] is False and b.report["dataset_total_eps"] == 1.0


def test_changed_labels_under_one_manifest_are_a_new_release_with_independent_flips(tmp_path, shards_small):
    # Prepare: a copy of the binary leader shard whose training labels differ on 10% of rows (same manifest, so the
    # same source digest and label encoding: only the label set's keyed digest tells them apart)
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shards_small / "leader", copy)
    labels = np.load(copy / "train" / "labels.npy")
    changed = np.random.default_rng(0).random(labels.size) < 0.1
    np.save(copy / "train" / "labels.npy", np.where(changed, 1 - labels, labels).astype(labels.dtype))
    release = LabelDPRelease.from_config(LabelDPConfig(eps=1.0, store_dir=str(tmp_path / "store")))
    # Execute
    a = leader_training_labels(release, PartyShard(str(shards_small / "leader")))
    b = leader_training_labels(release, PartyShard(str(copy)))
    # Assert: one dataset, two releases, both charged; on the unchanged rows the flips are independent
    assert a.report["dataset_id"] == b.report["dataset_id"] and a.release != b.release
    assert b.report["new_release"] is True and b.report["dataset_total_eps"] == 2.0
    rho = flip_probability(1.0)
    want, n = 2 * rho * (1 - rho), int((~changed).sum())
    assert abs(np.mean(a.labels[~changed] != b.labels[~changed]) - want) < binomial_tolerance(n, want)


def test_the_label_set_digest_is_keyed_and_names_every_id_and_label():
    # Prepare
    from privacy.label.ledger.release_names import label_set_digest

    key, other = bytes(range(32)), bytes(range(1, 33))
    ids, y = np.arange(5, dtype=np.int64), np.array([0.5, 1.0, 2.0, 3.0, 4.0], np.float32)
    digest = lambda k, i, v: label_set_digest(k, [("train", i, v)])  # noqa: E731
    # Execute
    base = digest(key, ids, y)
    # Assert: a pure function of the key, the ids, the labels and their order
    assert base == digest(key, ids.copy(), y.astype(np.float64))
    assert len({base, digest(other, ids, y), digest(key, ids + 1, y), digest(key, ids, y + 0.5)}) == 4
    assert base != digest(key, ids[::-1], y[::-1])
    with pytest.raises(ValueError, match="one per row"):
        digest(key, ids[:4], y)


def test_the_dataset_id_names_the_label_column_and_encoding_not_its_counts():
    # Prepare
    from privacy.label.ledger.release_names import dataset_id

    sha = "ab" * 32
    amount = {"column": "amount", "task": "regression", "counts": {"train": [1]}}
    # Execute / Assert
    assert dataset_id(sha, amount) == dataset_id(sha, {**amount, "counts": {"train": [2]}})
    assert dataset_id(sha, amount) != dataset_id(sha, {**amount, "column": "count"})
    assert dataset_id(sha, amount) != dataset_id(sha, {**amount, "clip": [0.0, 30.0]})
