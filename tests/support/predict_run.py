"""A trained split run to predict with, and both parties' `predict` as processes.

Its shards, configs, metrics and each party's file of new rows; the training run's own evaluation to compare scores
with."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from tests.support.party_processes import Procs, party_configs, run_split

EXTRA_IDS = 7  # new rows held by both parties, with categories no training row had
LEADER_ONLY = 3  # new rows only the leader holds: they get no score


def train_for_prediction(synth_tiny, root) -> dict:
    """A split run on synth_tiny's vocabulary shards (evaluation every 2 steps, a checkpoint every 3) and each
    party's file of new rows: its whole raw file, EXTRA_IDS rows with unseen categories, and (leader) LEADER_ONLY
    rows no follower holds."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    shards = root / "shards"
    prepare(str(synth_tiny), str(shards), load_parties(None), PrepareOptions(vocab_min_count=2, seed=0))
    cfgs = party_configs(
        str(root),
        str(shards),
        # with a weight average: prediction must score with the averaged weights the training run evaluated
        train={"epochs": 1, "batch_size": 256, "eval_every_steps": 2, "checkpoint_every": 3, "ema_decay": 0.5},
        leader_train={"early_stopping": {"metric": "auc", "patience": 100}},
    )
    procs = Procs()
    try:
        metrics = run_split(procs, cfgs)
    finally:
        procs.cleanup()
    rows = {}
    for party in ("leader", "follower0"):
        raw = pd.read_csv(shards / "raw" / f"{party}.tsv", sep="\t", dtype=str, keep_default_na=False)
        extra = raw.iloc[:EXTRA_IDS].copy()
        extra["id"] = [f"new-{i}" for i in range(EXTRA_IDS)]
        cats = [c for c in raw.columns if c.startswith("C")]
        extra[cats] = "unseen00"  # a value no training row had: the out-of-vocabulary id
        parts = [raw, extra]
        if party == "leader":
            only = raw.iloc[:LEADER_ONLY].copy()
            only["id"] = [f"leader-only-{i}" for i in range(LEADER_ONLY)]
            parts.append(only)
        rows[party] = root / f"new_{party}.tsv"
        pd.concat(parts).to_csv(rows[party], sep="\t", index=False)
    return {"root": root, "shards": shards, "cfgs": cfgs, "metrics": metrics, "rows": rows}


def predict_processes(procs, trained, out, leader_extra=(), follower_extra=()):
    """Start both parties' `predict` (the follower first), return {party: (exit code, stderr)}."""
    cfgs, rows = trained["cfgs"], trained["rows"]
    run = str(trained["root"] / "out")
    result = {}
    for party, role, extra in (("follower0", "follower", follower_extra), ("leader", "leader", leader_extra)):
        args = [sys.executable, "-m", role, "predict", "--config", cfgs[party], "--rows", str(rows[party])]
        args += ["--run", run, "--out", str(out), "-q", *extra]
        procs.start_argv(party, args)
    for party in ("leader", "follower0"):
        code, _, err = procs.wait(party, timeout=180)
        result[party] = (code, err)
    return result


def evaluate_in_process(trained, ids: np.ndarray) -> np.ndarray:
    """The training run's evaluation code (BottomParty.forward_eval and TopTrainer.predict, as LeaderTrainer.evaluate
    runs them) on the final checkpoints, for the test split's rows `ids`."""
    import torch

    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.training.checkpoint import load_checkpoint
    from vfl.training.party import BottomParty
    from vfl.training.top import TopTrainer

    cuts = []
    for party in ("leader", "follower0"):
        cfg = load_config(trained["cfgs"][party])
        shard = PartyShard(cfg.data.path)
        bottom = BottomParty(cfg, shard, torch.device("cpu"))
        ckpt = load_checkpoint(str(trained["root"] / "out" / "checkpoints" / f"{party}_final.pt"))
        bottom.load_state(ckpt["state"]["bottom"])
        assert np.array_equal(np.asarray(bottom.test_split.ids), ids)
        cuts.append(bottom.forward_eval(slice(0, len(ids)), "test"))
        if party == "leader":
            top = TopTrainer(cfg.train, cfg.model.top, (2, 2), torch.device("cpu"), task=shard.task)
            top.load_state(ckpt["state"]["top"])
    return top.predict(cuts)


def leader_config_with(trained, tmp_path, **train) -> dict:
    """trained, with a leader YAML whose train section also sets `train` (the same run and checkpoints)."""
    import yaml

    doc = yaml.safe_load(open(trained["cfgs"]["leader"]).read())
    doc["train"].update(train)
    path = tmp_path / "leader_predict.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {**trained, "cfgs": {**trained["cfgs"], "leader": str(path)}}


def yaml_load(path: str) -> dict:
    import yaml

    return yaml.safe_load(open(path).read())
