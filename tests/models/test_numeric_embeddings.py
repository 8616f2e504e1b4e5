"""Numeric embeddings as column transforms (`{embedding: piecewise_linear | periodic}`): the statistics and bins are
fitted on the party's training rows only and come back bit for bit from the shard; a bad declaration is one line
naming the value and its domain; an embedded bottom exports to ONNX scoring as torch does; a split run with embedded
columns on both parties equals the centralized reference (the trainers over the in-memory channel pair)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from tests.support.memory_session import memory_run
from tests.support.own_table import own_table, prepare_own_tables

LEADER_SCHEMA = {
    "id": "cust",
    "columns": {
        "age": {"kind": "numeric", "transform": {"embedding": "piecewise_linear", "bins": 8, "dim": 4}},
        "income": {"kind": "numeric", "transform": "log1p"},
        "city": "categorical",
    },
    "label": {"column": "churn", "classes": ["no", "yes"]},
}
SHOP_SCHEMA = {
    "id": "cust",
    "columns": {
        "spend": {"kind": "numeric", "transform": {"embedding": "periodic", "frequencies": 6, "dim": 3}},
        "visits": {"kind": "numeric", "transform": {"piecewise_linear": {"bins": 4, "dim": 2}}},
    },
}


def _prepare(tmp_path, rows: int = 1500) -> dict[str, tuple[str, str]]:
    """{party: (raw csv, shard dir)}: the leader and follower0 (the shop's columns) prepared from their own files."""
    frames = own_table(rows, seed=5)
    return prepare_own_tables(
        tmp_path, {"leader": (frames["leader"], LEADER_SCHEMA), "follower0": (frames["shop"], SHOP_SCHEMA)}
    )


def test_the_bins_and_statistics_are_fitted_on_training_rows_only_and_restored_bit_identically(tmp_path):
    # Prepare: the leader's age (piecewise-linear, 10% missing) from its own file
    import pandas as pd

    from vfl.data.frozen import FrozenTransforms
    from vfl.data.ids import ids64
    from vfl.data.shards import PartyShard
    from vfl.data.table import quantile_edges
    from vfl.models.inputs import InputSchema

    path, shard_dir = _prepare(tmp_path)["leader"]
    # Execute: what the shard saved, read back as prediction reads it, and as the model reads it
    saved = {c["name"]: c for c in json.loads(open(f"{shard_dir}/schema.json").read())["columns"]}["age"]
    restored = {c.name: c for c in FrozenTransforms.of_shard(shard_dir).table.columns}["age"]
    shard = PartyShard(shard_dir)
    schema = InputSchema.of_shard(shard)
    # Assert: mean, std and edges are those of the training rows' present values (not of every row)
    raw = pd.read_csv(path)
    ids = ids64(raw["cust"].astype(str).tolist())
    train = raw[np.isin(ids, shard.split("train").ids) & raw["age"].notna()]["age"].to_numpy(np.float64)
    everyone = raw["age"].dropna().to_numpy(np.float64)
    assert saved["state"]["mean"] == pytest.approx(train.mean(), rel=1e-12)
    assert saved["state"]["mean"] != pytest.approx(everyone.mean(), rel=1e-9)
    scaled = ((train - saved["state"]["mean"]) / saved["state"]["std"]).astype(np.float32)
    assert saved["state"]["edges"] == quantile_edges(scaled, 8) and len(saved["state"]["edges"]) == 9
    # bit for bit: the shard's state, the prediction path's state and the model's edges are the same numbers
    assert restored.state == saved["state"] and restored.transform == "piecewise_linear"
    (age_embedding,) = [e for e in schema.numeric_embeddings if e is not None]
    assert np.array_equal(np.float32(age_embedding.edges), np.float32(saved["state"]["edges"]))
    assert [float(np.float32(e)) for e in saved["state"]["edges"]] == saved["state"]["edges"]
    # the stored value is the standardized one, as `standardize` would store it
    dense = np.load(f"{shard_dir}/train/dense.npy")[:, list(shard.dense_columns).index("age")]
    assert np.abs(dense).max() < 10 and abs(float(dense.mean())) < 0.2


@pytest.mark.parametrize(
    "transform, needle",
    [
        (
            {"embedding": "fourier"},
            r"transform.embedding must be one of \['piecewise_linear', 'periodic'\], got 'fourier'",
        ),
        (
            {"embedding": "piecewise_linear", "bins": 1},
            r"piecewise_linear.bins must be an integer in \[2, 1024\], got 1",
        ),
        ({"embedding": "periodic", "sigma": 0}, r"periodic.sigma must be a number in \[0.0001, 100.0\], got 0"),
        ({"embedding": "periodic", "bins": 8}, r"periodic has unknown option 'bins'.*allowed: \['dim', 'frequencies'"),
        ({"embedding": "piecewise_linear", "bins_from": "tree"}, r"bins_from must be 'quantile' .* got 'tree'"),
    ],
)
def test_a_bad_embedding_declaration_is_one_line_naming_the_value_and_the_domain(transform, needle):
    from pydantic import ValidationError

    from vfl.config.table_schema import SchemaConfig

    with pytest.raises(ValidationError, match=needle) as err:
        SchemaConfig.model_validate({"id": "i", "columns": {"x": {"kind": "numeric", "transform": transform}}})
    assert "columns.x.transform" in str(err.value)


def test_an_embedded_bottom_exports_to_onnx_scoring_as_torch_does(tmp_path):
    # Prepare: the shop's bottom (periodic and piecewise-linear columns) with every parameter drawn at random (the
    # piecewise-linear part starts at zero otherwise)
    pytest.importorskip("onnxruntime")
    from vfl.config.model_sections import BottomConfig
    from vfl.data.shards import PartyShard
    from vfl.inference.export.onnx_engine import module_to_onnx, onnx_max_diff
    from vfl.models.inputs import InputSchema
    from vfl.models.numeric_embeddings import EmbeddedInputs
    from vfl.models.registry import build_bottom

    shard = PartyShard(_prepare(tmp_path)["follower0"][1])
    cfg = BottomConfig.model_validate({"name": "mlp", "embedding_dim": 4, "hidden": [8], "cut_dim": 3})
    bottom = build_bottom(cfg, InputSchema.of_shard(shard), 0, "follower0").eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in bottom.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    inputs = shard.split("test").features(np.arange(len(shard.split("test"))))
    names = ["dense", "dense_missing", "cat"]
    # Execute
    model, why = module_to_onnx(bottom, inputs, names, "cut")
    # Assert: an embedded bottom, and onnxruntime's cut within 1e-5 of torch's
    assert isinstance(bottom, EmbeddedInputs) and model is not None, why
    with torch.no_grad():
        want = bottom(*inputs)
    assert onnx_max_diff(model.SerializeToString(), {n: t.numpy() for n, t in zip(names, inputs)}, want.numpy()) < 1e-5


def test_numeric_scaling_is_refused_for_a_bottom_with_embedded_columns(tmp_path):
    from vfl.config.model_sections import BottomConfig
    from vfl.data.shards import PartyShard
    from vfl.models.inputs import InputSchema
    from vfl.models.registry import build_bottom
    from vfl.models.user_module import ModelError

    shard = PartyShard(_prepare(tmp_path)["follower0"][1])
    cfg = BottomConfig.model_validate({"name": "mlp", "cut_dim": 3, "numeric_scaling": "standard"})
    with pytest.raises(ModelError, match=r"numeric_scaling 'standard' cannot scale embedded numeric columns"):
        build_bottom(cfg, InputSchema.of_shard(shard, "standard"), 0, "follower0")


def test_split_training_with_embedded_columns_equals_centralized(tmp_path):
    # Prepare: both parties with embedded columns, an MLP top, three epochs with early stopping's evaluations
    from vfl.centralized import train_centralized
    from vfl.config.schema import load_config
    from vfl.obs.metrics import RunLog

    _prepare(tmp_path)
    # Execute: the trainers over the in-memory channel pair, then the centralized reference on the same YAMLs
    run = memory_run(
        tmp_path, tmp_path / "shards", train={"epochs": 3, "batch_size": 128, "eval_every_steps": 4},
        model={"bottom": {"name": "mlp", "embedding_dim": 4, "hidden": [16], "cut_dim": 4}},
        top={"name": "mlp", "hidden": [8]},
    )  # fmt: skip
    split = run["leader"].metrics()
    cfgs = {n: load_config(p) for n, p in run["configs"].items()}
    central = train_centralized(
        cfgs["leader"], [cfgs["follower0"]], str(tmp_path / "central"), RunLog(str(tmp_path / "c.log"), "c")
    )
    # Assert: the same training losses step by step and the same test figures
    losses = lambda m: [h["train_loss"] for h in m["history"] if "train_loss" in h]  # noqa: E731
    assert len(losses(split)) > 3
    np.testing.assert_allclose(losses(split), losses(central), rtol=1e-5, atol=1e-6)
    assert split["test_auc"] == pytest.approx(central["test_auc"], abs=1e-6)
    assert split["test_auc"] > 0.6


def test_the_inner_bottom_sees_the_plain_columns_then_each_embedded_value():
    """inner_schema gives the inner bottom the plain columns then one name per embedded value, and no statistics."""
    from vfl.models.inputs import InputSchema
    from vfl.models.numeric_embeddings import NumericEmbedding, inner_schema

    specs = (NumericEmbedding("periodic", 2, (), 3, 0.1), None, NumericEmbedding("piecewise_linear", 1, (0.0, 1.0)))
    schema = InputSchema(("a", "b", "c"), ("d",), (4,), (0.0,) * 3, (1.0,) * 3, specs)
    inner = inner_schema(schema)
    assert inner.numeric == ("b", "a#0", "a#1", "c#0") and inner.numeric_mean is None
    assert inner.numeric_embeddings is None and dataclasses.is_dataclass(inner)


@pytest.mark.parametrize(
    "column, needle",
    [
        ({"transform": {"piecewise_linear": {"bins": 4}}, "state": {"edges": [0.0, 1.0]}}, "KeyError: 'dim'"),
        (
            {"transform": {"piecewise_linear": {"bins": 4, "dim": 8}}, "state": {"edges": [0.0, 2.0, 1.0]}},
            "edges must be at least 2 finite, strictly increasing numbers",
        ),
        ({"transform": {"periodic": {"dim": 100_000_000, "frequencies": 8, "sigma": 1.0}}}, "dim must be in [1, 1024]"),
    ],
    ids=["no-dim", "unsorted-edges", "huge-dim"],
)
def test_an_edited_schema_json_is_refused_in_one_line_naming_the_file_and_the_column(tmp_path, column, needle):
    # Prepare: a shard's schema.json whose embedded column is not as prepare writes it
    from vfl.models.numeric_embeddings import shard_embeddings

    (tmp_path / "schema.json").write_text(json.dumps({"columns": [{"name": "x", **column}]}))
    # Execute
    with pytest.raises(ValueError) as e:
        shard_embeddings(str(tmp_path), ["x"])
    # Assert
    text = str(e.value)
    assert "\n" not in text and str(tmp_path / "schema.json") in text and "column 'x'" in text and needle in text
