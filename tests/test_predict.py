"""Batch prediction across parties (`python -m leader predict` / `python -m follower predict`), as real processes
over tcp: train, then predict on new rows, one command each; the scores equal the training run's own evaluation;
checkpoints of another step are refused at the handshake with one line naming both sides."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO
from tests.procs import party_configs, run_split

EXTRA_IDS = 7  # new rows held by both parties, with categories no training row had
LEADER_ONLY = 3  # new rows only the leader holds: they get no score


@pytest.fixture(scope="module")
def trained(synth_tiny, tmp_path_factory):
    """A split run on synth_tiny's vocabulary shards (evaluation every 2 steps, a checkpoint every 3) and each
    party's file of new rows: its whole raw file, EXTRA_IDS rows with unseen categories, and (leader) LEADER_ONLY
    rows no follower holds."""
    from tests.procs import Procs
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    root = tmp_path_factory.mktemp("predict")
    shards = root / "shards"
    prepare(str(synth_tiny), str(shards), load_parties(None), PrepareOptions(vocab_min_count=2, seed=0))
    cfgs = party_configs(
        str(root),
        str(shards),
        train={"epochs": 1, "batch_size": 256, "eval_every_steps": 2, "checkpoint_every": 3},
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


def _predict(procs, trained, out, leader_extra=(), follower_extra=()):
    """Start both parties' `predict` (the follower first), return {party: (exit code, stderr)}."""
    cfgs, rows = trained["cfgs"], trained["rows"]
    run = str(trained["root"] / "out")
    result = {}
    for party, role, extra in (("follower0", "follower", follower_extra), ("leader", "leader", leader_extra)):
        args = [sys.executable, "-m", role, "predict", "--config", cfgs[party], "--rows", str(rows[party])]
        args += ["--run", run, "--out", str(out), "-q", *extra]
        procs.procs[party] = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    for party in ("leader", "follower0"):
        code, _, err = procs.wait(party, timeout=180)
        result[party] = (code, err)
    return result


def _evaluate_in_process(trained, ids: np.ndarray) -> np.ndarray:
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


def test_train_then_predict_equals_the_training_runs_evaluation(trained, procs, tmp_path):
    """One command a party predicts the new rows: every row both parties hold gets a score (unseen categories
    included), the leader-only rows get none and are counted, and on the test split's rows the scores equal, to 1e-6,
    what the training run's evaluation computes (element-wise, and the AUC and logloss of metrics.json)."""
    # Prepare
    from vfl.data.shards import PartyShard

    test = PartyShard(str(trained["shards"] / "leader")).split("test")
    # Execute
    result = _predict(procs, trained, tmp_path / "pred")
    # Assert
    assert result == {"leader": (0, ""), "follower0": (0, "")}, result
    report = json.loads((tmp_path / "pred" / "predict.json").read_text())
    n_raw = len(pd.read_csv(trained["rows"]["follower0"], sep="\t", usecols=["id"])) - EXTRA_IDS
    assert report["rows_scored"] == n_raw + EXTRA_IDS and report["rows_without_score"] == LEADER_ONLY
    assert report["oov_fraction"] > 0
    parquet = pd.read_parquet(tmp_path / "pred" / "predictions.parquet")
    csv = pd.read_csv(tmp_path / "pred" / "predictions.csv")
    assert list(parquet.columns) == ["id", "score", "row"] and len(parquet) == report["rows_scored"]
    np.testing.assert_allclose(csv["score"], parquet["score"], rtol=0, atol=1e-12)
    assert parquet["id"].is_monotonic_increasing and parquet["score"].between(0, 1).all()
    scores = parquet.set_index("id").loc[np.asarray(test.ids), "score"].to_numpy()
    np.testing.assert_allclose(scores, _evaluate_in_process(trained, np.asarray(test.ids)), rtol=0, atol=1e-6)
    from vfl.obs.metrics import test_metrics

    m = test_metrics(np.asarray(test.labels), scores)
    assert m["test_auc"] == pytest.approx(trained["metrics"]["test_auc"], abs=1e-6)
    assert m["test_logloss"] == pytest.approx(trained["metrics"]["test_logloss"], abs=1e-6)
    assert set(report["metrics"]) == {"auc", "logloss"}  # the leader's file carried the label


def test_a_checkpoint_of_another_step_is_refused_naming_both_sides(trained, procs, tmp_path):
    """A follower that loads the step-3 checkpoint while the leader loads the final one: the leader refuses at the
    handshake, before any PSI, with one line naming both runs and steps; both exit non-zero, no prediction file."""
    # Prepare
    ckpt = trained["root"] / "out" / "checkpoints" / "follower0_step3.pt"
    # Execute
    result = _predict(procs, trained, tmp_path / "pred", follower_extra=("--checkpoint", str(ckpt)))
    # Assert
    code, err = result["leader"]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(lines) == 1, err
    run = trained["metrics"]["run_id"][:12]
    assert f"follower0's checkpoint is of training run {run} step 3, the leader's" in lines[0]
    assert f"of run {run} step {trained['metrics']['model_step']}" in lines[0]
    assert result["follower0"][0] == 1
    assert not (tmp_path / "pred" / "predictions.parquet").exists()


def _follower_view(trained, tmp_path, leader_rows, perturb_top: bool, leak: bool = False):
    """Predict in this process over the in-memory channel pair (every message encoded, decoded and parsed as on the
    wire); returns (every message the leader sent the follower, the leader's scores). PSI is replaced by the clear
    intersection of both files' ids (its own view is tested in test_psi.py): what is compared here is the prediction
    phase. leak: plant a leak (a PREDICT_DONE whose row count encodes the first score) for the power test."""
    import threading

    import torch

    from tests.test_trainers_in_memory import MemoryFollowerChannel, MemoryLeaderChannel, _Queues
    from vfl.config.schema import load_config
    from vfl.inference.predict_follower import FollowerPredictor
    from vfl.inference.predict_leader import LeaderPredictor
    from vfl.obs.logs import RunLog
    from vfl.wire.messages import Abort
    from vfl.wire.predict_messages import PredictDone

    ckpts = trained["root"] / "out" / "checkpoints"
    cfg = {p: load_config(trained["cfgs"][p]) for p in ("leader", "follower0")}
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = RunLog(str(tmp_path / "view.log"), "test")
    lead = LeaderPredictor(cfg["leader"], str(ckpts / "leader_final.pt"), str(leader_rows), log, torch.device("cpu"))
    follower = FollowerPredictor(
        cfg["follower0"], str(ckpts / "follower0_final.pt"), str(trained["rows"]["follower0"]), log, torch.device("cpu")
    )
    if perturb_top:  # another top: every score changes
        with torch.no_grad():
            for p in lead.top.model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    if leak:
        score = lead._score

        def leaky(session, batch_rows, writer, scores):
            score(session, batch_rows, writer, scores)
            session.post_all(PredictDone(rows=int(1e6 * float(np.ravel(scores[0])[0]))))

        lead._score = leaky
    common = np.intersect1d(lead.rows.ids, follower.rows.ids)
    queues = _Queues(("follower0",))
    errors = []

    follower_channel = MemoryFollowerChannel("follower0", queues)

    def follow():
        try:
            follower.run(follower_channel, lambda ids: (common, None))
        except Exception as e:  # noqa: BLE001 - the planted leak makes the follower refuse; its view is still kept
            errors.append(e)
            follower_channel.post(Abort(f"follower0: {e}"))  # as follower/__main__.py: the leader is told at once

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        lead.run(MemoryLeaderChannel("leader", queues), lambda ids: (common, None), str(tmp_path / "out"))
    except Exception as e:  # noqa: BLE001 - as above
        errors.append(e)
    thread.join(30)
    for r in (lead.rows, follower.rows):
        r.close()
    assert leak or not errors, errors
    import pandas as pd

    view = [m for s, r, m in queues.posted if s == "leader" and r == "follower0"]
    scores = pd.read_parquet(tmp_path / "out" / "predictions.parquet")["score"].to_numpy() if not leak else None
    return view, scores


def test_a_follower_receives_nothing_that_depends_on_the_scores_or_the_labels(trained, tmp_path):
    """The follower's full view of a prediction (every message the leader sends it) is the same, message for message,
    when the leader's labels are flipped and its top model replaced (so that every score changes), once the session's
    fresh run id and nonce are set aside; a planted leak (a row count that encodes a score) is caught by the same
    comparison (power)."""
    # Prepare: the leader's new rows, and the same rows with every label flipped
    import dataclasses

    from vfl.wire.predict_messages import PredictWelcome

    rows = pd.read_csv(trained["rows"]["leader"], sep="\t", dtype=str, keep_default_na=False)
    rows["label"] = np.where(rows["label"] == "1", "0", "1")
    flipped = tmp_path / "flipped.tsv"
    rows.to_csv(flipped, sep="\t", index=False)

    def normal(view):
        return [dataclasses.replace(m, run="", nonce="") if isinstance(m, PredictWelcome) else m for m in view]

    # Execute
    view_a, scores_a = _follower_view(trained, tmp_path / "a", trained["rows"]["leader"], perturb_top=False)
    view_b, scores_b = _follower_view(trained, tmp_path / "b", flipped, perturb_top=True)
    leak_a, _ = _follower_view(trained, tmp_path / "c", trained["rows"]["leader"], perturb_top=False, leak=True)
    leak_b, _ = _follower_view(trained, tmp_path / "d", flipped, perturb_top=True, leak=True)
    # Assert: the scores differ everywhere, the follower's views do not; the planted leak shows
    assert np.abs(scores_a - scores_b).min() > 0
    assert len(view_a) > 2 and normal(view_a) == normal(view_b)
    assert normal(leak_a) != normal(leak_b)


def test_the_fingerprint_refuses_another_run_another_key_and_another_config(trained, tmp_path):
    """The leader's check of a PREDICT_HELLO: the follower's own checkpoint passes; the same checkpoint claimed for
    another training run, or with another key, is refused naming both sides; a party whose model config or keys
    differ from its checkpoint's stops before connecting."""
    # Prepare: both parties' records, as their final checkpoints keep them
    import dataclasses
    from types import SimpleNamespace

    from vfl.config.schema import load_config
    from vfl.inference.fingerprint import check_own, key_fingerprints, pair_fingerprint
    from vfl.inference.predict_leader import LeaderPredictor
    from vfl.training.checkpoint import load_checkpoint
    from vfl.wire import PROTOCOL_VERSION
    from vfl.wire.predict_messages import PredictHello

    ckpts = trained["root"] / "out" / "checkpoints"
    cfg = {p: load_config(trained["cfgs"][p]) for p in ("leader", "follower0")}
    rec = {p: load_checkpoint(str(ckpts / f"{p}_final.pt"))["extra"]["run"] for p in cfg}
    leader = SimpleNamespace(record=rec["leader"], checkpoint="leader_final.pt")
    ours = PredictHello(
        "0" * 32,
        "follower0",
        PROTOCOL_VERSION,
        rec["follower0"]["run"],
        rec["follower0"]["model_step"],
        pair_fingerprint(rec["follower0"], "follower0", 2, leader_side=False),
        2,
        100,
        20.0,
    )
    other_run = dataclasses.replace(ours, run="f" * 32)
    other_key = dataclasses.replace(
        ours,
        fingerprint=pair_fingerprint({**rec["follower0"], "keys": {"self": "x", "leader": "y"}}, "follower0", 2, False),
    )
    # Execute
    problems = {
        name: LeaderPredictor._check_hello(leader, "follower0", h)
        for name, h in [("ours", ours), ("run", other_run), ("key", other_key)]
    }
    # Assert
    assert problems["ours"] == []
    run = rec["leader"]["run"][:12]
    assert problems["run"][0].startswith("follower0's checkpoint is of training run ffffffffffff step ")
    assert f"the leader's (leader_final.pt) of run {run} step {rec['leader']['model_step']}" in problems["run"][0]
    assert "its keys or model differ from the training run's" in problems["key"][0]
    f = cfg["follower0"]
    bottom = f.model.bottom.model_copy(update={"cut_dim": 3})
    bigger = f.model_copy(update={"model": f.model.model_copy(update={"bottom": bottom})})
    with pytest.raises(ValueError, match="trained with another model config"):
        check_own(rec["follower0"], bigger, "follower0_final.pt", key_fingerprints(cfg["follower0"]))
    with pytest.raises(ValueError, match="trained under other CurveZMQ keys: follower0"):
        check_own(rec["follower0"], cfg["follower0"], "f.pt", {**key_fingerprints(cfg["follower0"]), "self": "z"})
