"""What each trainer refuses of its peer, in memory (tests/support/trainer_session.py): a cut or a gradient of another
epoch or phase, and an evaluation whose id digest does not name the follower's rows (a forged intersection, the whole
split named by the follower's own HELLO digest, stage-one digests of other ids): no cut leaves the follower."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.support.trainer_session import Session, eval_cuts, tamper
from vfl.wire import PeerAbort, WireError
from vfl.wire.messages import Embedding, Eval, Forward, Gradient, WireMessage


def test_a_follower_answering_another_epoch_is_refused_by_the_leader(tmp_path, shards_small):
    """The leader checks every training EMBEDDING against the (epoch, step) it asked for, not the step alone."""
    # Prepare: a follower whose cuts claim epoch 1 while the leader trains epoch 0
    s = Session(tmp_path, shards_small, train={"batch_size": 16000})
    tamper(s.follower_ch, Embedding, epoch=1)
    # Execute / Assert
    with pytest.raises(WireError, match=r"EMBEDDING from follower0: expected step 0 of epoch 0, got epoch 1 step 0"):
        with s:
            s.leader.prepare()
            s.leader.train()
    assert isinstance(s.error, PeerAbort)


@pytest.mark.parametrize(
    "change, needle",
    [({"epoch": 1}, "got epoch 1 step 0 phase None"), ({"phase": "prior"}, "got epoch 0 step 0 phase prior")],
)
def test_a_gradient_for_another_epoch_or_phase_is_refused_by_the_follower(tmp_path, shards_small, change, needle):
    """The follower checks every GRADIENT against the (epoch, step, phase) of the cut it sent."""
    # Prepare: a leader whose gradients claim another epoch, or LP-2ST's stage one
    s = Session(tmp_path, shards_small, train={"batch_size": 16000})
    tamper(s.leader_ch, Gradient, **change)
    # Execute / Assert: the follower refuses and tells the leader, which stops with its reason
    with pytest.raises(PeerAbort, match="GRADIENT: expected epoch 0 step 0 phase None, " + needle):
        with s:
            s.leader.prepare()
            s.leader.train()
            s.leader.finish(0, s.leader.loop.global_step)
    assert isinstance(s.error, WireError)


def test_a_leader_with_a_forged_intersection_gets_no_evaluation_cut(tmp_path, shards_small, monkeypatch):
    """Issue 42's attack: a leader that made the follower accept ids it does not hold (a forged PSI: the follower
    holds every shared id, the leader every other one) and ignores the HELLO's digest mismatch asks for the cut of
    a valid range. It can name only its own ids, so the follower refuses in one line before it computes anything
    and the leader gets no EMBEDDING (before the fix: 300 rows' cut, about half of them of ids the leader does not hold)."""
    # Prepare: the parties' shards disagree; the leader's handshake check is switched off (a malicious leader)
    import leader.welcome

    probe = Session(tmp_path / "probe", shards_small)
    every = np.sort(probe.parties["follower0"].shard.all_ids())
    (tmp_path / "run").mkdir()
    s = Session(tmp_path / "run", shards_small, holds={"leader": every[::2]}, train={"eval_batch_size": 300})
    monkeypatch.setattr(leader.welcome, "hello_problems", lambda *args: [])
    # Execute / Assert: the follower's refusal reaches the leader as its ABORT
    with pytest.raises(PeerAbort, match=r"EVAL valid 0\.\.300: the leader's id digest \w+ does not name this party"):
        with s:
            s.leader.prepare()
            s.leader.evaluate("valid")
    assert isinstance(s.error, WireError) and "\n" not in str(s.error)
    assert len(s.sent("leader", Eval)) == 1 and eval_cuts(s) == []


def test_an_eval_naming_the_whole_split_by_the_followers_hello_digest_gets_no_cut(tmp_path, shards_small):
    """HELLO tells the leader SHA-256 of the follower's valid ids in ascending order; a leader that knows none of
    them cannot pass its first 32 hex digits off as the digest of the range of every row (one EVAL covers the split)."""
    # Prepare: the leader replaces each EVAL's digest with the one the follower's HELLO announced for the split
    from vfl.wire.messages import Hello

    s = Session(tmp_path, shards_small, train={"eval_batch_size": 65536})
    post = s.leader_ch.post

    def echo(peer: str, message: WireMessage) -> None:
        if isinstance(message, Eval):
            (hello,) = s.sent("follower0", Hello)
            message = dataclasses.replace(message, digest=hello.id_digest[message.split][:32])
        post(peer, message)

    s.leader_ch.post = echo
    # Execute / Assert
    with pytest.raises(PeerAbort, match=r"EVAL valid 0\.\.\d+: the leader's id digest \w+ does not name this party"):
        with s:
            s.leader.prepare()
            s.leader.evaluate("valid")
    (ev,) = s.sent("leader", Eval)
    assert (ev.start, ev.stop) == (0, len(s.parties["follower0"].valid_split)) and eval_cuts(s) == []


def test_a_stage_one_eval_of_train_rows_naming_other_ids_gets_no_cut(tmp_path, shards_k10):
    """LP-2ST's stage one asks for the cut of every training row (EVAL of phase prior): a request whose digest
    names the range's ids in another order (each rotated one slot, as issue 42's forging leader rotated its PSI
    answers) is refused like any EVAL, after the stage-one training and before any cut."""
    # Prepare: the leader's stage-one EVALs name their rows' ids rotated by one
    s = Session(
        tmp_path,
        shards_k10,
        train={"batch_size": 1024},
        leader_train={"task": "multiclass"},
        model={"bottom": {"embedding_dim": 4, "hidden": [16], "cut_dim": 4}},
        privacy={
            "label_dp": {"eps": 1.0, "mechanism": "rr_prior", "prior_epochs": 1, "store_dir": str(tmp_path / "store")}
        },  # a store of its own: a prior kept by another test's release would be reused, and no stage one run
    )
    ids = s.parties["leader"].train_split.ids
    post = s.leader_ch.post

    def shifted(peer: str, message: WireMessage) -> None:
        if isinstance(message, Eval):
            a, b = message.start, message.stop
            digests = s.leader.session.digests["follower0"]  # the session's own key: only the ids are wrong
            message = dataclasses.replace(message, digest=digests.range("train", a, b, np.roll(ids[a:b], 1)))
        post(peer, message)

    s.leader_ch.post = shifted
    # Execute / Assert
    with pytest.raises(PeerAbort, match=r"EVAL train 0\.\.\d+: the leader's id digest \w+ does not name this party"):
        with s:
            s.leader.prepare()
    assert s.sent("leader", Forward) and all(f.phase == "prior" for f in s.sent("leader", Forward))
    assert len(s.sent("leader", Eval)) == 1 and eval_cuts(s) == []
