"""A two-party table run trained for the serving tests: the leader and telco (~90% of the customers).

A generated table, each party's YAML with its schema (and any extra sections), each file prepared alone, trained
over tcp."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.support.own_table import SCHEMAS, own_table
from tests.support.party_processes import Procs, party_configs, run_split
from tests.support.paths import REPO


def trained_table(tmp, rows: int, seed: int, extra: dict | None = None) -> dict:
    """Train under `tmp`; `extra`: {party: {section: value}} merged into that party's YAML (e.g. telco's privacy).
    Returns {"tmp", "cfgs", "frames"}."""
    frames = {k: v for k, v in own_table(rows, seed=seed).items() if k in ("leader", "telco")}
    cfgs = party_configs(
        str(tmp), str(tmp / "shards"), followers=("telco",),
        train={"epochs": 2, "batch_size": 128, "eval_batch_size": 512},
    )  # fmt: skip
    for name, frame in frames.items():
        frame.to_csv(tmp / f"{name}.csv", index=False)
        doc = yaml.safe_load(open(cfgs[name]))
        doc["data"]["schema"] = SCHEMAS[name]
        doc.update((extra or {}).get(name, {}))
        yaml.safe_dump(doc, open(cfgs[name], "w"))
        done = subprocess.run(
            [sys.executable, "-m", "vfl.data", "prepare", "--config", cfgs[name], "--input", str(tmp / f"{name}.csv")],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    procs = Procs()
    try:
        run_split(procs, cfgs)
    finally:
        procs.cleanup()
    return {"tmp": tmp, "cfgs": cfgs, "frames": frames}
