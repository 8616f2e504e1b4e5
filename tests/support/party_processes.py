"""Helpers for integration tests: party configs on a free port, real party processes (vfl.local_parties)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

from tests.support.paths import REPO
from vfl.local_parties import LocalParties

SMALL_MODEL = {"bottom": {"embedding_dim": 8, "hidden": [32, 16], "cut_dim": 2}}


def free_port() -> int:
    from vfl.ports import free_port as pick

    return pick()


def party_keys(tmp, parties) -> dict[str, tuple[str, str]]:
    """{party: (public key file, secret key file)} under tmp/keys, created once per directory."""
    from vfl.wire.curve_keys import create_key_pair, key_paths

    directory = os.path.join(tmp, "keys")
    out = {}
    for p in parties:
        out[p] = key_paths(directory, p)
        if not os.path.exists(out[p][1]):
            create_key_pair(p, directory)
    return out


_KEY_POOL: list[str] = []  # this test process's pool directory, made on first use


def pooled_party_keys(tmp, parties) -> dict[str, tuple[str, str]]:
    """As party_keys, but each party name has one key pair in this whole test process, copied into tmp/keys (each
    test still owns its files, and an embedding-DP ledger kept beside a secret key stays the test's own): a later run
    on the same shards reuses an earlier run's PSI (data.psi_reuse; the cache under <data.path>/psi_cache is sealed
    by these keys and bound to the peer's), so a test whose subject is not the PSI does not pay ~3 CPU-s for it."""
    if not _KEY_POOL:
        pool = tempfile.mkdtemp(prefix="vfl-test-keys-")
        atexit.register(shutil.rmtree, pool, True)
        _KEY_POOL.append(pool)
    pooled = party_keys(_KEY_POOL[0], parties)
    directory = os.path.join(tmp, "keys")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    out = {}
    for p in parties:
        out[p] = tuple(os.path.join(directory, os.path.basename(f)) for f in pooled[p])
        for src, dst in zip(pooled[p], out[p]):
            if not os.path.exists(dst):
                shutil.copy2(src, dst)  # the secret stays 0600
    return out


def party_configs(
    tmp,
    shards,
    followers=("follower0",),
    port=None,
    timeout_s=20,
    train=None,
    model=None,
    top=None,
    privacy=None,
    follower_debug=None,
    leader_train=None,
    bottoms=None,
    fresh_keys=False,
) -> dict[str, str]:
    """Write leader/follower YAMLs under tmp; return {party: path}. leader_train: train keys of the leader only (task);
    bottoms: {party: model.bottom} for parties whose bottom differs from `model`'s. The parties' keys are this test
    process's pooled ones (pooled_party_keys: a run on shards an earlier run used reuses its PSI); fresh_keys: a key
    pair of tmp's own, so the run's PSI runs in full (a test whose subject is the PSI, or the bytes that cross)."""
    port = port or free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    # the tests' runs are short on purpose (a table run under ~50 steps is refused without allow_short_run)
    train = {"epochs": 1, "batch_size": 512, "seed": 0, "log_every": 5, "lr": 0.01, "threads": 1,
             "allow_short_run": True, **(train or {})}  # fmt: skip
    model = {**SMALL_MODEL, **(model or {})}
    keys = (party_keys if fresh_keys else pooled_party_keys)(tmp, ("leader", *followers))
    paths = {}
    leader = {
        "role": "leader",
        "party": "leader",
        "network": {
            "bind": endpoint,
            "followers": list(followers),
            "timeout_s": timeout_s,
            "secret_key_file": keys["leader"][1],
            "follower_keys": {f: keys[f][0] for f in followers},
        },
        "data": {"path": os.path.join(shards, "leader")},
        "model": {**model, "top": top or {"name": "linear"}},
        "train": {**train, **(leader_train or {})},
        "output": {"dir": os.path.join(tmp, "out")},
    }
    if privacy:
        leader["privacy"] = privacy
    for name, doc in [("leader", leader)] + [
        (
            f,
            {
                "role": "follower",
                "party": f,
                "network": {
                    "connect": endpoint,
                    "timeout_s": timeout_s,
                    "secret_key_file": keys[f][1],
                    "leader_key_file": keys["leader"][0],
                },
                "data": {"path": os.path.join(shards, f)},
                "model": model,
                "train": train,
                "output": {"dir": os.path.join(tmp, "out")},
                **({"debug": follower_debug} if follower_debug else {}),
            },
        )
        for f in followers
    ]:
        if bottoms and name in bottoms:
            doc["model"] = {**doc["model"], "bottom": bottoms[name]}
        p = os.path.join(tmp, f"{name}.yaml")
        with open(p, "w") as fh:
            yaml.safe_dump(doc, fh)
        paths[name] = p
    return paths


def run_split(procs, cfgs: dict[str, str], env: dict | None = None) -> dict:
    """Start the leader and every follower of cfgs, require exit 0 from each, return the leader's metrics.json."""
    import json

    procs.start("leader", "leader", cfgs["leader"], env=env)
    for name, path in cfgs.items():
        if name != "leader":
            procs.start(name, "follower", path, env=env)
    for name in cfgs:
        code, _, err = procs.wait(name, timeout=300)
        assert code == 0, f"{name} failed: {err}"
    return json.loads(open(os.path.join(os.path.dirname(cfgs["leader"]), "out", "metrics.json")).read())


def run_centralized(cfgs: dict[str, str], out: str) -> dict:
    """The centralized reference on the same configs (followers in cfgs order), run in this process (`python -m
    vfl.centralized`'s main: the test process has torch loaded already, a subprocess would pay ~3 CPU-s to load it
    again); its metrics.json."""
    import json

    from vfl.centralized import main

    argv = ["--config", cfgs["leader"], "--out", out, "-q"]
    for name, path in cfgs.items():
        if name != "leader":
            argv += ["--follower-config", path]
    code = main(argv)
    log = os.path.join(out, "centralized.log")
    assert code == 0, open(log).read()[-3000:] if os.path.exists(log) else f"vfl.centralized exited {code}"
    return json.loads(open(os.path.join(out, "metrics.json")).read())


class Procs:
    """Starts party processes (vfl.local_parties, each in its own process group; `python -m` parties are forks of a
    preloaded server, tests/support/fork_server.py) and guarantees they are gone at the end (killed by process
    group); `procs` maps each name to its Popen (or ForkedProcess)."""

    def __init__(self):
        self.parties = LocalParties(cwd=REPO)
        self.procs: dict[str, subprocess.Popen] = self.parties.procs

    def start(self, name: str, module: str, config: str, *extra: str, env: dict | None = None) -> subprocess.Popen:
        return self.start_argv(name, [sys.executable, "-m", module, "--config", config, *extra], env=env)

    def start_argv(
        self, name: str, argv: list[str], log: str | None = None, env: dict | None = None
    ) -> subprocess.Popen:
        """Start any command line as `name`: its stdout and stderr into the file `log`, else pipes (read by wait)."""
        if log is not None:
            return self.parties.start(name, argv, stdout=log, stderr=subprocess.STDOUT, env=env, text=True)
        return self.parties.start(name, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)

    def wait(self, name: str, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.procs[name].communicate(timeout=timeout)
        return self.procs[name].returncode, out, err

    def wait_for_line(self, name: str, path: str, needle: str, timeout: float = 60) -> None:
        if not self.parties.wait_for_text(path, needle, timeout, names=(name,)):
            if self.procs[name].poll() is not None:
                raise AssertionError(f"{name} exited before writing {needle!r}")
            raise AssertionError(f"{needle!r} never appeared in {path}")

    def kill(self, name: str) -> None:
        self.parties.stop(name, grace_s=0)

    def cleanup(self) -> None:
        self.parties.close(grace_s=0)
