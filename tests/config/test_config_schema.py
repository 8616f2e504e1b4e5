"""The one config schema: YAML 1.2 numbers, key.path=value overrides, JSON Schema export, FedAvg and parties errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import yaml

from tests.support.paths import REPO
from vfl.config.schema import ConfigError, dotted_overrides, json_schema, load_config, parse_config

LEADER_YAML = REPO / "examples/wide_deep_criteo/leader.yaml"


def _leader(**sections):
    doc = {
        "role": "leader",
        "party": "leader",
        "network": {"bind": "tcp://127.0.0.1:5560", "followers": ["follower0"]},
        "data": {"path": "d"},
    }
    doc.update(sections)
    return doc


def test_yaml_1_2_numbers_that_pyyaml_reads_as_strings_are_numbers(tmp_path):
    # Prepare: PyYAML (YAML 1.1) reads 1e-4, 1e-3 and inf as strings
    p = tmp_path / "leader.yaml"
    p.write_text(
        "role: leader\nparty: leader\nnetwork: {bind: 'tcp://127.0.0.1:1', followers: [f]}\n"
        "data: {path: d}\ntrain: {lr: 1e-4, batch_size: 1e3}\nprivacy: {label_dp: {eps: inf, budget: inf}}\n"
    )
    assert yaml.safe_load(p.read_text())["train"]["lr"] == "1e-4"
    # Execute
    cfg = load_config(str(p))
    # Assert
    assert cfg.train.lr == 1e-4 and cfg.train.batch_size == 1000 and isinstance(cfg.train.batch_size, int)
    assert cfg.privacy.label_dp.eps == math.inf
    assert parse_config(_leader(privacy={"label_dp": {"eps": "1e-3"}})).privacy.label_dp.eps == 1e-3
    assert (
        parse_config(_leader(privacy={"label_dp": {"eps": ".inf", "budget": ".inf"}})).privacy.label_dp.eps == math.inf
    )


def test_numbers_that_are_not_numbers_still_fail_with_the_domain():
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(
            _leader(train={"lr": "1e-4x", "batch_size": 2.5, "epochs": True}, privacy={"label_dp": {"eps": "infinite"}})
        )
    # Assert
    text = str(e.value)
    assert "4 problem(s)" in text
    assert "train.lr must be a number, got '1e-4x'" in text
    assert (
        "train.batch_size must be an integer, got 2.5" in text and "train.epochs must be an integer, got True" in text
    )
    assert "privacy.label_dp.eps must be a number, got 'infinite' (write .inf for no noise)" in text


def test_dotted_overrides_reach_any_key_and_are_validated(tmp_path):
    # Execute
    over = dotted_overrides(
        ["privacy.label_dp.eps=0.5", "train.lr=1e-4", "model.bottom.hidden=[8, 4]", "train.early_stopping.patience=2"]
    )
    cfg = load_config(str(LEADER_YAML), over)
    # Assert
    assert cfg.privacy.label_dp.eps == 0.5 and cfg.train.lr == 1e-4 and cfg.model.bottom.hidden == (8, 4)
    assert cfg.train.early_stopping.patience == 2
    with pytest.raises(ConfigError, match="did you mean 'train.batch_size'"):
        load_config(str(LEADER_YAML), dotted_overrides(["train.batch_szie=3"]))
    with pytest.raises(ConfigError, match="must look like key.path=value"):
        dotted_overrides(["train.lr"])


def test_config_check_command_prints_defaults_and_applies_overrides():
    # Execute
    r = subprocess.run(
        [sys.executable, "-m", "vfl.config", "check", str(LEADER_YAML), "train.lr=1e-4", "train.device=gpu"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    ok = subprocess.run(
        [sys.executable, "-m", "vfl.config", "check", str(LEADER_YAML), "train.lr=1e-4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Assert
    assert r.returncode == 2 and "train.device must be one of ['cpu', 'cuda', 'auto'], got 'gpu'" in r.stderr
    assert ok.returncode == 0 and json.loads(ok.stdout)["train"]["lr"] == 1e-4


def test_json_schema_has_every_section_with_domains_and_refuses_unknown_keys(tmp_path):
    # Execute
    r = subprocess.run(
        [sys.executable, "-m", "vfl.config", "schema", "--out", str(tmp_path / "s.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    schema = json.loads((tmp_path / "s.json").read_text())
    # Assert
    assert r.returncode == 0 and schema == json.loads(json.dumps(json_schema()))
    assert set(schema["properties"]) == {
        "role",
        "party",
        "network",
        "data",
        "model",
        "train",
        "privacy",
        "output",
        "debug",
        "distributed",
    }
    train = schema["$defs"]["TrainConfig"]
    assert train["additionalProperties"] is False
    assert train["properties"]["epochs"]["minimum"] == 1 and train["properties"]["epochs"]["maximum"] == 10000
    assert train["properties"]["lr"]["exclusiveMinimum"] == 0
    assert train["properties"]["optimizer"]["enum"] == ["adam", "sgd", "adagrad"]


def test_fedavg_typo_is_reported_once_with_a_suggestion():
    # Prepare
    from vfl.horizontal.config import FedConfigError, parse_fed_config

    # Execute
    with pytest.raises(FedConfigError) as e:
        parse_fed_config({"encrypt": {"signds": {"sing_k": 0.1}}, "local_lr": "1e-2"})
    # Assert: one problem (no second report from the mechanism's constructor), and 1e-2 is a number
    text = str(e.value)
    assert "1 problem(s)" in text and text.count("sing_k") == 1 and "__init__" not in text
    assert "did you mean 'encrypt.signds.sign_k'" in text
    assert parse_fed_config({"local_lr": "1e-2"}).local_lr == 0.01


def test_parties_yaml_errors_name_the_party_key_and_domain():
    # Prepare
    from vfl.data.errors import DataError
    from vfl.data.parties import parse_parties

    # Execute
    with pytest.raises(DataError) as e:
        parse_parties({"a": {"dense": ["I1"], "label": "yes", "dnse": []}, "b": {"dense": ["i2"], "drop_fraction": 1}})
    # Assert
    text = str(e.value)
    assert "a: label must be true or false, got 'yes'" in text and "did you mean 'dense'" in text
    assert "b: drop_fraction must be in [0.0, 1.0), got drop_fraction=1" in text
    assert (
        parse_parties({"a": {"dense": ["I1"], "label": True}, "b": {"dense": ["I2"], "drop_fraction": "1e-1"}})[
            1
        ].drop_fraction
        == 0.1
    )


def test_the_shipped_json_schema_is_the_current_one():
    # Assert: examples/party.schema.json (named by the example YAMLs for editors) matches the models
    shipped = json.loads((REPO / "examples/party.schema.json").read_text())
    assert shipped == json.loads(json.dumps(json_schema())), (
        "regenerate: python -m vfl.config schema --out examples/party.schema.json"
    )
    assert "$schema=../party.schema.json" in (REPO / "examples/wide_deep_criteo/leader.yaml").read_text()
