"""A local run of every party as processes over tcp on 127.0.0.1: `simulate(...)` and `simulate_predict(...)`.

`simulate` starts the leader and every follower with the two CLI commands (`python -m leader|follower`), waits for
them with a deadline, and returns the leader's History; `simulate_predict` does the same with their `predict`
commands and returns the leader's predictions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from vfl.config.schema import ConfigError, PartyConfig, parse_config
from vfl.local_parties import LocalParties
from vfl_api.roles import ConfigLike, History, party_config, prepare_own_table


def _party_name(config: ConfigLike) -> str:
    if isinstance(config, PartyConfig):
        return config.party
    if isinstance(config, dict):
        return str(config.get("party"))
    from vfl.config.yamlfile import read_yaml

    doc = read_yaml(os.fspath(config), ConfigError, "config file")
    return str(doc.get("party")) if isinstance(doc, dict) else "?"


def _yaml_path(config: ConfigLike, where: str, name: str) -> str:
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config)
    doc = config.model_dump(mode="json", exclude_none=True) if isinstance(config, PartyConfig) else config
    parse_config(dict(doc))  # every problem reported here, before any process starts
    import yaml

    path = os.path.join(where, f"{name}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def simulate(
    leader: ConfigLike,
    followers: list[ConfigLike],
    *,
    data: str | None = None,
    out: str = "runs/simulate",
    keys: str | None = None,
    overrides: dict[str, Any] | None = None,
    timeout_s: float = 3600,
    quiet: bool = True,
    tables: dict[str, Any] | None = None,
    progress_every_s: float = 15.0,
) -> History:
    """Run the leader and followers as local processes (the CLI commands) over tcp on 127.0.0.1.

    data: a prepared dataset directory (OUT of `python -m vfl.data prepare`; each party uses OUT/<party>)
    or None to keep each config's data.path; tables: {party: its own table}, a pandas DataFrame or a file
    (CSV, TSV, Parquet), prepared here under the party's data.schema into out/shards/<party> (fitted on its
    own training rows, as `vfl-data prepare --config` does); keys: a key directory, or None for throwaway
    key pairs under out/keys; overrides: config keys for every party (e.g. {"train.epochs": 2}); progress_every_s:
    print the leader's latest log line (PSI progress, steps, evaluations) at most this often (0: never). Raises
    RuntimeError naming the party that failed (its last stderr lines); every process is gone on return.
    """
    from vfl.ports import free_port
    from vfl.wire.curve_keys import create_key_pair

    os.makedirs(out, exist_ok=True)
    out = os.path.abspath(out)
    names = [_party_name(leader)] + [_party_name(f) for f in followers]
    if keys is None:
        keys = os.path.join(out, "keys")
        for name in names:
            if not os.path.exists(os.path.join(keys, f"{name}.key_secret")):
                create_key_pair(name, keys)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    configs = [_yaml_path(c, out, n) for c, n in zip([leader, *followers], names)]
    unknown = sorted(set(tables or {}) - set(names))
    if unknown:
        raise ConfigError(f"tables names {unknown}, which are not among the parties {names}")
    shards = {
        n: prepare_own_table(party_config(c, overrides, None, None, None), tables[n], out)
        for n, c in zip(names, configs)
        if n in (tables or {})
    }
    pairs = [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()]
    with LocalParties() as parties:
        for i, (name, path) in enumerate(zip(names, configs)):
            role = "leader" if i == 0 else "follower"
            cmd = [
                sys.executable,
                "-m",
                role,
                "--config",
                path,
                "--bind" if i == 0 else "--connect",
                endpoint,
                "--keys",
                keys,
                "--out",
                out,
                *(["--data", shards[name]] if name in shards else ["--data", os.path.join(data, name)] if data else []),
                *([] if i == 0 else ["--set", f"network.leader_key_file={os.path.join(keys, names[0] + '.key')}"]),
                *(["--quiet"] if quiet else []),
                *pairs,
            ]
            parties.start(
                name, cmd, stdout=subprocess.DEVNULL if quiet else None, stderr=os.path.join(out, f"{name}.stderr")
            )
        watch = _Progress(os.path.join(out, f"{names[0]}.log"), progress_every_s)
        failure = parties.wait(timeout_s, watch.tick)
    if failure is not None:
        raise RuntimeError(failure.describe())
    return History.from_out_dir(out)


class _Progress:
    """The leader's latest log line, printed at most every `every_s` seconds while simulate() waits (a notebook
    user saw nothing for 11 minutes, 10 of them PSI)."""

    def __init__(self, log_path: str, every_s: float):
        self.path, self.every_s = log_path, every_s
        self.last_print, self.last_line, self.offset = time.monotonic(), "", 0

    def tick(self) -> None:
        if self.every_s <= 0 or time.monotonic() - self.last_print < self.every_s or not os.path.exists(self.path):
            return
        with open(self.path, errors="replace") as f:
            f.seek(self.offset)
            lines = f.read().splitlines()
            self.offset = f.tell()
        if lines and lines[-1] != self.last_line:
            self.last_line = lines[-1]
            print(f"simulate: {self.last_line}", flush=True)
        self.last_print = time.monotonic()


def simulate_predict(
    leader,
    followers: list,
    rows: dict[str, Any],
    *,
    run: str,
    data: str | None = None,
    out: str | None = None,
    keys: str | None = None,
    overrides: dict[str, Any] | None = None,
    timeout_s: float = 3600,
):
    """Predict with a local run's parties as processes over tcp on 127.0.0.1 (`python -m leader|follower predict`).

    run: the training run's output directory (its checkpoints/, and keys/ when simulate() made them); rows:
    {party: its new rows, a file or a DataFrame}, one per party; data: the prepared dataset (each party's transforms
    in data/<party>), else run/shards/<party> when simulate() prepared tables there, else each config's data.path;
    out: where the predictions go (default run/predict). Returns the leader's predictions (a DataFrame); raises
    RuntimeError naming the party that failed."""
    import json

    import pandas as pd

    from vfl.ports import free_port
    from vfl_api.in_process import rows_file

    run = os.path.abspath(run)
    out = os.path.abspath(out or os.path.join(run, "predict"))
    os.makedirs(out, exist_ok=True)
    keys = keys or os.path.join(run, "keys")
    names = [_party_name(leader)] + [_party_name(f) for f in followers]
    missing = sorted(set(names) - set(rows))
    if missing or set(rows) - set(names):
        raise ConfigError(
            f"rows must name every party {names} once; missing {missing}, unknown {sorted(set(rows) - set(names))}"
        )
    configs = [_yaml_path(c, out, n) for c, n in zip([leader, *followers], names)]
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    pairs = [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()]
    with LocalParties() as parties:
        for i, (name, path) in enumerate(zip(names, configs)):
            shard = os.path.join(data, name) if data else os.path.join(run, "shards", name)
            if not os.path.isdir(shard):
                shard = party_config(path, overrides, keys, None, None).data.path
            cmd = [sys.executable, "-m", "leader" if i == 0 else "follower", "predict", "--config", path]
            cmd += ["--rows", rows_file(rows[name], out, name), "--run", run, "--out", out, "--keys", keys]
            cmd += ["--data", shard, "--bind" if i == 0 else "--connect", endpoint, "-q", *pairs]
            if i:
                cmd += [f"network.leader_key_file={os.path.join(keys, names[0] + '.key')}"]
            parties.start(name, cmd, stderr=os.path.join(out, f"{name}.predict.stderr"))
        failure = parties.wait(timeout_s)
    if failure is not None:
        raise RuntimeError(failure.describe(" predict"))
    return pd.read_parquet(os.path.join(out, "predictions.parquet"))
