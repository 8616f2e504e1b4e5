"""The model a checkpoint records as trained (vfl/training/trained_model.py): prediction and export of a table run
whose YAMLs leave the model unset build the recorded model whatever the rows of the shard they are given (past
SMALL_TABLE_ROWS the shard alone would size another) and score as training did; a checkpoint written without the
record loads (and passes preflight's resume check) as before; a record that does not validate, or a YAML key that
contradicts it, is refused in one line; a resumed recipe run passes preflight and trains the model it recorded (the
trainers over the in-memory channels)."""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest
import torch

from tests.support.memory_session import memory_run
from tests.support.own_table import SCHEMAS, own_table, prepare_own_tables
from vfl.config.schema import ConfigError, load_config
from vfl.runs.layout import default_checkpoint
from vfl.training import table_defaults

PARTIES = {"leader": "leader", "follower0": "shop"}  # party -> its own_table frame and schema
ROLES = {"leader": "leader", "follower0": "follower"}


def _unset_model(party: str, doc: dict) -> None:
    """A table party's YAML with no model key (the recipe sizes it) and its table's schema."""
    doc.pop("model", None)
    doc["data"]["schema"] = SCHEMAS[PARTIES[party]]


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    """A leader and follower0 trained in memory on 1,500 rows with the tuned recipe's model (16-wide cuts, an mlp
    top): (the run's directory, memory_run's result)."""
    tmp = tmp_path_factory.mktemp("recipe")
    frames = own_table(1500, seed=5)
    prepare_own_tables(tmp, {p: (frames[t], SCHEMAS[t]) for p, t in PARTIES.items()})
    run = memory_run(tmp, tmp / "shards", edit_config=_unset_model, train={"epochs": 2, "batch_size": 256})
    return tmp, run


def _checkpoints(run) -> dict[str, str]:
    return {n: default_checkpoint(load_config(p), None) for n, p in run["configs"].items()}


def _test_rows(party: str, cfg):
    from vfl.data.shards import PartyShard

    split = PartyShard(cfg.data.path).split("test")
    return split.features(np.arange(len(split)))


@torch.no_grad()
def _scores(bottoms: dict, top, cfgs: dict) -> np.ndarray:
    """The leader's scores of the test split: each party's bottom, the top over the cuts (leader first)."""
    cuts = [bottoms[n](*_test_rows(n, cfgs[n])) for n in ("leader", "follower0")]
    return torch.sigmoid(top(torch.cat(cuts, dim=1)).float()).numpy()


def _trained_scores(run, cfgs) -> np.ndarray:
    bottoms = {n: p.eval_model().eval() for n, p in run["parties"].items()}
    return _scores(bottoms, run["leader"].top.eval_model().eval(), cfgs)


def _loaded(cfgs: dict, checkpoints: dict) -> tuple[dict, dict]:
    """(the config each party's checkpoint resolves to, its loaded (bottom, top)) as predict and serve load them."""
    from vfl.data.shards import PartyShard
    from vfl.inference.party_model import load_party_model
    from vfl.training.trained_model import trained_config

    resolved = {n: trained_config(c, checkpoints[n]) for n, c in cfgs.items()}
    models = {n: load_party_model(c, PartyShard(c.data.path), checkpoints[n])[:2] for n, c in resolved.items()}
    return resolved, models


def _rewrite(src: str, dst: str, change) -> str:
    """A copy of the checkpoint at src with its `extra` changed by change(extra), written as training writes one."""
    from vfl.training.checkpoint import load_checkpoint, save_checkpoint
    from vfl.training.checkpoint_format import checkpoint_meta

    ckpt = load_checkpoint(src)
    extra = dict(ckpt["extra"])
    change(extra)
    save_checkpoint(
        dst, ckpt["party"], ckpt["state"], ckpt["epoch"], ckpt["step"], extra, checkpoint_meta(src)["resume"]
    )
    return dst


def test_predict_and_export_past_the_small_table_threshold_build_the_checkpoints_model_and_score_as_training(
    recipe_run, monkeypatch, tmp_path
):
    # Prepare: the threshold moved below the shard's 1,500 rows, as a prediction shard past SMALL_TABLE_ROWS would
    # be: from the shard alone, the schema's model (a 2-wide cut, a linear top) would be built
    pytest.importorskip("onnxruntime")
    from vfl.inference.export.cli import export_main
    from vfl.training.checkpoint import load_checkpoint

    tmp, run = recipe_run
    cfgs = {n: load_config(p) for n, p in run["configs"].items()}
    checkpoints = _checkpoints(run)
    monkeypatch.setattr(table_defaults, "SMALL_TABLE_ROWS", 1000)
    assert table_defaults.table_model_of_shard(cfgs["leader"]).model.bottom.cut_dim == 2
    # Execute: the model predict and serve load, and each party's export
    resolved, models = _loaded(cfgs, checkpoints)
    out = str(tmp_path / "export")
    codes = {
        n: export_main(["--config", run["configs"][n], "--data", cfgs[n].data.path, "--out", out], ROLES[n])
        for n in cfgs
    }
    # Assert: the recorded model (the recipe's 16-wide cut, its mlp top) scoring the test rows as training's models do
    assert resolved["leader"].model.bottom.cut_dim == resolved["follower0"].model.bottom.cut_dim == 16
    assert resolved["leader"].model.top.name == "mlp" and resolved["leader"].model.top.hidden == (128,)
    got = _scores({n: m[0] for n, m in models.items()}, models["leader"][1], cfgs)
    np.testing.assert_allclose(got, _trained_scores(run, cfgs), rtol=0, atol=1e-6)
    assert codes == {"leader": 0, "follower0": 0}
    assert os.path.exists(os.path.join(out, "leader", "export.json"))
    # the checkpoint's `extra` gained the record and nothing else
    extra = load_checkpoint(checkpoints["leader"])["extra"]
    assert set(extra) == {"label_dp_release", "label_dp_key", "loop", "cut_dims", "run", "model_config"}
    assert extra["model_config"]["bottom"]["hidden"] == [256, 128] and extra["model_config"]["top"]["name"] == "mlp"


def test_a_checkpoint_without_the_record_loads_as_before(recipe_run, tmp_path):
    # Prepare: each party's checkpoint written again without `model_config` (as before the record existed)
    from vfl.preflight import check_resume
    from vfl.training.trained_model import stored_model

    tmp, run = recipe_run
    cfgs = {n: load_config(p) for n, p in run["configs"].items()}
    old = {
        n: _rewrite(path, str(tmp_path / os.path.basename(path)), lambda extra: extra.pop("model_config"))
        for n, path in _checkpoints(run).items()
    }
    # Execute: predict's load, and preflight's check of a resume from it
    resolved, models = _loaded(cfgs, old)
    for n, p in run["configs"].items():
        with open(os.path.join(cfgs[n].data.path, "manifest.json")) as f:
            check_resume(load_config(p, {"train.resume_from": old[n], "train.epochs": 3}), json.load(f))
    # Assert: no record; the model resolved from the same shard, scoring as training did
    assert stored_model(old["leader"]) is None and resolved["leader"].model.bottom.cut_dim == 16
    got = _scores({n: m[0] for n, m in models.items()}, models["leader"][1], cfgs)
    np.testing.assert_allclose(got, _trained_scores(run, cfgs), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "change, needle, sidecar",
    [
        (
            lambda m: m["bottom"].update(cut_dim=1),
            "bottom.cut_dim must be an integer in [2, 4096], got cut_dim=1",
            True,
        ),
        (lambda m: m["bottom"].update(hidden="wide"), "bottom.hidden", False),  # from the checkpoint itself
        (lambda m: m.update(layers=3), "unknown key 'layers'", True),
    ],
    ids=["cut-out-of-domain", "hidden-not-a-list-no-sidecar", "unknown-key"],
)
def test_a_record_that_does_not_validate_is_refused_in_one_line(recipe_run, tmp_path, capsys, change, needle, sidecar):
    # Prepare: the leader's checkpoint with its record edited (the sidecar removed: read from the checkpoint itself)
    from vfl.data.shards import PartyShard
    from vfl.inference.export.cli import export_main
    from vfl.inference.party_model import ModelLoadError, load_party_model
    from vfl.training.trained_model import trained_config

    tmp, run = recipe_run
    cfg = load_config(run["configs"]["leader"])
    path = _rewrite(_checkpoints(run)["leader"], str(tmp_path / "leader_final.pt"), lambda e: change(e["model_config"]))
    if not sidecar:
        os.unlink(path + ".json")
    # Execute
    with pytest.raises(ConfigError) as resolving:
        trained_config(cfg, path)
    with pytest.raises(ModelLoadError) as loading:
        load_party_model(cfg, PartyShard(cfg.data.path), path)
    code = export_main(
        ["--config", run["configs"]["leader"], "--checkpoint", path, "--out", str(tmp_path / "x")], "leader"
    )
    err = capsys.readouterr().err
    # Assert: one line naming the checkpoint, the record and the problem, from every reader
    for text in (str(resolving.value), str(loading.value), err.strip()):
        assert "\n" not in text and path in text and "model_config" in text and needle in text, text
    assert code == 2


def test_a_yaml_key_that_contradicts_the_record_is_refused_in_one_line(recipe_run):
    # Prepare: the follower's YAML now sets its bottom's hidden layers
    from vfl.training.trained_model import trained_config

    tmp, run = recipe_run
    cfg = load_config(run["configs"]["follower0"], {"model.bottom.hidden": [64]})
    # Execute
    with pytest.raises(ConfigError) as e:
        trained_config(cfg, _checkpoints(run)["follower0"])
    # Assert
    assert "\n" not in str(e.value) and "model.bottom.hidden [256, 128] (the config sets [64])" in str(e.value)


def test_a_resumed_recipe_run_passes_preflight_and_trains_the_model_it_recorded(recipe_run, monkeypatch, tmp_path):
    # Prepare: each party resumes its final checkpoint for a third epoch, its YAML still without a model key, the
    # threshold below its shard's rows (the recipe now would build another model)
    from vfl.preflight import check_resume
    from vfl.training.trained_model import stored_model

    tmp, run = recipe_run
    checkpoints = {n: str(tmp_path / os.path.basename(p)) for n, p in _checkpoints(run).items()}
    for n, p in _checkpoints(run).items():
        shutil.copy(p, checkpoints[n])
        shutil.copy(p + ".json", checkpoints[n] + ".json")

    def resume(party: str, doc: dict) -> None:
        _unset_model(party, doc)
        doc["data"]["path"] = str(tmp / "shards" / party)
        doc["train"]["resume_from"] = checkpoints[party]

    monkeypatch.setattr(table_defaults, "SMALL_TABLE_ROWS", 1000)
    train = {"epochs": 3, "batch_size": 256}
    # Execute: preflight (before torch), then the resumed run
    for n, p in run["configs"].items():
        cfg = load_config(p, {"train.resume_from": checkpoints[n], "train.epochs": 3})
        check_resume(cfg, {})
    again = memory_run(tmp_path, tmp / "shards", edit_config=resume, train=train)
    # Assert: every party built the bottom its checkpoint recorded, and trained on from it
    for n, party in again["parties"].items():
        assert party.bottom_config == stored_model(checkpoints[n]).bottom and party.cut_dim == 16
    assert again["leader"].cfg.model.top.name == "mlp"
    assert again["leader"].loop.global_step > run["leader"].loop.global_step


PLANTED = "planted_bottom_module"


@pytest.mark.parametrize(
    "section, change, overrides, needle",
    [
        ("bottom", lambda b: (b.pop("name"), b.update({"import": f"{PLANTED}:Bottom"})), {}, "model.bottom.import"),
        (
            "bottom",
            lambda b: (b.pop("name"), b.update({"import": f"{PLANTED}:Bottom"})),
            {"model.bottom.name": "wide_deep"},  # the YAML names the built-in: still not the record's code
            "model.bottom.import",
        ),
        ("bottom", lambda b: b.update(dropout=0.5), {}, "model.bottom.dropout 0.5"),
        ("bottom", lambda b: b.update(hidden=[4097]), {}, "model.bottom.hidden [4097]"),
        ("top", lambda t: t.update(hidden=[64] * 17), {}, "at most 16 layers"),
    ],
    ids=["import", "import-beside-a-named-bottom", "dropout", "width", "depth"],
)
def test_a_record_naming_code_or_a_model_the_config_never_trains_is_refused_before_anything_is_built(
    recipe_run, tmp_path, monkeypatch, section, change, overrides, needle
):
    # Prepare: the leader's checkpoint with a record a run of this YAML could not have written (its sha256 header
    # recomputed, as anyone who can write the run directory can); a module on sys.path that marks its import
    from vfl.training.trained_model import trained_config, training_model

    tmp, run = recipe_run
    (tmp_path / f"{PLANTED}.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(run["configs"]["leader"], overrides)
    path = _rewrite(
        _checkpoints(run)["leader"], str(tmp_path / "leader_final.pt"), lambda e: change(e["model_config"][section])
    )
    resuming = cfg.model_copy(update={"train": cfg.train.model_copy(update={"resume_from": path})})
    # Execute / Assert: every reader refuses it in one line naming the key, and nothing was imported
    for read in (lambda: trained_config(cfg, path), lambda: training_model(resuming, 1500)):
        with pytest.raises(ConfigError) as e:
            read()
        assert "\n" not in str(e.value) and path in str(e.value) and needle in str(e.value), str(e.value)
    assert not (tmp_path / "imported").exists() and PLANTED not in sys.modules


def test_the_records_a_table_run_writes_pass_the_check_for_every_party(recipe_run):
    # Prepare: the power side of the check above: the recipe's records (a tuned bottom, the leader's mlp top), read
    # with the YAMLs they were trained with
    from vfl.training.trained_model import trained_config

    tmp, run = recipe_run
    checkpoints = _checkpoints(run)
    # Execute
    cfgs = {p: trained_config(load_config(run["configs"][p]), checkpoints[p]) for p in ("leader", "follower0")}
    # Assert
    for cfg in cfgs.values():
        assert cfg.model.bottom.cut_dim == 16 and tuple(cfg.model.bottom.hidden) == (256, 128)
    assert cfgs["leader"].model.top.name == "mlp" and tuple(cfgs["leader"].model.top.hidden) == (128,)
