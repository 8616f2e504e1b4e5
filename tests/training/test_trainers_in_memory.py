"""The leader's and the follower's trainers, built directly and joined by an in-memory channel pair: no process, no
socket. Every message still goes through to_wire, frames.encode, frames.decode and parse, so what the trainers
exchange is exactly what the wire carries; the follower runs in a thread, as its process would. Here: a step, an
evaluation, LP-2ST's stage one through the follower, and a follower's own lr that releases nothing new."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support.trainer_session import Session, changed, parameters_of, record_gradients
from vfl.wire.messages import Embedding, Eval, Forward, Gradient, Prior


def test_one_training_step_returns_exactly_the_leaders_gradient_and_the_centralized_loss(tmp_path, shards_small):
    """Handshake and one synchronous step (one batch holds every training row): the follower's bottom receives
    bit for bit the gradient the leader posted, which equals d loss / d cut of the centralized step on the same
    batch, and the loss equals the centralized loss; every optimizer stepped once."""
    # Prepare: one epoch of one batch (batch_size above the training rows), evaluation every step
    from vfl.data.shards import batch_order
    from vfl.labeldp.release import leader_training_labels
    from vfl.training.top import TopTrainer

    s = Session(tmp_path, shards_small, train={"batch_size": 16000})
    received = record_gradients(s.parties["follower0"])
    before = {n: parameters_of(p.model) for n, p in s.parties.items()}
    # the centralized step on the same batch, from the same seeded initialisation
    ref = {n: s.bottom(n) for n in s.cfgs}
    tr = s.cfgs["leader"].train
    n_train = len(ref["leader"].train_split)
    rows = batch_order(n_train, tr.batch_size, tr.seed, 0)[0]
    labels = torch.from_numpy(leader_training_labels(None, ref["leader"].shard, None).labels)
    top = TopTrainer(tr, s.cfgs["leader"].model.top, sum(p.cut_dim for p in ref.values()), torch.device("cpu"))
    cuts = [ref["leader"].forward_train(rows), ref["follower0"].forward_train(rows)]
    cuts[1].retain_grad()
    want_loss = top.loss(cuts, labels[rows])
    want_loss.backward()
    # Execute
    with s:
        s.leader.prepare()
        top_before = parameters_of(s.leader.top.model)
        s.leader.train()
        s.leader.finish(0, s.leader.loop.global_step)
    # Assert: one FORWARD of every row, one GRADIENT back, applied unchanged
    (forward,), (gradient,) = s.sent("leader", Forward), s.sent("leader", Gradient)
    assert (forward.epoch, forward.step, forward.rows, forward.phase) == (0, 0, n_train, None)
    assert (gradient.step, gradient.micro, gradient.phase) == (0, 0, None)
    assert len(received) == 1 and torch.equal(received[0], torch.from_numpy(gradient.grad))
    assert gradient.grad.shape == (n_train, s.cfgs["follower0"].model.bottom.cut_dim)
    # the split step is the centralized step: the same loss (the leader's alone) and the same gradient at the cut
    (loss,) = s.leader.loop.step_losses
    assert np.isfinite(loss) and loss == pytest.approx(float(want_loss.detach()), rel=1e-6, abs=1e-7)
    torch.testing.assert_close(received[0], cuts[1].grad, rtol=1e-5, atol=1e-8)
    # every optimizer stepped: both bottoms and the top moved, the follower counted its step
    assert all(changed(before[n], p.model) for n, p in s.parties.items()) and changed(top_before, s.leader.top.model)
    assert s.follower.steps == 1 and "epoch 0 step 1/1 gradient applied" in (tmp_path / "follower0.log").read_text()


def test_one_evaluation_is_answered_with_the_cut_of_the_requested_rows(tmp_path, shards_small):
    """EVAL of the valid split is answered by one EMBEDDING of that very range; the leader scores every row."""
    # Prepare
    s = Session(tmp_path, shards_small, train={"batch_size": 512, "eval_batch_size": 700})
    # Execute
    with s:
        s.leader.prepare()
        probs = s.leader.evaluate("valid")
        s.leader.finish(0, 0)
    # Assert: the valid split in batches of 700 rows, each request answered with its own range
    n = len(s.parties["leader"].valid_split)
    evals, cuts = s.sent("leader", Eval), s.sent("follower0", Embedding)
    assert [(e.split, e.start, e.stop) for e in evals] == [("valid", a, min(a + 700, n)) for a in range(0, n, 700)]
    assert [c.eval for c in cuts] == [(e.split, e.start, e.stop) for e in evals]
    assert all(c.cut.shape == (e.stop - e.start, 2) and c.cut.dtype == np.float32 for c, e in zip(cuts, evals))
    assert probs.shape == (n,) and np.all((probs >= 0) & (probs <= 1))
    assert s.follower.steps == 0 and not s.sent("leader", Forward)


def test_the_all_party_prior_of_lp_2st_runs_its_stage_one_through_the_follower(tmp_path, shards_k10):
    """K classes under rr_prior: prepare() sends PRIOR with the stage-one rows, then trains the prior over both
    parties with FORWARD / GRADIENT / EVAL of phase prior, which the follower answers with its stage-one bottom."""
    # Prepare
    s = Session(
        tmp_path,
        shards_k10,
        train={"batch_size": 1024},
        leader_train={"task": "multiclass"},
        model={"bottom": {"embedding_dim": 4, "hidden": [16], "cut_dim": 4}},
        privacy={"label_dp": {"eps": 1.0, "mechanism": "rr_prior", "prior_epochs": 1}},
    )
    main_bottom = parameters_of(s.parties["follower0"].model)
    # Execute
    with s:
        s.leader.prepare()
        s.leader.finish(0, 0)
    # Assert: one PRIOR of strictly increasing training rows, about prior_fraction of them
    (prior,) = s.sent("leader", Prior)
    n_train = len(s.parties["leader"].train_split)
    assert prior.epochs == 1 and 0.4 < prior.rows / n_train < 0.6 and np.all(np.diff(prior.indices) > 0)
    # stage one: one epoch of FORWARD / GRADIENT pairs over the prior rows, every message of phase prior
    forwards, grads = s.sent("leader", Forward), s.sent("leader", Gradient)
    assert forwards and len(forwards) == len(grads) == -(-prior.rows // 1024)
    assert all(m.phase == "prior" and m.micro is None for m in grads) and all(m.phase == "prior" for m in forwards)
    assert sum(f.rows for f in forwards) == prior.rows
    assert all(g.grad.shape == (f.rows, 4) for f, g in zip(forwards, grads))
    # then it scores the training rows (the prior's predictions), each EVAL of phase prior answered with its range
    evals = [e for e in s.sent("leader", Eval) if e.phase == "prior"]
    assert evals and all(e.split == "train" for e in evals) and evals[-1].stop == n_train
    cuts = [c for c in s.sent("follower0", Embedding) if c.eval is not None]
    assert [c.eval for c in cuts] == [(e.split, e.start, e.stop) for e in evals]
    # the main bottom is untouched (stage one trains its own), and the labels were drawn with the prior
    assert not changed(main_bottom, s.parties["follower0"].model)
    assert s.leader.labels.report["mechanism"] == "rr_prior" and s.leader.labels.report["prior"].startswith(
        "all parties"
    )


def test_a_follower_changing_only_its_own_lr_makes_the_leader_release_nothing_new(tmp_path, shards_k10):
    """The attack: with K classes and rr_prior the all-party prior depends on the followers' bottoms, and the
    stage-two release was named by the prior's digest, so a follower's lr 0.003 -> 0.0031 bought a fresh draw (the
    ledger went 1.0 -> 2.0). Now the stage-two release is named by the leader's config and its first prior is kept:
    the second run replays the first release exactly and trains no prior."""

    def run(where: str, follower_lr: float):
        (tmp_path / where).mkdir()
        s = Session(
            tmp_path / where,
            shards_k10,
            train={"batch_size": 1024, "lr": follower_lr},
            leader_train={"task": "multiclass", "lr": 0.003},
            model={"bottom": {"embedding_dim": 4, "hidden": [16], "cut_dim": 4}},
            privacy={
                "label_dp": {"eps": 1.0, "mechanism": "rr_prior", "prior_epochs": 1, "store_dir": str(tmp_path / "s")}
            },
        )
        with s:
            s.leader.prepare()
            s.leader.finish(0, 0)
        return s

    # Prepare
    first = run("a", 0.003)
    # Execute
    second = run("b", 0.0031)
    # Assert
    a, b = first.leader.labels, second.leader.labels
    assert b.release == a.release and b.report["new_release"] is False
    assert b.report["dataset_total_eps"] == 1.0 and b.report["prior_reused"] is True
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.valid, b.valid)
    assert len(first.sent("leader", Prior)) == 1 and second.sent("leader", Prior) == []
