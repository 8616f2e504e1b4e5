"""The compute benchmarks' runs: synthetic shards, the two parties' configs, leader and follower over tcp or one
centralized process, and the parties built in this process (scripts/bench_compute.py, bench_pipeline.py,
profile_step.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench_common import say  # noqa: E402 (beside this module in scripts/)


def prepare_data(py: str, rows: int, work: str, name: str = "shards", parties: str | None = None) -> str:
    data = os.path.join(REPO, "data", "synthetic", f"criteo_synth_{rows}.tsv")
    if not os.path.exists(data):
        say(f"== synthesizing {rows} rows -> {data}")
        subprocess.run(
            [py, "-m", "vfl.data", "synth", "--rows", str(rows), "--out", data], check=True, stdout=subprocess.DEVNULL
        )
    shards = os.path.join(work, name)
    say(f"== preparing the two parties' shards of {rows} rows")
    subprocess.run(
        [py, "-m", "vfl.data", "prepare", "--input", data, "--out", shards, "--hash-buckets", "20000"]
        + (["--parties", parties] if parties else []),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return shards


def write_configs(
    py: str, work: str, shards: str, tag: str, model: dict, train: dict, leader_model: dict | None = None
) -> dict[str, str]:
    """The two parties' YAML for one run; leader_model (bottom and top) defaults to model with a linear top."""
    import yaml

    from vfl.ports import free_port

    keys = os.path.join(work, "keys")
    if not os.path.exists(os.path.join(keys, "leader.key")):
        for p in ("leader", "follower0"):
            subprocess.run([py, "-m", "vfl.keys", "new", p, "--dir", keys], check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    out = os.path.join(work, tag)
    net = {"timeout_s": 600}
    leader = {
        "role": "leader",
        "party": "leader",
        "network": {
            **net,
            "bind": f"tcp://127.0.0.1:{port}",
            "followers": ["follower0"],
            "secret_key_file": f"{keys}/leader.key_secret",
            "follower_keys": {"follower0": f"{keys}/follower0.key"},
        },
        "data": {"path": f"{shards}/leader"},
        "model": leader_model or {**model, "top": {"name": "linear"}},
        "train": train,
        "output": {"dir": out},
    }
    follower = {
        "role": "follower",
        "party": "follower0",
        "network": {
            **net,
            "connect": f"tcp://127.0.0.1:{port}",
            "secret_key_file": f"{keys}/follower0.key_secret",
            "leader_key_file": f"{keys}/leader.key",
        },
        "data": {"path": f"{shards}/follower0"},
        "model": model,
        "train": train,
        "output": {"dir": out},
    }
    paths = {}
    for name, doc in (("leader", leader), ("follower0", follower)):
        paths[name] = os.path.join(work, f"{tag}_{name}.yaml")
        with open(paths[name], "w") as f:
            yaml.safe_dump(doc, f)
    paths["out"] = out
    return paths


def run_split(py: str, cfgs: dict, pin: bool) -> dict:
    """Leader and follower processes (each on its own core with taskset when pin); the leader's metrics plus
    the follower's breakdown."""
    from vfl.local_parties import LocalParties

    cmd = lambda core, mod, cfg: (["taskset", "-c", str(core)] if pin else []) + [py, "-m", mod, "--config", cfg, "-q"]
    logs = os.path.join(os.path.dirname(cfgs["leader"]), os.path.basename(cfgs["out"]))
    with LocalParties(cwd=REPO) as parties:
        for core, (name, module) in enumerate((("leader", "leader"), ("follower0", "follower"))):
            parties.start(name, cmd(core, module, cfgs[name]), stdout=f"{logs}_{name}.out", stderr=subprocess.STDOUT)
        failure = parties.wait(timeout_s=3600)
    if failure is not None and failure.returncode is None:
        raise subprocess.TimeoutExpired(parties.procs[failure.name].args, 3600)
    if failure is not None:
        raise RuntimeError(f"{failure.name} failed:\n" + failure.output()[-3000:])
    m = json.load(open(os.path.join(cfgs["out"], "metrics.json")))
    m["follower_breakdown"] = json.load(open(os.path.join(cfgs["out"], "follower0_step_breakdown.json")))
    return m


def run_central(py: str, cfgs: dict) -> dict:
    r = subprocess.run(
        [
            py,
            "-m",
            "vfl.centralized",
            "--config",
            cfgs["leader"],
            "--follower-config",
            cfgs["follower0"],
            "--out",
            cfgs["out"],
            "-q",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError("centralized failed:\n" + r.stderr[-3000:])
    return json.load(open(os.path.join(cfgs["out"], "metrics.json")))


def local_parties(shards: str, model: dict, train: dict, device: str = "cpu") -> tuple[list, object]:
    """The leader's and follower0's bottoms and the leader's linear top, built in this process (no wire), on device."""
    import torch

    from vfl.config.schema import parse_config
    from vfl.data.shards import PartyShard
    from vfl.training.party import BottomParty
    from vfl.training.top import TopTrainer

    dev = torch.device(device)
    parties, cfgs = [], []
    for name, role in (("leader", "leader"), ("follower0", "follower")):
        doc = {
            "role": role,
            "party": name,
            "data": {"path": f"{shards}/{name}"},
            "model": model,
            "train": train,
            "network": {"connect": "tcp://127.0.0.1:1"},
        }
        if role == "leader":
            doc.update(
                network={"bind": "tcp://127.0.0.1:1", "followers": ["follower0"]},
                model={**model, "top": {"name": "linear"}},
            )
        cfgs.append(parse_config(doc))
        parties.append(BottomParty(cfgs[-1], PartyShard(f"{shards}/{name}"), dev))
    return parties, TopTrainer(cfgs[0].train, cfgs[0].model.top, sum(p.cut_dim for p in parties), dev)
