"""The roles in this process: `Leader(...).fit()` / `.predict(rows)` and `Follower(...).fit()` / `.predict(rows)`.

Each runs its role's entry function (leader/train.py, follower/train.py; leader/predict.py, follower/predict.py) as
`python -m leader|follower` does: config schema, pre-flight checks, CurveZMQ keys, the same body; it raises instead of
exiting, and tells its peers what the command tells them.
"""

from __future__ import annotations

import gc
import json
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Union

from follower.train import train as follower_train
from leader.train import train as leader_train
from vfl.config.schema import ConfigError, PartyConfig, load_config

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


def party_config(
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
    role = ""  # a subclass names its role and runs the role's train(cfg, log, state) in _train

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
        self.config = party_config(config, over, keys, data, out)
        if table is not None:
            shard = prepare_own_table(self.config, table, self.config.output.dir)
            self.config = party_config(config, {**over, "data.path": shard}, keys, None, out)
        if self.config.role != self.role:
            raise ConfigError(f"{type(self).__name__} needs a config with role: {self.role}, got {self.config.role!r}")

    def _run(self) -> dict:
        from vfl.cli import abort_peers, party_keys, peer_reason
        from vfl.obs.logs import RunLog
        from vfl.preflight import preflight

        os.makedirs(self.config.output.dir, exist_ok=True)
        log = RunLog(os.path.join(self.config.output.dir, f"{self.config.party}.log"), self.config.party)
        state: dict = {}
        try:
            cfg = preflight(self.config, log)
            party_keys(cfg)
            self._train(cfg, log, state)
            return state
        except BaseException as e:
            reason = peer_reason(self.config.party, e)  # as the CLI words it: no ledger, path or library text
            if reason is not None:
                abort_peers(state, reason)
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

    _train = staticmethod(leader_train)

    def fit(self) -> History:
        self._run()
        return History.from_out_dir(self.config.output.dir)

    def predict(self, rows: Any, *, run: str | None = None, checkpoint: str | None = None, out: str | None = None):
        """Score new rows (a file, or a DataFrame with the training file's columns) with the followers, who run
        `Follower.predict` or `python -m follower predict`; returns a DataFrame: id, score (or score_<class> per
        class), row. run: the training run's directory (default output.dir); checkpoint: default
        run/checkpoints/<party>_final.pt; out: where predictions.parquet/.csv and predict.json go (default
        run/predict). docs/predict.md."""
        from leader.predict import predict
        from vfl_api.in_process import predict_in_process

        return predict_in_process(self.config, predict, rows, run, checkpoint, out)


class Follower(_Party):
    """A feature party in this process; `fit()` serves the leader until DONE and returns the steps it trained."""

    role = "follower"

    _train = staticmethod(follower_train)

    def fit(self) -> int:
        return int(self._run().get("steps", 0))

    def predict(self, rows: Any, *, run: str | None = None, checkpoint: str | None = None) -> dict:
        """Answer the leader's prediction of new rows (a file, or a DataFrame with the training file's columns);
        returns what this party did (requests, rows sent, the intersection's size). It receives no score."""
        from follower.predict import predict
        from vfl_api.in_process import predict_in_process

        return predict_in_process(self.config, predict, rows, run, checkpoint, None)


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
