"""model.bottom.numeric_scaling: the statistics are exact over present values, a missing value stays 0, "none" builds
the old module, "standard" wraps every bottom with buffers that checkpoints, loading and ONNX carry, and a split run
with it equals the centralized reference and scores after loading as its own evaluation did."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from vfl.config.model_sections import BottomConfig
from vfl.config.schema import ConfigError, parse_config
from vfl.models.inputs import InputSchema
from vfl.models.numeric_scaling import NumericScaler, ScaledInputs, numeric_stats, split_numeric_stats
from vfl.models.registry import build_bottom, model_spec

SCHEMA = InputSchema(("a", "b", "c"), ("d", "e"), (5, 9))
SIZES = {"embedding_dim": 4, "hidden": [8], "cut_dim": 3}


def _stats_schema(mean=(8.0, 0.5, -1.0), std=(2.0, 0.25, 1.0)) -> InputSchema:
    return InputSchema(SCHEMA.numeric, SCHEMA.categorical, SCHEMA.vocab_sizes, mean, std)


def test_the_statistics_are_over_present_values_with_std_1_for_a_constant_or_empty_column():
    # Prepare: column 0 present values 1, 3, 5 (row 3 missing, stored 0); column 1 constant 7; column 2 all missing
    dense = np.array([[1, 7, 0], [3, 7, 0], [5, 7, 0], [0, 7, 0]], dtype=np.float32)
    missing = np.array([[0, 0, 1], [0, 0, 1], [0, 0, 1], [1, 0, 1]], dtype=np.float32)
    # Execute: in one chunk, in chunks of 1 row (the pairwise merge), and over the first 2 rows only
    whole, chunked = numeric_stats(dense, missing), numeric_stats(dense, missing, chunk=1)
    first2 = numeric_stats(dense, missing, rows=2)
    # Assert: mean 3 and population std sqrt(8/3); constant column std 1; empty column 0 / 1
    want_std = np.float32(np.sqrt(8 / 3))
    for mean, std in (whole, chunked):
        np.testing.assert_allclose(mean, [3.0, 7.0, 0.0], rtol=0, atol=1e-6)
        np.testing.assert_allclose(std, [want_std, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(first2[0], [2.0, 7.0, 0.0])
    np.testing.assert_allclose(first2[1], [1.0, 1.0, 1.0])
    assert whole[0].dtype == whole[1].dtype == np.float32


def test_the_chunked_statistics_keep_their_precision_far_from_zero():
    # Prepare: values around 1e6 with std 3 (a sum of squares in float32 would lose them), 30% missing
    rng = np.random.default_rng(0)
    dense = rng.normal(1e6, 3.0, (5000, 2))
    missing = (rng.random((5000, 2)) < 0.3).astype(np.float32)
    dense[missing == 1] = 0
    # Execute
    mean, std = numeric_stats(dense, missing, chunk=333)
    # Assert
    for j in range(2):
        present = dense[missing[:, j] == 0, j]
        assert mean[j] == pytest.approx(present.mean(), rel=1e-7)
        assert std[j] == pytest.approx(present.std(), rel=1e-5)


def test_the_scaler_standardizes_present_values_and_keeps_missing_ones_at_zero():
    # Prepare
    scaler = NumericScaler(2, (8.0, 0.5), (2.0, 0.25))
    dense = torch.tensor([[10.0, 0.0], [6.0, 1.0]])
    missing = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    # Execute / Assert
    assert torch.equal(scaler(dense, missing), torch.tensor([[1.0, 0.0], [-1.0, 2.0]]))
    assert [name for name, _ in scaler.named_buffers()] == ["mean", "std"] and not list(scaler.parameters())
    with pytest.raises(ValueError, match=r"one value per numeric column \(2\), got \(3,\)"):
        NumericScaler(2, (0.0, 0.0, 0.0))


@pytest.mark.parametrize("name", ["wide_deep", "deepfm", "dcn_v2", "mlp"])
def test_none_builds_the_old_module_and_standard_wraps_it_with_two_buffers(name):
    # Prepare
    plain = BottomConfig.model_validate({**SIZES, "name": name})
    scaled = BottomConfig.model_validate({**SIZES, "name": name, "numeric_scaling": "standard"})
    # Execute
    old, new = build_bottom(plain, SCHEMA, 1, "p"), build_bottom(scaled, _stats_schema(), 1, "p")
    # Assert: "none" is the registry's module itself, its spec as before; "standard" the same weights (same seed)
    # behind a scaler, whose buffers are no parameters (preflight's counts hold), and another spec
    assert not isinstance(old, ScaledInputs) and "numeric_scaling" not in model_spec(plain)
    assert isinstance(new, ScaledInputs) and type(new.inner) is type(old)
    assert list(new.state_dict()) == [f"inner.{k}" for k in old.state_dict()] + ["scaler.mean", "scaler.std"]
    assert all(torch.equal(v, new.state_dict()[f"inner.{k}"]) for k, v in old.state_dict().items())
    assert sum(p.numel() for p in new.parameters()) == sum(p.numel() for p in old.parameters())
    assert '"numeric_scaling":"standard"' in model_spec(scaled) and model_spec(scaled) != model_spec(plain)
    # the cut is the inner bottom's on the standardized values
    batch = SCHEMA.dummy_batch(8, seed=2)
    x, m, c = batch["numeric"], batch["numeric_missing"], batch["categorical"]
    with torch.no_grad():
        want = old.eval()((x - torch.tensor([8.0, 0.5, -1.0])) / torch.tensor([2.0, 0.25, 1.0]), m, c)
        assert torch.allclose(new.eval()(x, m, c), want, atol=1e-6)


def test_a_scaled_bottom_built_without_statistics_takes_them_from_its_checkpoint_and_exports_them():
    # Prepare: a trained-looking scaled bottom, and one built without statistics (0 / 1: a schema that holds none)
    pytest.importorskip("onnxruntime")
    from vfl.inference.export.onnx_engine import module_to_onnx, onnx_max_diff

    cfg = BottomConfig.model_validate({**SIZES, "numeric_scaling": "standard"})
    trained = build_bottom(cfg, _stats_schema(), 0, "p").eval()
    loaded = build_bottom(cfg, SCHEMA, 0, "p").eval()
    assert torch.equal(loaded.scaler.std, torch.ones(3))
    batch = SCHEMA.dummy_batch(64, seed=1)
    inputs = (batch["numeric"] * 3 + 8, batch["numeric_missing"], batch["categorical"])
    # Execute
    loaded.load_state_dict(trained.state_dict())
    model, why = module_to_onnx(loaded, inputs, ["dense", "dense_missing", "cat"], "cut")
    # Assert: the same cut as the trained module, in torch and in onnxruntime
    with torch.no_grad():
        want = trained(*inputs)
        assert torch.equal(loaded(*inputs), want)
    assert model is not None, why
    feeds = {n: t.numpy() for n, t in zip(["dense", "dense_missing", "cat"], inputs)}
    assert onnx_max_diff(model.SerializeToString(), feeds, want.numpy()) < 1e-5


def test_a_user_module_sees_the_standardized_values(monkeypatch):
    # Prepare: examples/custom_model's bottom (it takes the batch keyed by kind), scaled
    from tests.support.paths import REPO
    from vfl.models.user_module import UserBottom

    monkeypatch.syspath_prepend(str(REPO / "examples" / "custom_model"))
    cfg = BottomConfig.model_validate(
        {"import": "my_models:HashedFieldsBottom", "cut_dim": 3, "numeric_scaling": "standard"}
    )
    seen = []
    # Execute
    bottom = build_bottom(cfg, _stats_schema(), 0, "p")
    bottom.inner.module.register_forward_pre_hook(lambda mod, args: seen.append(args[0]["numeric"]))
    bottom(torch.tensor([[10.0, 1.0, 0.0]]), torch.tensor([[0.0, 0.0, 1.0]]), torch.zeros(1, 2, dtype=torch.long))
    # Assert
    assert isinstance(bottom.inner, UserBottom)
    assert torch.equal(seen[0], torch.tensor([[1.0, 2.0, 0.0]]))


def test_an_unknown_scaling_is_refused_naming_the_value_and_the_choices():
    doc = {"role": "follower", "party": "f", "network": {"connect": "tcp://127.0.0.1:1"}, "data": {"path": "x"}}
    with pytest.raises(ConfigError, match=r"numeric_scaling must be one of \['none', 'standard'\], got 'zscore'"):
        parse_config({**doc, "model": {"bottom": {"numeric_scaling": "zscore"}}})


def test_split_training_with_standard_scaling_equals_centralized_and_loads_for_scoring(tmp_path, shards_small, procs):
    # Prepare: the small model with numeric_scaling standard on both parties
    from tests.support.party_processes import SMALL_MODEL, party_configs, run_centralized, run_split
    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.inference.party_model import load_party_model, scorer
    from vfl.obs.metrics import test_metrics
    from vfl.training.checkpoint import load_checkpoint

    model = {"bottom": {**SMALL_MODEL["bottom"], "numeric_scaling": "standard"}}
    cfgs = party_configs(str(tmp_path), str(shards_small), train={"batch_size": 800}, model=model)
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the same steps as the centralized reference (the same statistics on both sides)
    assert len(split["step_losses"]) == len(central["step_losses"]) == split["steps"] > 10
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)
    assert abs(split["test_auc"] - central["test_auc"]) < 1e-4
    # each checkpoint holds its party's own training-split statistics (not 0 / 1)
    cuts, parts = [], {}
    for party in ("follower0", "leader"):
        cfg = load_config(cfgs[party])
        shard = PartyShard(cfg.data.path)
        path = str(tmp_path / "out" / "checkpoints" / f"{party}_final.pt")
        state = load_checkpoint(path)["state"]["bottom"]["model"]
        mean, std = split_numeric_stats(shard.split("train"))
        assert torch.equal(state["scaler.mean"], torch.tensor(mean)) and torch.equal(
            state["scaler.std"], torch.tensor(std)
        )
        assert not torch.equal(state["scaler.std"], torch.ones_like(state["scaler.std"]))
        parts[party] = (cfg, shard, load_party_model(cfg, shard, path))
    # the serving / export loader scores the test split as the training run's evaluation did
    test = {p: parts[p][1].split("test") for p in parts}
    assert np.array_equal(np.asarray(test["leader"].ids), np.asarray(test["follower0"].ids))
    rows = np.arange(len(test["leader"]))
    with torch.no_grad():
        cuts.append(parts["follower0"][2][0](*test["follower0"].features(rows)))
        bottom, top = parts["leader"][2][:2]
        scores = scorer(bottom, top, parts["leader"][1].task)(*test["leader"].features(rows), cuts[0]).numpy()
    m = test_metrics(np.asarray(test["leader"].labels), scores)
    assert m["test_auc"] == pytest.approx(split["test_auc"], abs=1e-6)
    # the export writes ONNX whose scores onnxruntime checks against this loaded model
    if importlib.util.find_spec("onnxruntime") is not None:
        from vfl.inference.export.party_export import export_party

        doc = export_party(parts["leader"][0], str(tmp_path / "export"), log=lambda line: None)
        assert doc["files"]["model"] == "model.onnx" and doc["check"]["max_abs_diff"] <= 1e-5
