"""Your own table: a party's YAML declares its columns (data.schema); `vfl-data prepare --config` fits the transforms
on the party's own training rows; three processes train over CurveZMQ after PSI; CSV and Parquet give one shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import yaml

from tests.support.own_table import SCHEMAS, own_table
from tests.support.party_processes import party_configs, run_split
from tests.support.paths import REPO


def _with_schema(cfg_path: str, schema: dict, task: str | None = None) -> None:
    doc = yaml.safe_load(open(cfg_path))
    doc["data"]["schema"] = schema
    if task is not None:
        doc["train"]["task"] = task
    yaml.safe_dump(doc, open(cfg_path, "w"))


def _prepare(cfg_path: str, table: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vfl.data", "prepare", "--config", cfg_path, "--input", table, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_generated_table_with_no_criteo_name_trains_over_three_processes_with_psi(tmp_path, procs):
    # Prepare: three parties' own CSV files and YAMLs declaring their columns; each prepares its own file alone
    frames = own_table(4000)
    cfgs = party_configs(
        str(tmp_path),
        str(tmp_path / "shards"),
        followers=("shop", "telco"),
        train={"epochs": 4, "batch_size": 128, "lr": 0.01, "eval_batch_size": 1024},
    )
    for name, frame in frames.items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
        _with_schema(cfgs[name], SCHEMAS[name])
        done = _prepare(cfgs[name], str(tmp_path / f"{name}.csv"))
        assert done.returncode == 0, done.stderr
    # Execute
    metrics = run_split(procs, cfgs)
    # Assert: PSI found exactly the customers every party holds, and the model learned from all of them
    assert metrics["psi"]["intersection"] == len(frames["telco"])
    assert metrics["test_auc"] > 0.7, metrics["test_auc"]
    shop_note = open(tmp_path / "shards" / "shop" / "schema.json").read()
    assert "unused" not in shop_note  # the undeclared column was ignored


def test_csv_and_parquet_of_the_same_rows_give_identical_shards(tmp_path):
    # Prepare: the leader's table as CSV and as Parquet (typed columns: floats with NaN, text)
    frame = own_table(1500)["leader"]
    frame.to_csv(tmp_path / "leader.csv", index=False)
    frame.to_parquet(tmp_path / "leader.parquet", index=False)
    cfgs = party_configs(str(tmp_path), str(tmp_path / "shards"), followers=("shop",))
    _with_schema(cfgs["leader"], SCHEMAS["leader"])
    # Execute
    a = _prepare(cfgs["leader"], str(tmp_path / "leader.csv"), "--out", str(tmp_path / "csv"))
    b = _prepare(cfgs["leader"], str(tmp_path / "leader.parquet"), "--out", str(tmp_path / "parquet"))
    # Assert: every array of every split, and the fitted schema, are identical
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    for split in ("train", "valid", "test"):
        for name in ("ids", "dense", "dense_missing", "cat", "labels"):
            x = np.load(tmp_path / "csv" / "leader" / split / f"{name}.npy")
            y = np.load(tmp_path / "parquet" / "leader" / split / f"{name}.npy")
            assert x.dtype == y.dtype and np.array_equal(x, y), (split, name)
    schema = lambda d: json.load(open(tmp_path / d / "leader" / "schema.json"))
    assert schema("csv") == schema("parquet")
    assert os.path.exists(tmp_path / "csv" / "leader" / "vocab" / "0000.npy")


def test_the_python_api_trains_on_each_partys_dataframe(tmp_path):
    # Prepare: each party's config (a dict with data.schema) and its own DataFrame, nothing written by hand
    from vfl_api import simulate

    frames = own_table(3000, seed=1)
    cfgs = party_configs(
        str(tmp_path), str(tmp_path / "unused"), followers=("shop", "telco"), train={"epochs": 3, "batch_size": 128}
    )
    docs = {}
    for name in frames:
        docs[name] = yaml.safe_load(open(cfgs[name]))
        docs[name]["data"]["schema"] = SCHEMAS[name]
    # Execute
    history = simulate(docs["leader"], [docs["shop"], docs["telco"]], tables=frames, out=str(tmp_path / "api"))
    # Assert: every party prepared its own frame; the run intersected and trained
    assert history.metrics["psi"]["intersection"] == len(frames["telco"])
    assert history.test_auc > 0.65
    assert sorted(os.listdir(tmp_path / "api" / "shards")) == ["leader", "shop", "telco"]


def test_each_partys_script_prepares_its_own_table_under_its_schema_and_trains(tmp_path, procs):
    # Prepare: two hosts' scripts, each with its own CSV (--raw) and YAML schema
    frames = own_table(3000, seed=2)
    # each script prepares its table before it connects, so on a loaded machine one party may wait for the other's
    # preparation: a deadline of 60 s, not the default 20
    cfgs = party_configs(
        str(tmp_path), str(tmp_path / "unused"), followers=("shop",), train={"batch_size": 128}, timeout_s=60
    )
    for name in ("leader", "shop"):
        frames[name].to_csv(tmp_path / f"{name}.csv", index=False)
        _with_schema(cfgs[name], SCHEMAS[name])
    endpoint = yaml.safe_load(open(cfgs["leader"]))["network"]["bind"]
    for name, script in (("leader", "scripts/run_leader.sh"), ("shop", "scripts/run_follower.sh")):
        raw = ["--raw", str(tmp_path / f"{name}.csv"), "--shards", str(tmp_path / f"s_{name}")]
        procs.start_argv(name, ["bash", script, cfgs[name], endpoint, *raw])
    # Execute
    results = {name: procs.wait(name, timeout=300) for name in ("leader", "shop")}
    # Assert: each prepared its own shard under its schema, and the run trained on their intersection
    for name, (code, _, err) in results.items():
        assert code == 0, f"{name}: {err[-2000:]}"
    assert os.path.exists(tmp_path / "s_shop" / "shop" / "schema.json")
    m = json.load(open(tmp_path / "out" / "metrics.json"))
    assert m["psi"]["intersection"] == 3000 and m["test_auc"] > 0.6
