"""The benches' runs: shards and keys, the parties' configs, split and centralized runs, parties in this process.

Leader and follower run as processes over tcp, or one centralized process; local_parties builds them in this process
(benchmarks.compute, .pipeline, .profile_step, .wan, .faults).
"""

from __future__ import annotations

import json
import os
import subprocess

from benchmarks.common import say
from benchmarks.datasets import criteo_shards, prepare_flights

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRITEO_PARTIES = ("leader", "follower0")  # the default Criteo split's parties


def prepare_data(py: str, rows: int, work: str, name: str = "shards", parties: str | None = None) -> str:
    """The two parties' shards of the cached synthetic rows, hashed into 20000 buckets (the compute benches')."""
    flags = ["--hash-buckets", "20000"] + (["--parties", parties] if parties else [])
    return criteo_shards(
        py, rows, os.path.join(work, name), flags, f"== preparing the two parties' shards of {rows} rows"
    )


def prepare(py: str, rows: int, work: str, dataset: str = "criteo") -> str:
    """Each party's shard, prepared alone, and every party's keys. criteo: the front door's synthetic Criteo-format
    rows split into each party's raw file (vocabulary min count 10); flights: examples/flights/make_parties.py's
    files (the flights whose id falls in a public 1-in-N sample of `rows`, when fewer than all), each prepared by its
    example config."""
    shards = os.path.join(work, "shards")
    if dataset == "flights":
        say(f"== each flights party prepares its own file (a public sample of about {rows} flights) -> {shards}")
        parties = list(prepare_flights(work, rows, shards, py))
    else:
        note = f"== each party prepares its own file of {rows} rows -> {shards}"
        criteo_shards(py, rows, shards, ["--vocab-min-count", "10", "--force"], note)
        parties = list(CRITEO_PARTIES)
    party_keys(py, work, parties)
    return shards


def party_keys(py: str, work: str, parties: list[str]) -> str:
    """WORK/keys with every party's key pair; an earlier bench's keys are kept (vfl.keys never overwrites a key)."""
    keys = os.path.join(work, "keys")
    for party in parties:
        if not os.path.exists(os.path.join(keys, f"{party}.key")):
            subprocess.run([py, "-m", "vfl.keys", "new", party, "--dir", keys], check=True, stdout=subprocess.DEVNULL)
    return keys


def write_configs(
    py: str, work: str, shards: str, tag: str, model: dict, train: dict, leader_model: dict | None = None
) -> dict[str, str]:
    """The two parties' YAML for one run; leader_model (bottom and top) defaults to model with a linear top."""
    import yaml

    from vfl.ports import free_port

    keys = party_keys(py, work, list(CRITEO_PARTIES))
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
