"""Batch prediction refuses a follower whose checkpoint is not the leader's run and step: at the handshake, before any
PSI, with one line naming both sides, and never the leader's checkpoint path; a party whose config or keys differ
from its checkpoint's stops before connecting."""

from __future__ import annotations

import pytest


def test_a_checkpoint_of_another_step_is_refused_naming_both_sides(trained, tmp_path):
    """A follower that loads the step-3 checkpoint while the leader loads the final one: the leader refuses at the
    handshake, before any PSI, with one line naming both runs and steps; both stop with exit code 1, no prediction
    file. The follower is told the runs and steps, never the leader's checkpoint path (the leader's log keeps it).
    In this process over the in-memory channel pair, under the parties' own entry (vfl.cli.run_party, as `predict`
    runs them: one-line error, ABORT to the peers); the tcp path is the test above."""
    # Prepare
    import threading

    import torch

    from follower.predictor import FollowerPredictor
    from leader.predictor import LeaderPredictor
    from tests.support.memory_channels import MemoryFollowerChannel, MemoryLeaderChannel, _Queues
    from vfl.cli import run_party
    from vfl.config.schema import load_config
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


def test_the_fingerprint_refuses_another_run_another_key_and_another_config(trained, tmp_path):
    """The leader's check of a PREDICT_HELLO: the follower's own checkpoint passes; the same checkpoint claimed for
    another training run, or with another key, is refused naming both sides; a party whose model config or keys
    differ from its checkpoint's stops before connecting."""
    # Prepare: both parties' records, as their final checkpoints keep them
    import dataclasses
    from types import SimpleNamespace

    from leader.predictor import LeaderPredictor
    from vfl.config.schema import load_config
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
