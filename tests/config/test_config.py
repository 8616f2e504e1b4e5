"""Config validation reports every problem at once, with the allowed domain and a suggestion."""

from __future__ import annotations

import math

import pytest

from tests.support.leader_config import _leader
from vfl.config.report import apply_overrides
from vfl.config.schema import ConfigError, dotted_overrides, json_schema, parse_config


def test_valid_leader_config_gets_defaults():
    # Execute
    cfg = parse_config(_leader())
    # Assert
    assert cfg.is_leader and cfg.network.followers == ("follower0",)
    assert cfg.model.bottom.embedding_dim == 80 and cfg.model.bottom.hidden == (1024, 512, 256, 128)
    assert cfg.train.batch_size == 16000 and cfg.privacy.label_dp is None


def test_an_optional_section_given_false_is_off_and_given_nothing_takes_its_defaults():
    # Prepare: what a YAML file switched on, and the command line's `train.early_stopping=false` over it
    on = {"early_stopping": {"patience": 3}, "linear_optimizer": {"lr": 0.1}}
    # Execute
    yaml_only = parse_config(_leader(train=on)).train
    switched_off = parse_config(_leader(train={"early_stopping": False, "linear_optimizer": False})).train
    empty = parse_config(_leader(train={"early_stopping": None, "linear_optimizer": None})).train
    # Assert: false is off; an empty section is its defaults (on); a required section still refuses false
    assert yaml_only.early_stopping.patience == 3 and yaml_only.linear_optimizer.lr == 0.1
    assert switched_off.early_stopping is None and switched_off.linear_optimizer is None
    assert empty.early_stopping is not None and empty.linear_optimizer.lr == 0.03
    follower = {"role": "follower", "party": "f", "network": {"connect": "tcp://127.0.0.1:1"}, "data": {"path": "x"}}
    off = parse_config({**follower, "train": {"early_stopping": False}, "privacy": {"label_dp": False}})
    assert off.train.early_stopping is None and off.privacy.label_dp is None  # off is no leader-only setting
    with pytest.raises(ConfigError, match="train: expected a mapping, got False"):
        parse_config(_leader(train=False))
    with pytest.raises(ConfigError, match="train.lr_schedule: expected a mapping, got False"):
        parse_config(_leader(train={"lr_schedule": False}))
    with pytest.raises(ConfigError, match="model.top: expected a mapping, got False"):  # a leader always has a top
        parse_config(_leader(model={"top": False}))
    # overrides: a section and a key inside it at once is refused; a key inside a section the file switched off is on
    with pytest.raises(ConfigError, match=r"overrides privacy.label_dp=False and privacy.label_dp.eps=3 conflict"):
        dotted_overrides(["privacy.label_dp.eps=3", "privacy.label_dp=false"])
    with pytest.raises(ConfigError, match=r"overrides privacy.label_dp=False and privacy.label_dp.eps=3 conflict"):
        dotted_overrides(["privacy.label_dp=false", "privacy.label_dp.eps=3"])
    doc = apply_overrides(_leader(privacy={"label_dp": False}), dotted_overrides(["privacy.label_dp.eps=3"]))
    assert parse_config(doc).privacy.label_dp.eps == 3
    train_schema = json_schema()["$defs"]["TrainConfig"]["properties"]
    assert {"const": False} in train_schema["early_stopping"]["anyOf"]  # editors accept what the loader accepts
    assert {"const": False} not in train_schema["lr_schedule"].get("anyOf", [])


def test_all_errors_are_reported_together_with_domains():
    # Prepare
    doc = _leader(
        train={"epochs": 0, "lr": "fast", "optimizer": "adamw"}, network={"bind": "127.0.0.1:5560", "followers": []}
    )
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    text = str(e.value)
    # Assert
    assert "5 problem(s)" in text
    assert "train.epochs must be an integer in [1, 10000], got epochs=0" in text
    assert "train.lr must be a number, got 'fast'" in text
    assert "train.optimizer must be one of ['adam', 'sgd', 'adagrad'], got 'adamw' (did you mean 'adam'?)" in text
    assert "tcp://HOST:PORT" in text and "network.followers must be a non-empty list" in text


def test_unknown_keys_suggest_nearest_and_inline_secrets_are_refused():
    # Prepare
    doc = _leader(
        privacy={"label_dp": {"epsilon": 1}}, network={"bind": "tcp://127.0.0.1:1", "followers": ["f"], "secret": "x"}
    )
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    # Assert
    text = str(e.value)
    assert "unknown key 'privacy.label_dp.epsilon'" in text and "privacy.label_dp.eps is required" in text
    assert "unknown key 'network.secret'" in text and "secrets never go in YAML" in text


def test_label_dp_eps_domain_and_infinity():
    # Execute
    cfg = parse_config(_leader(privacy={"label_dp": {"eps": math.inf, "budget": math.inf}}))
    # Assert
    assert cfg.privacy.label_dp.eps == math.inf
    with pytest.raises(ConfigError, match="must be a number, got True"):
        parse_config(_leader(privacy={"label_dp": {"eps": True}}))


@pytest.mark.parametrize(
    "eps, shown", [(0, "0"), (1e-300, "1e-300"), (-0.0, "-0.0"), (51, "51"), (-1, "-1"), (float("nan"), "nan")]
)
def test_a_label_dp_eps_outside_the_sound_domain_is_a_one_line_config_error(eps, shown):
    """0, 1e-300 and -0.0 passed the config and died after the handshake; 1000 overflowed math.exp at the draw."""
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(_leader(privacy={"label_dp": {"eps": eps}}))
    # Assert
    assert f"privacy.label_dp.eps must be in [0.001, 50], or inf for no noise, got eps={shown}" in str(e.value)


def test_follower_may_not_carry_leader_only_settings():
    # Prepare
    doc = {
        "role": "follower",
        "party": "follower0",
        "network": {"connect": "tcp://h:1", "followers": ["x"]},
        "data": {"path": "p"},
        "model": {"top": {"name": "linear"}},
        "privacy": {"label_dp": {"eps": 1}},
    }
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    # Assert
    text = str(e.value)
    assert "network.followers is only used by the leader" in text
    assert "model.top is only used by the leader" in text
    assert "privacy.label_dp is set on the leader only" in text


def test_key_files_are_checked_by_role_and_follower_name():
    # Prepare
    doc = _leader(
        network={
            "bind": "tcp://127.0.0.1:1",
            "followers": ["f"],
            "leader_key_file": "k",
            "follower_keys": {"f": "f.key", "g": "g.key"},
        }
    )
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    # Assert
    text = str(e.value)
    assert "network.leader_key_file is only used by a follower" in text
    assert "network.follower_keys names ['g'], which are not in network.followers ['f']" in text


def test_old_shared_secret_key_points_to_the_key_files():
    with pytest.raises(ConfigError, match="did you mean 'network.secret_key_file'.*secrets never go in YAML"):
        parse_config(_leader(network={"bind": "tcp://127.0.0.1:1", "followers": ["f"], "secret_file": "s"}))


def test_a_yaml_file_that_is_not_a_mapping_is_a_clear_error(tmp_path):
    from vfl.config.schema import load_config

    for text in ("", "- a\n- b\n", "just text\n"):
        p = tmp_path / "c.yaml"
        p.write_text(text)
        with pytest.raises(ConfigError, match="expected a YAML mapping"):
            load_config(str(p), {"output.dir": "x"})
    p.write_text("role: leader\nparty: l\nnetwork: 5\n")
    with pytest.raises(ConfigError, match="network: expected a mapping"):
        load_config(str(p), {"network.bind": "tcp://127.0.0.1:1"})


@pytest.mark.parametrize(
    "content, needle",
    [
        (bytes(range(256)) * 4, "not valid YAML"),
        (
            b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
            "aliases",
        ),
        (b"[" * 100000 + b"]" * 100000, "not valid YAML"),
    ],
)
def test_garbage_config_files_are_one_line_errors(tmp_path, content, needle):
    # Prepare
    from vfl.config.schema import load_config

    p = tmp_path / "c.yaml"
    p.write_bytes(content)
    # Execute
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    # Assert
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_output_dir_that_is_a_file_is_a_one_line_error(tmp_path, shards_small):
    # Prepare
    import subprocess
    import sys

    import yaml

    from tests.support.party_processes import party_configs
    from tests.support.paths import REPO

    cfgs = party_configs(str(tmp_path), str(shards_small))
    (tmp_path / "afile").write_text("x")
    # Execute
    r = subprocess.run(
        [sys.executable, "-m", "follower", "--config", cfgs["follower0"], "--out", str(tmp_path / "afile")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert
    assert r.returncode == 2 and "output.dir" in r.stderr and "cannot be used for writing" in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert yaml.safe_load(open(cfgs["follower0"]))["party"] == "follower0"


def test_task_is_a_leader_setting_with_a_domain_and_accuracy_selection_needs_multiclass():
    # Prepare
    follower = {
        "role": "follower",
        "party": "follower0",
        "network": {"connect": "tcp://127.0.0.1:5560"},
        "data": {"path": "d"},
        "train": {"task": "multiclass"},
    }
    # Execute
    default = parse_config(_leader())
    multi = parse_config(_leader(train={"task": "multiclass", "early_stopping": {"metric": "accuracy"}}))
    with pytest.raises(ConfigError) as bad:
        parse_config(_leader(train={"task": "multiclas", "early_stopping": {"metric": "accuracy"}}))
    with pytest.raises(ConfigError) as on_follower:
        parse_config(follower)
    # Assert
    assert default.train.task == "binary" and multi.train.task == "multiclass"
    assert multi.train.early_stopping.metric == "accuracy"
    assert (
        "train.task must be one of ['binary', 'multiclass', 'regression'], got 'multiclas' (did you mean 'multiclass'?)"
        in str(bad.value)
    )
    assert "early_stopping.metric accuracy needs train.task: multiclass" in str(bad.value)
    assert "train.task is set on the leader only" in str(on_follower.value)


@pytest.mark.parametrize(
    "label_dp, needle",
    [
        ({"eps": 2.0, "budget": 1.0}, "privacy.label_dp.budget=1.0 is below eps=2.0: no release could be drawn"),
        ({"eps": math.inf}, "set budget: .inf to do it knowingly"),
        ({"eps": 1.0, "budget": 0}, "privacy.label_dp.budget must be > 0.0, got budget=0"),
    ],
)
def test_a_label_dp_budget_no_release_fits_is_a_config_error(label_dp, needle):
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(_leader(privacy={"label_dp": label_dp}))
    # Assert
    assert needle in str(e.value)
