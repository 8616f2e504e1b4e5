"""Python API: train and predict with a party, or simulate a run, on the same code as the CLI.

`Leader(...).fit()`, `Follower(...).fit()` and `simulate(...)`; then `Leader(...).predict(rows)`,
`Follower(...).predict(rows)` and `simulate_predict(...)` (docs/predict.md).

    from vfl.api import simulate
    history = simulate("examples/wide_deep_criteo/leader.yaml", ["examples/wide_deep_criteo/follower.yaml"],
                       data="runs/nb/shards", out="runs/nb", overrides={"train.epochs": 2})
    history.test_auc, history.step_losses[:5]   # the model early stopping selected

`Leader` and `Follower` run one party in this process (as `python -m leader|follower` does: config
schema, pre-flight checks, CurveZMQ keys, the same training body) and raise instead of exiting.
`simulate` starts the leader and every follower as local processes over tcp on 127.0.0.1 (the two
CLI commands), waits for them with a deadline, and returns the leader's history.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Union

from vfl.config.schema import ConfigError, PartyConfig, load_config, parse_config
from vfl.local_parties import LocalParties

ConfigLike = Union[str, os.PathLike, dict, PartyConfig]


@dataclass
class History:
    """What a run leaves: per-step training losses, the evaluations (valid/test), and the whole metrics.json."""

    step_losses: list[float] = field(default_factory=list)
    evaluations: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    out_dir: str = ""

    @classmethod
    def from_out_dir(cls, out_dir: str) -> "History":
        with open(os.path.join(out_dir, "metrics.json")) as f:
            m = json.load(f)
        return cls(list(m.get("step_losses", [])), list(m.get("history", [])), m, out_dir)

    @property
    def test(self) -> dict[str, float]:
        """The selected model's test metrics: auc and logloss (binary), accuracy too (K classes), or rmse, mae and r2
        (regression)."""
        return {
            k[5:]: float(v) for k, v in self.metrics.items() if k.startswith("test_") and isinstance(v, (int, float))
        }

    @property
    def test_auc(self) -> float:
        """The selected model's test AUC (binary and K-class tasks; a regression run has test['rmse'] instead)."""
        if "test_auc" not in self.metrics:
            raise AttributeError(f"this run reports no test AUC (a regression task?); its test metrics: {self.test}")
        return float(self.metrics["test_auc"])

    @property
    def csv_path(self) -> str:
        return os.path.join(self.out_dir, "metrics.csv")


def _config(
    config: ConfigLike, overrides: dict[str, Any] | None, keys: str | None, data: str | None, out: str | None
) -> PartyConfig:
    over = dict(overrides or {})
    if data is not None:
        over["data.path"] = str(data)
    if out is not None:
        over["output.dir"] = str(out)
    if isinstance(config, PartyConfig):
        config = config.model_dump(mode="python", exclude_none=True)
    if isinstance(config, dict):
        import copy
        import tempfile

        import yaml

        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(json.loads(json.dumps(copy.deepcopy(config), default=list)), f)
        try:
            return load_config(f.name, over, keys_dir=keys)
        finally:
            os.unlink(f.name)
    return load_config(os.fspath(config), over, keys_dir=keys)


class _Party:
    role = ""

    def __init__(
        self,
        config: ConfigLike,
        *,
        keys: str | None = None,
        data: str | None = None,
        out: str | None = None,
        overrides: dict[str, Any] | None = None,
        table: Any = None,
        **dotted: Any,
    ):
        """config: a YAML path, a dict or a PartyConfig; keys: a --keys DIR; table: this party's own table (a pandas
        DataFrame or a file), prepared under its data.schema into OUT/shards/<party> first; overrides / keyword
        arguments: config keys (`train__lr=1e-4` is `train.lr`)."""
        over = {**(overrides or {}), **{k.replace("__", "."): v for k, v in dotted.items()}}
        self.config = _config(config, over, keys, data, out)
        if table is not None:
            shard = prepare_own_table(self.config, table, self.config.output.dir)
            self.config = _config(config, {**over, "data.path": shard}, keys, None, out)
        if self.config.role != self.role:
            raise ConfigError(f"{type(self).__name__} needs a config with role: {self.role}, got {self.config.role!r}")

    def _run(self) -> dict:
        from vfl.cli import party_keys, peer_reason
        from vfl.obs.logs import RunLog
        from vfl.preflight import preflight

        module = __import__(f"{self.role}.__main__", fromlist=["body", "abort"])
        os.makedirs(self.config.output.dir, exist_ok=True)
        log = RunLog(os.path.join(self.config.output.dir, f"{self.config.party}.log"), self.config.party)
        state: dict = {}
        try:
            cfg = preflight(self.config, log)
            party_keys(cfg)
            module.body(cfg, log, state)
            return state
        except BaseException as e:
            reason = peer_reason(self.config.party, e)  # as the CLI words it: no ledger, path or library text
            if reason is not None:
                module.abort(state, reason)
            if "ctx" in state and state["ctx"].ranks > 1:
                # the traceback's frames hold the trainer and its DDP reducers: freed now, not at interpreter exit
                # (where gloo aborts the process), at the cost of their locals for a post-mortem
                traceback.clear_frames(e.__traceback__)
            raise
        finally:
            if "channel" in state:
                state["channel"].close()
            if "ctx" in state:  # under torchrun: the group this run started (never one of the caller's), and its
                state["ctx"].close()  # DDP reducers, freed while the interpreter is alive (release_process_group)
                gc.collect()
            log.close()


class Leader(_Party):
    """The label party in this process; `fit()` trains with the followers and returns the History."""

    role = "leader"

    def fit(self) -> History:
        self._run()
        return History.from_out_dir(self.config.output.dir)

    def predict(self, rows: Any, *, run: str | None = None, checkpoint: str | None = None, out: str | None = None):
        """Score new rows (a file, or a DataFrame with the training file's columns) with the followers, who run
        `Follower.predict` or `python -m follower predict`; returns a DataFrame: id, score (or score_<class> per
        class), row. run: the training run's directory (default output.dir); checkpoint: default
        run/checkpoints/<party>_final.pt; out: where predictions.parquet/.csv and predict.json go (default
        run/predict). docs/predict.md."""
        from vfl.inference.predict.in_process import predict_in_process

        return predict_in_process(self.config, "leader", rows, run, checkpoint, out)


class Follower(_Party):
    """A feature party in this process; `fit()` serves the leader until DONE and returns the steps it trained."""

    role = "follower"

    def fit(self) -> int:
        return int(self._run().get("steps", 0))

    def predict(self, rows: Any, *, run: str | None = None, checkpoint: str | None = None) -> dict:
        """Answer the leader's prediction of new rows (a file, or a DataFrame with the training file's columns);
        returns what this party did (requests, rows sent, the intersection's size). It receives no score."""
        from vfl.inference.predict.in_process import predict_in_process

        return predict_in_process(self.config, "follower", rows, run, checkpoint, None)


def prepare_own_table(cfg: PartyConfig, table: Any, out: str) -> str:
    """Prepare a party's own table (a pandas DataFrame, or a CSV/TSV/Parquet file) under its data.schema into
    out/shards/<party>; returns that shard directory. A DataFrame is written to out/tables/<party>.parquet first
    (its column types kept)."""
    from vfl.data.prepare import PrepareOptions
    from vfl.data.prepare_table import prepare_table

    if cfg.data.schema is None:
        raise ConfigError(f"{cfg.party}: a table needs data.schema in the party's config (its id, columns and label)")
    if isinstance(table, (str, os.PathLike)):
        path = os.fspath(table)
    else:
        import pandas as pd

        if not isinstance(table, pd.DataFrame):
            raise TypeError(f"{cfg.party}: a table is a pandas DataFrame or a file path, got {type(table).__name__}")
        os.makedirs(os.path.join(out, "tables"), exist_ok=True)
        path = os.path.join(out, "tables", f"{cfg.party}.parquet")
        table.to_parquet(path, index=False)
    shard = os.path.join(out, "shards", cfg.party)
    task = cfg.train.task if cfg.role == "leader" else None
    prepare_table(path, shard, cfg.party, cfg.data.schema, task, PrepareOptions(force=True))
    return shard


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
        n: prepare_own_table(_config(c, overrides, None, None, None), tables[n], out)
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

    from vfl.inference.predict.in_process import rows_file
    from vfl.ports import free_port

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
                shard = _config(path, overrides, keys, None, None).data.path
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


__all__ = ["Follower", "History", "Leader", "prepare_own_table", "simulate", "simulate_predict"]
