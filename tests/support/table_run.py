"""A table run as a user makes one, with `scripts/run_table_local.sh`, and each party's file of new customers.

The generated table is held by a bank (the leader, not named `leader`) and a telco (~90% of the customers); the new
customers' ids were never prepared."""

from __future__ import annotations

import os
import subprocess

import yaml

from tests.support.own_table import SCHEMAS, own_table
from tests.support.paths import REPO

PARTIES = {"bank": "leader", "telco": "telco"}  # party -> its frame of own_table


def _configs(directory: str) -> None:
    """The parties' YAMLs; data.path and output.dir name a place that does not exist (the run's --out is elsewhere)."""
    os.makedirs(directory, exist_ok=True)
    common = {
        "model": {"bottom": {"name": "wide_deep", "embedding_dim": 4, "hidden": [16], "cut_dim": 2}},
        "train": {"epochs": 4, "batch_size": 64, "seed": 0, "lr": 0.01, "eval_batch_size": 1024, "threads": 1},
        "output": {"dir": "runs/nowhere"},
    }
    bank = {
        "role": "leader",
        "party": "bank",
        "network": {"bind": "tcp://127.0.0.1:5999", "followers": ["telco"], "timeout_s": 60},
        "data": {"path": "runs/nowhere/shards/bank", "schema": SCHEMAS["leader"]},
        **common,
    }
    bank["model"] = {**common["model"], "top": {"name": "linear"}}
    telco = {
        "role": "follower",
        "party": "telco",
        "network": {"connect": "tcp://127.0.0.1:5999", "timeout_s": 60},
        "data": {"path": "runs/nowhere/shards/telco", "schema": SCHEMAS["telco"]},
        **common,
    }
    for name, doc in (("bank", bank), ("telco", telco)):
        with open(os.path.join(directory, f"{name}.yaml"), "w") as f:
            yaml.safe_dump(doc, f)


def table_run(base: str) -> dict:
    """Train once under `base` (reused when done): {"run", "configs", "tables": {party: training file},
    "new": {party: file of new customers}, "frames", "new_frames"}."""
    run, configs = os.path.join(base, "run"), os.path.join(base, "configs")
    frames = own_table(1500, seed=3)
    new = own_table(120, seed=11)
    out = {"run": run, "configs": configs, "tables": {}, "new": {}, "frames": {}, "new_frames": {}}
    for party, frame in PARTIES.items():
        out["frames"][party] = frames[frame]
        fresh = new[frame].copy()
        fresh["cust"] = fresh["cust"].str.replace("cust-", "new-")
        out["new_frames"][party] = fresh
        out["tables"][party] = os.path.join(base, f"{party}.csv")
        out["new"][party] = os.path.join(base, f"new_{party}.csv")
    if os.path.exists(os.path.join(run, "metrics.json")):
        return out
    _configs(configs)
    for party in PARTIES:
        out["frames"][party].to_csv(out["tables"][party], index=False)
        out["new_frames"][party].to_csv(out["new"][party], index=False)
    done = subprocess.run(
        ["bash", "scripts/run_table_local.sh", "--configs", configs, "--out", run]
        + sum((["--table", f"{p}={out['tables'][p]}"] for p in PARTIES), []),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out
