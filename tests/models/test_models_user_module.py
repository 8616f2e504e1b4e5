"""A party's own torch module by import path: the example trains over two processes, and every broken contract
stops the party with one line naming the module and what was expected, before the leader accepts a connection."""

from __future__ import annotations

import os
import textwrap

import pytest
import yaml

from tests.support.party_processes import REPO as _REPO
from tests.support.party_processes import party_configs, run_split

REPO = str(_REPO)
EXAMPLE = os.path.join(REPO, "examples", "custom_model")
ENV = {"PYTHONPATH": os.pathsep.join([EXAMPLE, REPO])}

BROKEN = textwrap.dedent(
    """
    import torch
    from torch import nn

    raise_on_import = False

    class WrongWidth(nn.Module):
        def __init__(self, schema, cut_dim, options):
            super().__init__()
            self.cut_dim = cut_dim
        def forward(self, batch):
            return torch.zeros(batch["numeric"].shape[0], self.cut_dim + 1)

    class IntegerCut(WrongWidth):
        def forward(self, batch):
            return batch["categorical"][:, : self.cut_dim]

    class RaisesInForward(WrongWidth):
        def forward(self, batch):
            return batch["no such kind"]

    class RaisesInInit(nn.Module):
        def __init__(self, schema, cut_dim, options):
            raise TypeError("needs option 'width'")

    def not_a_class(schema, cut_dim, options):
        return None

    class TopOfWrongWidth(nn.Module):
        def __init__(self, cut_dims, outputs, options):
            super().__init__()
        def forward(self, cuts):
            return cuts
    """
)


def _with(path: str, section: str, value: dict) -> None:
    doc = yaml.safe_load(open(path))
    doc["model"][section] = value
    yaml.safe_dump(doc, open(path, "w"))


def test_the_custom_model_example_trains_over_two_processes(tmp_path, shards_small, procs):
    # Prepare: the example's bottoms and top (my_models.py), imported from PYTHONPATH in each party's process
    example = {p: yaml.safe_load(open(os.path.join(EXAMPLE, f"{p}.yaml"))) for p in ("leader", "follower")}
    cfgs = party_configs(str(tmp_path), str(shards_small), train={"epochs": 2, "lr": 0.01})
    _with(cfgs["leader"], "bottom", example["leader"]["model"]["bottom"])
    _with(cfgs["leader"], "top", example["leader"]["model"]["top"])
    _with(cfgs["follower0"], "bottom", example["follower"]["model"]["bottom"])
    # Execute
    metrics = run_split(procs, cfgs, env=ENV)
    # Assert: the user's cut width on the wire, and a model that learnt
    assert metrics["cut_dims"] == {"leader": 4, "follower0": 4}
    assert metrics["test_auc"] > 0.58  # (a mean of field vectors: weaker than the built-ins, still learning)


@pytest.mark.parametrize(
    "section, value, needle",
    [
        ("bottom", {"import": "no_such_package.models:Bottom"}, "cannot import module 'no_such_package.models'"),
        ("bottom", {"import": "broken_models:Missing"}, "module 'broken_models' has no attribute 'Missing'"),
        ("bottom", {"import": "broken_models:not_a_class"}, "is function"),
        ("bottom", {"import": "broken_models:RaisesInInit"}, "raised TypeError: needs option 'width'"),
        ("bottom", {"import": "broken_models:RaisesInForward"}, "raised KeyError: 'no such kind'"),
        ("bottom", {"import": "broken_models:WrongWidth"}, "returned shape (2, 3), expected (2, 2)"),
        ("bottom", {"import": "broken_models:IntegerCut"}, "returned dtype torch.int64, expected a floating dtype"),
        ("top", {"import": "broken_models:TopOfWrongWidth"}, "returned shape (2, 4), expected (2,) or (2, 1)"),
    ],
    ids=["import", "attribute", "not-a-module", "constructor", "forward", "shape", "dtype", "top-shape"],
)
def test_each_broken_contract_is_one_line_naming_the_module_and_what_was_expected(
    tmp_path, shards_small, monkeypatch, section, value, needle
):
    # Prepare: a module breaking one contract, importable from tmp_path
    from vfl.config.schema import ConfigError, load_config
    from vfl.data.shards import PartyShard
    from vfl.models.registry import dry_run_models

    (tmp_path / "broken_models.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "broken_models", raising=False)
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _with(cfgs["leader"], section, value)
    cfg = load_config(cfgs["leader"])
    # Execute
    with pytest.raises(ConfigError) as e:
        dry_run_models(cfg, PartyShard(cfg.data.path))
    # Assert: one line, naming the import path and what was expected
    assert "\n" not in str(e.value) and needle in str(e.value), str(e.value)
    assert str(e.value).startswith(f"model.{section}.import {value['import']!r}")


def test_a_broken_leader_module_stops_it_before_it_listens(tmp_path, shards_small, procs):
    # Prepare: no follower is started; the leader's top answers the wrong width
    (tmp_path / "broken_models.py").write_text(BROKEN)
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _with(cfgs["leader"], "top", {"import": "broken_models:TopOfWrongWidth"})
    # Execute
    procs.start("leader", "leader", cfgs["leader"], env={"PYTHONPATH": os.pathsep.join([str(tmp_path), REPO])})
    code, _, err = procs.wait("leader", timeout=60)
    # Assert: a config error (exit 2) of one line, and the leader never listened
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "expected (2,) or (2, 1)" in errors[0], err
    assert "listening on" not in open(tmp_path / "out" / "leader.log").read()


def test_a_broken_follower_module_stops_the_follower_before_it_connects(tmp_path, shards_small, procs):
    # Prepare: no leader runs; the follower's bottom answers the wrong width
    (tmp_path / "broken_models.py").write_text(BROKEN)
    cfgs = party_configs(str(tmp_path), str(shards_small))
    _with(cfgs["follower0"], "bottom", {"import": "broken_models:WrongWidth", "cut_dim": 3})
    # Execute
    procs.start("f", "follower", cfgs["follower0"], env={"PYTHONPATH": os.pathsep.join([str(tmp_path), REPO])})
    code, _, err = procs.wait("f", timeout=60)
    # Assert: the model's error, not a connection timeout
    assert code == 2 and "returned shape (2, 4), expected (2, 3)" in err, err
    assert "connecting to" not in open(tmp_path / "out" / "follower0.log").read()
