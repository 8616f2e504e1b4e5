"""Batch prediction across parties (`python -m leader predict` / `python -m follower predict`), as real processes
over tcp: train, then predict on new rows, one command each; the scores equal the training run's own evaluation;
checkpoints of another step are refused at the handshake with one line naming both sides."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from tests.support.party_processes import party_configs, run_split

EXTRA_IDS = 7  # new rows held by both parties, with categories no training row had
LEADER_ONLY = 3  # new rows only the leader holds: they get no score


@pytest.fixture(scope="module")
def trained(synth_tiny, tmp_path_factory):
    """A split run on synth_tiny's vocabulary shards (evaluation every 2 steps, a checkpoint every 3) and each
    party's file of new rows: its whole raw file, EXTRA_IDS rows with unseen categories, and (leader) LEADER_ONLY
    rows no follower holds."""
    from tests.support.party_processes import Procs
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    root = tmp_path_factory.mktemp("predict")
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


def _predict(procs, trained, out, leader_extra=(), follower_extra=()):
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


def test_a_checkpoint_of_another_step_is_refused_naming_both_sides(trained, tmp_path):
    """A follower that loads the step-3 checkpoint while the leader loads the final one: the leader refuses at the
    handshake, before any PSI, with one line naming both runs and steps; both stop with exit code 1, no prediction
    file. The follower is told the runs and steps, never the leader's checkpoint path (the leader's log keeps it).
    In this process over the in-memory channel pair, under the parties' own entry (vfl.cli.run_party, as `predict`
    runs them: one-line error, ABORT to the peers); the tcp path is the test above."""
    # Prepare
    import threading

    import torch

    from tests.support.memory_channels import MemoryFollowerChannel, MemoryLeaderChannel, _Queues
    from vfl.cli import run_party
    from vfl.config.schema import load_config
    from vfl.inference.predict.follower import FollowerPredictor
    from vfl.inference.predict.leader import LeaderPredictor
    from vfl.obs.logs import RunLog, message_of
    from vfl.wire.messages import Abort

    ckpts = trained["root"] / "out" / "checkpoints"
    cfg = {p: load_config(trained["cfgs"][p]) for p in ("leader", "follower0")}
    logs = {p: RunLog(str(tmp_path / f"{p}.log"), p) for p in cfg}
    cpu = torch.device("cpu")
    lead = LeaderPredictor(
        cfg["leader"], str(ckpts / "leader_final.pt"), str(trained["rows"]["leader"]), logs["leader"], cpu
    )
    follower = FollowerPredictor(
        cfg["follower0"], str(ckpts / "follower0_step3.pt"), str(trained["rows"]["follower0"]), logs["follower0"], cpu
    )
    queues = _Queues(("follower0",))
    lch, fch = MemoryLeaderChannel("leader", queues), MemoryFollowerChannel("follower0", queues)
    psi_calls, codes = [], {}

    def psi(ids):
        psi_calls.append(ids)
        return ids, None

    # Execute
    def follow():
        codes["follower0"] = run_party(
            cfg["follower0"], logs["follower0"], lambda: follower.run(fch, psi), lambda r: fch.post(Abort(r))
        )

    thread = threading.Thread(target=follow, name="follower0", daemon=True)
    thread.start()
    out = tmp_path / "pred"
    codes["leader"] = run_party(
        cfg["leader"], logs["leader"], lambda: lead.run(lch, psi, str(out)), lambda r: lch.abort_all(r)
    )
    thread.join(30)
    for p in cfg:
        logs[p].close()
    for r in (lead.rows, follower.rows):
        r.close()
    # Assert
    text = {p: (tmp_path / f"{p}.log").read_text() for p in cfg}
    errors = {p: [message_of(line) for line in text[p].splitlines() if " ERROR " in line] for p in cfg}
    assert codes == {"leader": 1, "follower0": 1} and not psi_calls
    assert len(errors["leader"]) == 1 and len(errors["follower0"]) == 1, errors
    run, step = trained["metrics"]["run_id"][:12], trained["metrics"]["model_step"]
    for line in (errors["leader"][0], errors["follower0"][0]):
        assert f"follower0's checkpoint is of training run {run} step 3, the leader's of run {run} step {step}" in line
        assert "leader_final.pt" not in line
    told = [m.reason for s, _, m in queues.posted if s == "leader" and isinstance(m, Abort)]
    assert len(told) == 1 and "leader_final.pt" not in told[0] and "step 3" in told[0]
    assert str(ckpts / "leader_final.pt") in text["leader"]  # the leader's own log names its checkpoint
    assert not (out / "predictions.parquet").exists()


def _fixed_randomness(monkeypatch, seed: int = 5) -> None:
    """Every draw of `secrets` (PSI exponents, shuffles, padding, tickets, nonces) from a seeded generator per thread
    (the leader in the main thread, the follower in its own), so two predictions draw the same randomness and a
    follower's views of them can be compared byte for byte: any difference then comes from the leader's inputs."""
    import random
    import secrets
    import threading

    rngs: dict[str, random.Random] = {}

    def rng() -> random.Random:
        name = threading.current_thread().name
        return rngs.setdefault(name, random.Random(f"{seed}/{name}"))

    monkeypatch.setattr(secrets, "token_bytes", lambda n=None: rng().randbytes(32 if n is None else n))
    monkeypatch.setattr(secrets, "randbits", lambda k: rng().getrandbits(k))


def _wire_view(messages) -> list:
    """Messages as their wire content: (type, meta as JSON, each tensor's dtype, shape and bytes); LINK_REPORT's
    timings left out (the round trip the leader's clock measured at the greeting, before any label or score)."""
    out = []
    for m in messages:
        meta, tensors = m.to_wire()
        if m.TYPE == "LINK_REPORT":
            meta = {k: v for k, v in meta.items() if k not in ("rtt_ms", "down_mbit", "up_mbit")}
        arrays = [(np.asarray(t).dtype.str, np.asarray(t).shape, np.asarray(t).tobytes()) for t in tensors]
        out.append((m.TYPE, json.dumps(meta, sort_keys=True, default=repr), arrays))
    return out


def _follower_view(trained, tmp_path, monkeypatch, leader_rows, follower_rows, perturb_top=False, leak=False):
    """Predict in this process over the in-memory channel pair (every message encoded, decoded and parsed as on the
    wire), the real PSI included (vfl/align/psi, with _fixed_randomness); returns (every message the leader sent the
    follower as _wire_view, the intersection the follower's PSI gave it, the leader's scores, its report).
    leak: plant a leak (a PREDICT_DONE whose row count encodes the first score) for the power test."""
    import threading

    import torch

    from tests.support.memory_channels import MemoryFollowerChannel, MemoryLeaderChannel, _Queues
    from vfl.align.psi.leader_side import leader_psi
    from vfl.align.psi.protocol import follower_psi
    from vfl.config.schema import load_config
    from vfl.inference.predict.follower import FollowerPredictor
    from vfl.inference.predict.leader import LeaderPredictor
    from vfl.obs.logs import RunLog
    from vfl.wire.messages import Abort
    from vfl.wire.predict_messages import PredictDone

    _fixed_randomness(monkeypatch)
    ckpts = trained["root"] / "out" / "checkpoints"
    cfg = {p: load_config(trained["cfgs"][p]) for p in ("leader", "follower0")}
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = RunLog(str(tmp_path / "view.log"), "test")
    lead = LeaderPredictor(cfg["leader"], str(ckpts / "leader_final.pt"), str(leader_rows), log, torch.device("cpu"))
    follower = FollowerPredictor(
        cfg["follower0"], str(ckpts / "follower0_final.pt"), str(follower_rows), log, torch.device("cpu")
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
    queues = _Queues(("follower0",))
    leader_channel, follower_channel = MemoryLeaderChannel("leader", queues), MemoryFollowerChannel("follower0", queues)
    errors, learnt = [], {}

    def follower_side_psi(ids):
        learnt["common"], report = follower_psi(follower_channel, ids)
        return learnt["common"], report

    def follow():
        try:
            follower.run(follower_channel, follower_side_psi)
        except Exception as e:  # noqa: BLE001 - the planted leak makes the follower refuse; its view is still kept
            errors.append(e)
            follower_channel.post(Abort(f"follower0: {e}"))  # as follower/__main__.py: the leader is told at once

    thread = threading.Thread(target=follow, name="follower0-view", daemon=True)
    thread.start()
    report = None
    try:
        report = lead.run(
            leader_channel, lambda ids: leader_psi(leader_channel, ["follower0"], ids), str(tmp_path / "out")
        )
    except Exception as e:  # noqa: BLE001 - as above
        errors.append(e)
    thread.join(30)
    for r in (lead.rows, follower.rows):
        r.close()
    assert leak or not errors, errors
    view = _wire_view(m for s, r, m in queues.posted if s == "leader" and r == "follower0")
    scores = pd.read_parquet(tmp_path / "out" / "predictions.parquet")["score"].to_numpy() if not leak else None
    return view, learnt.get("common"), scores, report


def _view_files(trained, tmp_path) -> dict:
    """Small files of new rows (fewer ids than PSI's parallel threshold): the follower holds raw rows 100..399, the
    leader rows 0..299 in four versions: as they are; flipped, with 40 blank (rows 80..119) and 25
    invalid ("2", "x", "nan", " ", "-1", "1.5"; rows 150..169 and 200..204); without the label column; and with a
    malformed feature value in rows 0..2 and 110..111."""
    raw = {p: pd.read_csv(trained["rows"][p], sep="\t", dtype=str, keep_default_na=False) for p in trained["rows"]}
    follower = tmp_path / "follower.tsv"
    raw["follower0"].iloc[100:400].to_csv(follower, sep="\t", index=False)
    leader = raw["leader"].iloc[:300].reset_index(drop=True)
    versions = {"as_is": leader.copy(), "no_label": leader.drop(columns=["label"])}
    varied = leader.copy()
    varied["label"] = np.where(varied["label"] == "1", "0", "1")
    varied.loc[80:119, "label"] = ""  # outcome not known yet: half outside, half inside the intersection
    varied.loc[150:169, "label"] = ["2", "x", "nan", " ", "-1"] * 4
    varied.loc[200:204, "label"] = "1.5"  # a fraction; "1.0" would be class 1, as in any table
    versions["varied"] = varied
    malformed = leader.copy()
    malformed.loc[0:2, "I1"] = "abc"  # refused for a feature value: rows 0..2 (outside), 110..111 (inside)
    malformed.loc[110:111, "I1"] = "abc"
    versions["malformed"] = malformed
    paths = {"follower": follower}
    for name, df in versions.items():
        paths[name] = tmp_path / f"leader_{name}.tsv"
        df.to_csv(paths[name], sep="\t", index=False)
    paths["ids"] = {
        "leader": raw["leader"]["id"].iloc[:300].to_numpy(),
        "follower": raw["follower0"]["id"].iloc[100:400].to_numpy(),
    }
    return paths


def test_a_follower_view_with_psi_does_not_depend_on_the_leaders_labels_or_scores(trained, tmp_path, monkeypatch):
    """The follower's full view of a prediction, PSI included (every message the leader sends it, byte for byte, and
    the intersection its PSI gives it) is the same whether the leader's file carries its labels as they are, flipped
    with some blank or invalid (an outcome not known yet) under another top model (every score changes), or no label
    column at all: a row is never dropped for its label. The rows with a blank or invalid label are scored and only
    leave the metrics. Power: a planted leak of a score in PREDICT_DONE, and a planted drop of the rows with an
    invalid label before PSI (the reader's old behaviour), each change the view."""
    # Prepare
    from vfl.data import frozen
    from vfl.data.ids import ids64

    files = _view_files(trained, tmp_path)
    want = np.sort(ids64(np.intersect1d(files["ids"]["leader"], files["ids"]["follower"])))

    def run(name, label_file, **kw):
        return _follower_view(trained, tmp_path / name, monkeypatch, files[label_file], files["follower"], **kw)

    # Execute
    view_a, common_a, scores_a, report_a = run("a", "as_is")
    view_b, common_b, scores_b, report_b = run("b", "varied", perturb_top=True)
    view_c, common_c, _, report_c = run("c", "no_label")
    _, _, _, report_bad = run("bad", "malformed")
    leak_a, *_ = run("leak_a", "as_is", leak=True)
    leak_b, *_ = run("leak_b", "varied", perturb_top=True, leak=True)
    read = frozen.FrozenTransforms.read

    def drop_invalid_labels(self, *args, **kw):  # the planted label-dependent drop
        for block in read(self, *args, **kw):
            if block.label_valid is not None:
                k = block.label_valid
                block = frozen.NewBlock(*(None if v is None else v[k] for v in vars(block).values()))
            yield block

    monkeypatch.setattr(frozen.FrozenTransforms, "read", drop_invalid_labels)
    view_drop, common_drop, _, _ = run("drop", "varied", perturb_top=True)
    # Assert: the scores differ everywhere, the follower's views and intersections do not
    assert np.abs(scores_a - scores_b).min() > 0
    assert {t for t, _, _ in view_a} == {
        "PREDICT_WELCOME", "PSI", "PREDICT_ROWS", "PREDICT_DONE", "LINK_PROBE", "LINK_REPORT"
    }  # fmt: skip
    assert view_a == view_b == view_c
    assert np.array_equal(common_a, want) and np.array_equal(common_b, want) and np.array_equal(common_c, want)
    # every row held by both (raw rows 100..299) is scored; the metrics leave out the 20 blank and 25 invalid labels
    # among them
    assert report_a["rows_scored"] == report_b["rows_scored"] == report_c["rows_scored"] == want.size
    assert report_a["rows_evaluated"] == want.size and report_a["rows_without_valid_label"] == 0
    assert report_b["rows_without_valid_label"] == 45 and report_b["rows_evaluated"] == want.size - 45
    assert set(report_b["metrics"]) == {"auc", "logloss"} and "metrics" not in report_c
    # rows refused for a malformed feature count among the rows without a score (5 of them, 2 held by both)
    assert report_bad["rows_in_file"] == 300 and report_bad["bad_rows_skipped"] == 5
    assert report_bad["rows_scored"] == want.size - 2 and report_bad["rows_without_score"] == 300 - want.size + 2
    # Assert (power): a leaked score, and a label-dependent drop, each show in the follower's view
    assert leak_a != leak_b
    assert view_drop != view_b and common_drop.size == want.size - 45


def test_the_fingerprint_refuses_another_run_another_key_and_another_config(trained, tmp_path):
    """The leader's check of a PREDICT_HELLO: the follower's own checkpoint passes; the same checkpoint claimed for
    another training run, or with another key, is refused naming both sides; a party whose model config or keys
    differ from its checkpoint's stops before connecting."""
    # Prepare: both parties' records, as their final checkpoints keep them
    import dataclasses
    from types import SimpleNamespace

    from vfl.config.schema import load_config
    from vfl.inference.predict.leader import LeaderPredictor
    from vfl.runs.record import check_own, key_fingerprints, pair_fingerprint
    from vfl.training.checkpoint import load_checkpoint
    from vfl.wire import PROTOCOL_VERSION
    from vfl.wire.predict_messages import PredictHello

    ckpts = trained["root"] / "out" / "checkpoints"
    cfg = {p: load_config(trained["cfgs"][p]) for p in ("leader", "follower0")}
    rec = {p: load_checkpoint(str(ckpts / f"{p}_final.pt"))["extra"]["run"] for p in cfg}
    logged = []  # the leader's own log
    leader = SimpleNamespace(
        record=rec["leader"],
        checkpoint="/runs/x/leader_final.pt",
        cfg=SimpleNamespace(party="leader"),
        log=logged.append,
    )
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
    assert f"the leader's of run {run} step {rec['leader']['model_step']}" in problems["run"][0]
    # the sentences reach the follower (ABORT): the leader's checkpoint path stays in the leader's own log
    assert not any("leader_final.pt" in p for ps in problems.values() for p in ps)
    assert len(logged) == 2 and all("/runs/x/leader_final.pt" in line for line in logged)
    assert "its keys or model differ from the training run's" in problems["key"][0]
    f = cfg["follower0"]
    bottom = f.model.bottom.model_copy(update={"cut_dim": 3})
    bigger = f.model_copy(update={"model": f.model.model_copy(update={"bottom": bottom})})
    with pytest.raises(ValueError, match="trained with another model config"):
        check_own(rec["follower0"], bigger, "follower0_final.pt", key_fingerprints(cfg["follower0"]))
    with pytest.raises(ValueError, match="trained under other CurveZMQ keys: follower0"):
        check_own(rec["follower0"], cfg["follower0"], "f.pt", {**key_fingerprints(cfg["follower0"]), "self": "z"})


def _leader_config_with(trained, tmp_path, **train) -> dict:
    """trained, with a leader YAML whose train section also sets `train` (the same run and checkpoints)."""
    import yaml

    doc = yaml.safe_load(open(trained["cfgs"]["leader"]).read())
    doc["train"].update(train)
    path = tmp_path / "leader_predict.yaml"
    path.write_text(yaml.safe_dump(doc))
    return {**trained, "cfgs": {**trained["cfgs"], "leader": str(path)}}


def test_the_leader_asks_for_a_window_of_ranges_before_the_first_cut_returns(trained, tmp_path, monkeypatch):
    """Prediction streams: PREDICT_WINDOW ranges are out before the leader awaits the first cut, and never more, so a
    long round trip is paid a few times, not once a range (the scores are the same: test above)."""
    # Prepare: ranges of 16 rows; the in-memory leader channel records what the leader posts and awaits
    from tests.support import memory_channels as memory
    from vfl.inference.predict.leader import PREDICT_WINDOW

    log = []

    class Recording(memory.MemoryLeaderChannel):
        def post(self, peer, message):
            log.append(("post", message.TYPE))
            super().post(peer, message)

        def expect(self, peer, *classes, what=None):
            msg = super().expect(peer, *classes, what=what)
            log.append(("recv", msg.TYPE))
            return msg

    monkeypatch.setattr(memory, "MemoryLeaderChannel", Recording)
    small = _leader_config_with(trained, tmp_path, eval_batch_size=16)
    files = _view_files(trained, tmp_path)
    # Execute
    _, _, scores, report = _follower_view(small, tmp_path / "w", monkeypatch, files["as_is"], files["follower"])
    # Assert: the window before the first cut, then one range asked per cut received
    events = [e for e in log if e[1] in ("PREDICT_ROWS", "PREDICT_CUT")]
    ranges = -(-report["rows_scored"] // 16)
    assert ranges > PREDICT_WINDOW and len(scores) == report["rows_scored"]
    assert events[:PREDICT_WINDOW] == [("post", "PREDICT_ROWS")] * PREDICT_WINDOW
    assert events[PREDICT_WINDOW] == ("recv", "PREDICT_CUT")
    out = [sum(1 if k == "post" else -1 for k, _ in events[: i + 1]) for i in range(len(events))]
    assert max(out) == PREDICT_WINDOW and out[-1] == 0 and events.count(("post", "PREDICT_ROWS")) == ranges


def test_predict_through_a_wan_link_gives_the_same_scores(trained, procs, tmp_path):
    """Both parties' `predict` as processes, the follower connected through the shipped relay (40 ms RTT, 5 ms
    jitter, 100 Mbit/s) with ranges of 32 rows: every row is scored, the test split's as the training run's
    evaluation computes them (to 1e-6), and the cuts travelled through the link."""
    # Prepare
    from vfl.data.shards import PartyShard
    from vfl.netlink.relay import LinkSpec, Relay

    test = PartyShard(str(trained["shards"] / "leader")).split("test")
    small = _leader_config_with(trained, tmp_path, eval_batch_size=32)
    port = int(yaml_load(small["cfgs"]["leader"])["network"]["bind"].rsplit(":", 1)[1])
    # Execute
    with Relay(("127.0.0.1", port), LinkSpec(rtt_ms=40, jitter_ms=5, bandwidth_mbit=100), seed=1) as relay:
        result = _predict(procs, small, tmp_path / "wan", follower_extra=(f"network.connect={relay.endpoint}",))
    # Assert
    assert result == {"leader": (0, ""), "follower0": (0, "")}, result
    report = json.loads((tmp_path / "wan" / "predict.json").read_text())
    parquet = pd.read_parquet(tmp_path / "wan" / "predictions.parquet")
    assert len(parquet) == report["rows_scored"] and report["rows_without_score"] == LEADER_ONLY
    scores = parquet.set_index("id").loc[np.asarray(test.ids), "score"].to_numpy()
    np.testing.assert_allclose(scores, _evaluate_in_process(trained, np.asarray(test.ids)), rtol=0, atol=1e-6)
    cut_bytes = 4 * 2 * len(parquet)  # float32, cut_dim 2
    assert relay.bytes_up > cut_bytes and relay.bytes_down > 0


def yaml_load(path: str) -> dict:
    import yaml

    return yaml.safe_load(open(path).read())


def test_batch_prediction_logs_each_followers_round_trip_as_serving_does(trained, tmp_path, monkeypatch):
    """The leader times each follower's round trip at its PREDICT_HELLO and logs it as serving does at SERVE_HELLO,
    and predict.json keeps it (docs/deploy-wan.md)."""
    # Prepare
    import re

    files = _view_files(trained, tmp_path)
    # Execute
    _, _, _, report = _follower_view(trained, tmp_path / "view", monkeypatch, files["as_is"], files["follower"])
    # Assert
    log = (tmp_path / "view" / "view.log").read_text()
    assert re.search(r"leader leader: link to follower0: RTT \d+\.\d\d ms \(timed at its PREDICT_HELLO\)", log), log
    assert report["links"]["follower0"]["rtt_ms"] > 0
    assert report["psi"]["wait_seconds"] + report["psi"]["work_seconds"] == pytest.approx(
        report["psi"]["seconds"], abs=2e-3
    )
