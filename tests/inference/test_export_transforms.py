"""The ONNX form of a party's frozen transforms (vfl/inference/export/onnx_transforms.py) gives, from the raw values of
its own file, exactly the arrays `prepare` wrote to its shard: every transform of a table schema, and the Criteo
preset's vocabulary and hashing modes. An unseen category gets the out-of-vocabulary id, a missing one id 0."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.support.own_table import SCHEMAS, own_table

ort = pytest.importorskip("onnxruntime")

SPLITS = ("train", "valid", "test")


def _run(table, numeric, numeric_missing, cat_key, cat_missing):
    from vfl.inference.export.onnx_transforms import transforms_model

    session = ort.InferenceSession(transforms_model(table).SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        "numeric": np.asarray(numeric, np.float64),
        "numeric_missing": np.asarray(numeric_missing, bool),
        "cat_key": np.asarray(cat_key, np.uint64).view(np.int64),
        "cat_missing": np.asarray(cat_missing, bool),
    }
    return session.run(None, feeds)


def _shard_arrays(shard_dir, ids):
    """(dense, dense_missing, cat) that prepare wrote for these ids (every split)."""
    parts = {
        n: np.concatenate([np.load(f"{shard_dir}/{s}/{n}.npy") for s in SPLITS])
        for n in ("ids", "dense", "dense_missing", "cat")
    }
    pos = {int(i): k for k, i in enumerate(parts["ids"])}
    rows = np.array([pos[int(i)] for i in ids])
    return parts["dense"][rows], parts["dense_missing"][rows], parts["cat"][rows]


def _prepare_tables(tmp_path, rows=2000):
    from vfl.config.table_schema import SchemaConfig
    from vfl.data.prepare import PrepareOptions
    from vfl.data.prepare_table import prepare_table

    schemas = dict(SCHEMAS)
    # every numeric transform: standardize and log1p (leader), quantile bins and none (shop); hashing (telco)
    schemas["shop"] = {
        "id": "cust",
        "columns": {
            "spend": {"kind": "numeric", "transform": {"quantile_bins": 8}},
            "visits": {"kind": "numeric", "transform": "none"},
        },
    }
    out = {}
    for name, frame in own_table(rows, seed=3).items():
        path = str(tmp_path / f"{name}.csv")
        frame.to_csv(path, index=False)
        schema = SchemaConfig.model_validate(schemas[name])
        shard = str(tmp_path / "shards" / name)
        task = "binary" if name == "leader" else None
        prepare_table(path, shard, name, schema, task, dataclasses.replace(PrepareOptions()), log=lambda line: None)
        out[name] = (path, schema, shard)
    return out


def test_table_transforms_in_onnx_equal_the_shard_prepare_wrote(tmp_path):
    from vfl.data.readers.read_stats import ReadStats
    from vfl.data.readers.table_file import read_table_blocks
    from vfl.inference.export.onnx_transforms import frozen_table

    # Prepare: three parties' own files prepared under schemas that use every transform
    for name, (path, schema, shard) in _prepare_tables(tmp_path).items():
        table = frozen_table(shard)
        (block,) = list(read_table_blocks(path, schema, name == "leader", False, False, ReadStats()))
        # Execute: the raw values of the whole file through the ONNX transforms
        dense, dense_missing, cat = _run(table, block.numeric, block.numeric_missing, block.cat_key, block.cat_missing)
        # Assert: the shard's arrays (float32 within one ulp of numpy's log1p; ids and flags exactly)
        want_dense, want_missing, want_cat = _shard_arrays(shard, block.sample_id)
        np.testing.assert_allclose(dense, want_dense, rtol=2e-7, atol=1e-7, err_msg=name)
        assert np.array_equal(dense_missing, want_missing.astype(np.float32)), name
        assert cat.dtype == np.int64 and np.array_equal(cat, want_cat), name
    assert {
        c.transform for n in ("leader", "shop", "telco") for c in frozen_table(str(tmp_path / "shards" / n)).columns
    } == {"standardize", "log1p", "vocabulary", "quantile_bins", "none", "hash"}


def test_unseen_category_gets_the_out_of_vocabulary_id_and_missing_gets_zero(tmp_path):
    from vfl.data.readers.category_keys import text_keys
    from vfl.inference.export.onnx_transforms import frozen_table

    # Prepare: the leader's shard (city: a vocabulary of five towns); two new rows
    shard = _prepare_tables(tmp_path, rows=600)["leader"][2]
    table = frozen_table(shard)
    keys, missing = text_keys(np.array(["paris", "atlantis", ""], dtype=object))
    # Execute
    _, _, cat = _run(table, np.zeros((3, 2)), np.ones((3, 2), bool), keys.reshape(3, 1), missing.reshape(3, 1))
    # Assert: a known town gets its vocabulary id (>= 2), an unseen one 1, a missing one 0
    vocab = table.categorical[0].vocab
    assert cat[0, 0] == 2 + int(np.searchsorted(vocab, keys[0])) and cat[0, 0] >= 2
    assert cat[1, 0] == 1 and cat[2, 0] == 0


@pytest.mark.parametrize("mode", ["vocabulary", "hash"])
def test_criteo_preset_transforms_in_onnx_equal_the_shard(synth_tiny, tmp_path, mode):
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare
    from vfl.data.presets.criteo import party_schema
    from vfl.data.readers.read_stats import ReadStats
    from vfl.data.readers.table_file import read_table_blocks
    from vfl.inference.export.onnx_transforms import frozen_table

    # Prepare: the Criteo preset's two parties, each from its own raw file
    parties = load_parties(None)
    opts = PrepareOptions(hash_buckets=500, vocab_min_count=3 if mode == "vocabulary" else None)
    out = tmp_path / "shards"
    prepare(str(synth_tiny), str(out), parties, opts)
    for party in parties:
        shard = str(out / party.name)
        schema = party_schema(
            party.dense, party.categorical, None, 500, None
        )  # the raw columns, keyed by the hex scheme
        blocks = list(
            read_table_blocks(str(out / "raw" / f"{party.name}.tsv"), schema, False, False, False, ReadStats())
        )
        ids = np.concatenate([b.sample_id for b in blocks])
        numeric_missing = np.concatenate([b.numeric_missing for b in blocks])
        numeric = np.where(numeric_missing, 0.0, np.concatenate([b.numeric for b in blocks]))
        keys = np.concatenate([b.cat_key for b in blocks])
        cat_missing = np.concatenate([b.cat_missing for b in blocks])
        # Execute
        table = frozen_table(shard)
        dense, dense_missing, cat = _run(table, numeric, numeric_missing, keys, cat_missing)
        # Assert
        want_dense, want_missing, want_cat = _shard_arrays(shard, ids)
        assert table.key_scheme == "hex" and {c.transform for c in table.categorical} == {mode}
        np.testing.assert_allclose(dense, want_dense, rtol=2e-7, atol=1e-7)
        assert np.array_equal(dense_missing, want_missing.astype(np.float32))
        assert np.array_equal(cat, want_cat)
