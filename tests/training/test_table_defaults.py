"""Defaults that fit the table: a table party whose YAML leaves the schedule and model unset gets them sized from its
rows (batch ~1% of the training rows within [64, 4096], >= 300 steps, early stopping; an unnamed bottom the tuned
recipe: wide_deep with a 16-wide cut, an mlp top, 1200 steps; written into the config once for every reader),
said on the console and recorded in metrics.json; explicit values win (every example YAML is left as it is); a
table run under ~50 steps is refused with the numbers unless train.allow_short_run."""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest
import yaml

from tests.support.own_table import SCHEMAS, own_table
from tests.support.party_processes import party_configs, run_split
from tests.support.paths import REPO
from vfl.config.schema import ConfigError, load_config, parse_config
from vfl.training.table_defaults import RECIPE_STEPS, check_short_run, recipe_lr, sized_bottom, sized_schedule

TABLE = {"id": "cust", "columns": {"age": "numeric"}, "label": {"column": "y"}}


def _leader(train: dict | None = None, model: dict | None = None, schema: dict | None = TABLE):
    doc = {
        "role": "leader",
        "party": "bank",
        "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["shop"]},
        "data": {"path": "unused", **({"schema": schema} if schema else {})},
        "train": train or {},
        "model": model or {},
    }
    return parse_config(doc)


def test_an_unset_schedule_and_model_are_sized_from_a_census_sized_table():
    # Prepare: the census case: 39,073 training rows of 48,842, nothing set
    cfg = _leader()
    # Execute
    sized, filled = sized_schedule(cfg, 39_073)
    recipe, _ = sized_schedule(cfg, 39_073, 48_842)
    bottom, model_filled = sized_bottom(cfg, 48_842)
    # Assert: batch ~1% of the rows, >= 300 steps (the recipe's 1200 when it builds the model), early stopping on
    # auc, the recipe's bottom with its 16-wide cut
    assert sized.train.batch_size == 391 and sized.train.epochs == 3 and 3 * -(-39_073 // 391) >= 300
    assert recipe.train.epochs == 12 and 12 * -(-39_073 // 391) >= RECIPE_STEPS == 1200
    assert sized.train.lr == 1e-3 and recipe.train.lr == 0.001236  # 1e-3 x sqrt(391 / 256)
    assert sized.train.early_stopping.metric == "auc" and sized.train.early_stopping.patience == 3
    assert filled["train.batch_size"] == 391 and filled["train.epochs"] == 3
    assert bottom.name == "wide_deep" and bottom.embedding_dim == 16 and bottom.hidden == (256, 128)
    assert bottom.dropout == 0.0 and bottom.cut_dim == 16
    assert model_filled == {
        "model.bottom.name": "wide_deep", "model.bottom.embedding_dim": 16, "model.bottom.hidden": [256, 128],
        "model.bottom.cut_dim": 16,
    }  # fmt: skip


def test_a_named_bottom_keeps_todays_sizing_schedule_and_cut():
    # Prepare: the census case with the bottom's name set
    named = _leader(model={"bottom": {"name": "wide_deep"}})
    # Execute
    named_sized, named_filled = sized_schedule(named, 39_073, 48_842)
    bottom, _ = sized_bottom(named, 48_842)
    # Assert: 300 steps, no schedule, the examples' sizes and the 2-wide cut
    assert named_sized.train.epochs == 3 and named_sized.train.lr_schedule.name == "constant"
    assert named_sized.train.lr == 1e-3 and "train.lr_schedule" not in named_filled and "train.lr" not in named_filled
    assert (bottom.name, bottom.hidden, bottom.cut_dim) == ("wide_deep", (256, 128), 2)


def test_table_model_writes_the_recipes_cut_and_top_into_the_config_once_and_leaves_other_configs_as_they_are(
    tmp_path,
):
    # Prepare: the census leader and a follower with nothing set; a named bottom, a set top, a Criteo party, a big
    # table; a shard directory whose manifest says 48,842 rows
    from vfl.runs.record import model_digest
    from vfl.training.table_defaults import TUNED_TOP, table_model, table_model_of_shard, tuned

    leader = _leader()
    follower = parse_config(
        {"role": "follower", "party": "shop", "network": {"connect": "tcp://127.0.0.1:5999"},
         "data": {"path": str(tmp_path), "schema": {"id": "cust", "columns": {"x": "numeric"}}}}
    )  # fmt: skip
    kept = [_leader(model={"bottom": {"name": "wide_deep"}}), _leader(schema=None)]
    own_top = _leader(model={"top": {"name": "linear"}})
    (tmp_path / "manifest.json").write_text(json.dumps({"rows": {"train": 39_073, "valid": 4_884, "test": 4_885}}))
    # Execute
    resolved, again = table_model(leader, 48_842), table_model(table_model(leader, 48_842), 48_842)
    # Assert: the leader's bottom 16 wide and an mlp top written in; the recipe still recognises the config (its
    # embeddings, its sizing) and a second pass changes nothing, so every reader sees one model and one digest
    assert resolved.model.bottom.cut_dim == 16 and resolved.model.bottom.name == "wide_deep"
    assert resolved.model.top.name == TUNED_TOP["name"] == "mlp" and resolved.model.top.hidden == (128,)
    assert again == resolved and model_digest(again) == model_digest(resolved) != model_digest(leader)
    assert tuned(resolved, 48_842) and sized_bottom(resolved, 48_842)[0] == resolved.model.bottom
    # a follower: its bottom, no top; read from its shard's manifest as predict, serve and export read it
    assert (
        table_model_of_shard(follower).model.bottom.cut_dim == 16 and table_model_of_shard(follower).model.top is None
    )
    # a set top stays; configs the recipe does not build are the same objects (their bytes and digests stay)
    assert table_model(own_top, 48_842).model.top.name == "linear"
    assert table_model(own_top, 48_842).model.bottom.cut_dim == 16
    for cfg in kept:
        assert table_model(cfg, 48_842) is cfg
    assert table_model(leader, 2_000_000) is leader


@pytest.mark.parametrize("rows, batch, epochs", [(2_000, 64, 10), (3_000_000, 4096, 1), (640_000, 4096, 2)])
def test_the_batch_stays_within_64_and_4096_and_the_epochs_reach_300_steps(rows, batch, epochs):
    # Execute
    sized, _ = sized_schedule(_leader(), rows)
    # Assert
    assert (sized.train.batch_size, sized.train.epochs) == (batch, epochs)
    assert sized.train.epochs * -(-rows // sized.train.batch_size) >= 300


@pytest.mark.parametrize(
    "batch, lr", [(64, 1e-3), (256, 1e-3), (1024, 2e-3), (2225, 0.0029483), (4096, 4e-3), (16_000, 4e-3)]
)
def test_the_recipes_learning_rate_grows_with_the_square_root_of_the_batch_from_256_rows_to_4e3(batch, lr):
    # Execute
    got = recipe_lr(batch)
    # Assert: 1e-3 up to a batch of 256 rows (the small tables' rate), sqrt-scaled above, at most 4e-3
    assert got == pytest.approx(lr, rel=1e-4)


def test_an_explicit_learning_rate_wins_over_the_recipes_rule():
    # Prepare: flights' size (222k training rows, batch 2225), lr set and unset
    given, unset = _leader({"lr": 5e-4}), _leader()
    # Execute
    given_sized, given_filled = sized_schedule(given, 222_470, 277_690)
    unset_sized, unset_filled = sized_schedule(unset, 222_470, 277_690)
    # Assert
    assert given_sized.train.lr == 5e-4 and "train.lr" not in given_filled
    assert unset_sized.train.batch_size == 2225 and unset_filled["train.lr"] == unset_sized.train.lr == 0.002948


def test_the_recipes_learning_rate_rule_fills_adams_rate_only():
    # Prepare: flights' size with another optimizer and lr unset (the square-root rule is Adam's)
    sgd = _leader({"optimizer": "sgd"})
    # Execute
    sized, filled = sized_schedule(sgd, 222_470, 277_690)
    # Assert: the schema's rate, as before the rule
    assert "train.lr" not in filled and sized.train.lr == sgd.train.lr


def test_explicit_values_win_and_regression_stops_on_rmse():
    # Prepare: batch 16000 set, epochs unset; early stopping off; a regression leader with sizes set
    cfg = _leader({"batch_size": 16000, "early_stopping": False})
    reg = _leader({"task": "regression"}, {"bottom": {"embedding_dim": 80, "hidden": [1024]}})
    # Execute
    sized, filled = sized_schedule(cfg, 39_073)
    reg_sized, _ = sized_schedule(reg, 39_073)
    # Assert: the set values stay; the unset epochs reach 300 steps of the set batch
    assert sized.train.batch_size == 16000 and sized.train.early_stopping is None and sized.train.epochs == 100
    assert set(filled) == {"train.epochs"}
    assert reg_sized.train.early_stopping.metric == "rmse"
    assert sized_bottom(reg, 1000) == (reg.model.bottom, {})


def test_a_criteo_format_party_and_a_table_over_a_million_rows_keep_the_schema_defaults():
    # Execute / Assert
    criteo = _leader(schema=None)
    assert sized_schedule(criteo, 39_073) == (criteo, {})
    assert sized_bottom(criteo, 1000)[1] == {} and sized_bottom(_leader(), 1_000_000)[1] == {}


def test_every_example_yaml_sets_its_schedule_and_model_so_its_figures_do_not_move():
    # Prepare: every party YAML under examples/ (the front door's Criteo configs included)
    paths = [p for p in glob.glob(os.path.join(REPO, "examples", "*", "*.yaml")) if "role:" in open(p).read()]
    assert len(paths) >= 15
    # Execute / Assert: nothing is sized for any of them
    for path in paths:
        cfg = load_config(path)
        assert sized_schedule(cfg, 39_073)[1] == {}, path
        assert cfg.model.bottom.import_ is not None or sized_bottom(cfg, 48_842)[1] == {}, path


def test_a_table_run_under_50_steps_is_refused_with_its_numbers_unless_allowed():
    # Prepare: the schema's old defaults written out: batch 16000, 1 epoch, on 39,073 rows (3 steps)
    short = _leader({"batch_size": 16000, "epochs": 1})
    allowed = _leader({"batch_size": 16000, "epochs": 1, "allow_short_run": True})
    # Execute / Assert
    with pytest.raises(ConfigError) as e:
        check_short_run(short, 39_073)
    assert "this run trains 3 step(s) (1 epoch(s) x 3 step(s) of up to 16000 rows)" in str(e.value)
    assert "set train.batch_size <= 781 or train.epochs >= 17" in str(e.value) and "allow_short_run" in str(e.value)
    check_short_run(allowed, 39_073)
    check_short_run(_leader({"batch_size": 16000, "epochs": 1}, schema=None), 39_073)  # a Criteo shard: a warning


def test_a_small_table_with_nothing_set_trains_the_recipe_to_a_sane_auc_records_it_and_exports_it(tmp_path, procs):
    # Prepare: two parties' tables and YAMLs with no batch size, epochs, early stopping or model key set
    frames = own_table(4000, seed=5)
    cfgs = party_configs(str(tmp_path), str(tmp_path / "shards"), followers=("shop",))
    for name in ("leader", "shop"):
        doc = yaml.safe_load(open(cfgs[name]))
        for key in ("batch_size", "epochs", "allow_short_run"):
            doc["train"].pop(key)
        doc["train"]["lr"] = 0.003
        doc.pop("model", None)
        doc["data"]["schema"] = SCHEMAS[name]
        yaml.safe_dump(doc, open(cfgs[name], "w"))
        frames[name].to_csv(tmp_path / f"{name}.csv", index=False)
        from vfl.data.__main__ import main as data_main

        assert data_main(["prepare", "--config", cfgs[name], "--input", str(tmp_path / f"{name}.csv")]) == 0
    # Execute
    metrics = run_split(procs, cfgs)
    # Assert: sized (batch 64 on ~3200 rows, the recipe's steps), recorded, said on the console, and it learned
    sized = metrics["defaults"]
    steps = sized["train.epochs"] * -(-sized["train_rows"] // 64)
    assert sized["train.batch_size"] == 64 and steps >= RECIPE_STEPS, sized
    assert sized["model.bottom.hidden"] == [256, 128] and sized["train.early_stopping"]["metric"] == "auc"
    assert sized["model.bottom.cut_dim"] == 16 and sized["model.top"] == {"name": "mlp", "hidden": [128]}
    assert metrics["selection"]["metric"] == "auc", metrics.get("selection")
    log = open(tmp_path / "out" / "leader.log").read()
    assert "defaults: sized from the table" in log and "train.batch_size=64" in log
    assert "follower shop: defaults: sized from the table" in open(tmp_path / "out" / "shop.log").read()
    assert metrics["test_auc"] > 0.75, metrics["test_auc"]
    assert json.loads(json.dumps(metrics["defaults"])) == sized
    # export reads the model the run resolved from the same shards (16-wide cuts, the mlp top): the checkpoint's
    # model digest matches and the ONNX graph scores as torch does
    from vfl.inference.export.cli import export_main

    for name, role in (("leader", "leader"), ("shop", "follower")):
        assert export_main(["--config", cfgs[name], "--out", str(tmp_path / "export")], role) == 0, name
    # batch prediction of the training files (a handshake that says each party's cut) scores every row
    for name, role in (("shop", "follower"), ("leader", "leader")):
        csv = str(tmp_path / f"{name}.csv")
        procs.start_argv(f"predict-{name}", [sys.executable, "-m", role, "predict", "--config", cfgs[name], "--rows",
                                             csv, "--out", str(tmp_path / "pred"), "-q"])  # fmt: skip
    for name in ("leader", "shop"):
        code, _, err = procs.wait(f"predict-{name}", timeout=180)
        assert code == 0, (name, err)
    report = json.loads((tmp_path / "pred" / "predict.json").read_text())
    assert report["rows_scored"] == len(frames["leader"]) and report["metrics"]["auc"] > 0.75, report
    leader = json.loads(open(tmp_path / "export" / "leader" / "export.json").read())
    shop = json.loads(open(tmp_path / "export" / "shop" / "export.json").read())
    assert leader["inputs"]["follower_cuts"]["width"] == 16 and shop["output"]["shape"] == ["n", 16]


@pytest.mark.parametrize("manifest", ['{"rows": {"train": "x"}}', "{not json"], ids=["rows-not-a-number", "not-json"])
def test_a_shard_manifest_that_cannot_be_read_is_one_line_naming_it(tmp_path, manifest):
    # Prepare: the shard a predict, serve or export command reads the recipe's model from, with its manifest edited
    from vfl.data.errors import DataError
    from vfl.training.table_defaults import table_model_of_shard

    (tmp_path / "manifest.json").write_text(manifest)
    follower = parse_config(
        {"role": "follower", "party": "shop", "network": {"connect": "tcp://127.0.0.1:5999"},
         "data": {"path": str(tmp_path), "schema": {"id": "cust", "columns": {"x": "numeric"}}}}
    )  # fmt: skip
    # Execute
    with pytest.raises(DataError) as e:
        table_model_of_shard(follower)
    # Assert
    text = str(e.value)
    assert "\n" not in text and str(tmp_path / "manifest.json") in text and "prepare the shard again" in text


class _Shard:
    """What size_table_run reads of a prepared shard: its training split's length and its manifest's rows."""

    def __init__(self, train_rows: int, rows: int):
        self.train_rows, self.manifest = train_rows, {"rows": {"train": train_rows, "test": rows - train_rows}}

    def split(self, name: str):
        return range(self.train_rows)


def test_a_run_resuming_a_checkpoint_written_before_the_rate_rule_keeps_the_rate_it_trained_with():
    # Prepare: flights' size; a resume from a checkpoint that records no model (written before the rule and the
    # record), and one from a checkpoint that records the recipe's bottom (written with the rule)
    from vfl.training.table_defaults import size_table_run, table_model

    older = _leader({"resume_from": "runs/x/checkpoints/bank_final.pt"})
    recorded = table_model(older, 277_690)
    # Execute
    kept, kept_filled = size_table_run(older, _Shard(222_470, 277_690), lambda line: None)
    ruled, ruled_filled = size_table_run(recorded, _Shard(222_470, 277_690), lambda line: None, recorded.model.bottom)
    # Assert: the older run resumes at the schema's rate; the recorded one at the rule's, as it trained
    assert "train.lr" not in kept_filled and kept.train.lr == older.train.lr
    assert ruled_filled["train.lr"] == ruled.train.lr == 0.002948
