"""Every registered bottom and top exports to ONNX and scores as torch does: the built-in models of the registry
(vfl/models/registry.py) through vfl/inference/export/onnx_engine.py (what export writes), on a dummy batch of a small
schema, each output mapping (binary probability, K class probabilities, regression value)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

NAMES = ["dense", "dense_missing", "cat"]


def _schema():
    from vfl.models.inputs import InputSchema

    return InputSchema(("a", "b", "c"), ("d", "e"), (5, 9))


def _feeds(names, inputs) -> dict:
    return {n: t.numpy() for n, t in zip(names, inputs)}


@pytest.mark.parametrize("name", ["wide_deep", "deepfm", "dcn_v2", "mlp"])
def test_every_registered_bottom_exports_and_cuts_as_torch_does(name):
    from vfl.config.model_sections import BottomConfig
    from vfl.inference.export.onnx_engine import module_to_onnx, onnx_max_diff
    from vfl.models.registry import BOTTOMS, build_bottom

    # Prepare: the bottom as the registry builds it, a batch of 64 rows
    assert name in BOTTOMS
    bottom = build_bottom(BottomConfig(name=name, embedding_dim=4, hidden=(8,), cut_dim=3), _schema(), 0, "p").eval()
    batch = _schema().dummy_batch(64, seed=1)
    inputs = (batch["numeric"], batch["numeric_missing"], batch["categorical"])
    # Execute
    model, why = module_to_onnx(bottom, inputs, NAMES, "cut")
    # Assert: exported cleanly, onnxruntime's cut equals torch's
    assert model is not None, why
    with torch.no_grad():
        want = bottom(*inputs).numpy()
    assert onnx_max_diff(model.SerializeToString(), _feeds(NAMES, inputs), want) < 1e-6


def test_the_registry_has_no_bottom_this_test_misses():
    from vfl.models.registry import BOTTOMS

    assert set(BOTTOMS) == {"wide_deep", "deepfm", "dcn_v2", "mlp"}


@pytest.mark.parametrize(
    "top, task", [("linear", ("binary", None)), ("mlp", ("multiclass", 4)), ("interaction", ("regression", None))]
)
def test_every_top_and_output_mapping_exports_and_scores_as_torch_does(top, task):
    from vfl.config.model_sections import BottomConfig, TopConfig
    from vfl.data.task import Task
    from vfl.inference.export.onnx_engine import module_to_onnx, onnx_max_diff
    from vfl.inference.party_model import scorer
    from vfl.models.registry import TOPS, build_bottom, build_top

    # Prepare: the leader's scorer (bottom, followers' cuts, top, output mapping); a regression target scale
    assert top in TOPS
    kind = Task(task[0], task[1]) if task[1] else Task(task[0])
    bottom = build_bottom(BottomConfig(name="wide_deep", embedding_dim=4, hidden=(8,), cut_dim=2), _schema(), 0, "p")
    head = build_top(
        TopConfig(name=top, hidden=(8,)) if top != "linear" else TopConfig(name="linear"), (2, 3), 0, kind.outputs
    )
    head.target = (3.0, 2.0)
    module = scorer(bottom.eval(), head.eval(), kind)
    batch = _schema().dummy_batch(64, seed=2)
    inputs = (batch["numeric"], batch["numeric_missing"], batch["categorical"], torch.randn(64, 3))
    names = [*NAMES, "follower_cuts"]
    # Execute
    model, why = module_to_onnx(module, inputs, names, "score")
    # Assert
    assert model is not None, why
    with torch.no_grad():
        want = module(*inputs).numpy()
    assert want.shape == ((64, 4) if kind.kind == "multiclass" else (64,))
    if kind.kind == "multiclass":
        assert np.allclose(want.sum(1), 1.0)
    assert onnx_max_diff(model.SerializeToString(), _feeds(names, inputs), want) < 1e-6
