"""The leader's and the follower's trainers, built directly and joined by an in-memory channel pair: no process, no
socket. Every message still goes through to_wire, frames.encode, frames.decode and parse, so what the trainers
exchange is exactly what the wire carries; the follower runs in a thread, as its process would."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import torch

from tests.support.memory_channels import TIMEOUT_S, MemoryFollowerChannel, MemoryLeaderChannel, _Queues
from tests.support.party_processes import party_configs
from vfl.wire import PeerAbort, WireError
from vfl.wire.link_messages import LinkReport
from vfl.wire.messages import Abort, Embedding, Eval, Forward, Gradient, Prior, Wait, WireMessage

LINK_TIMING = ("rtt_ms", "down_mbit", "up_mbit")  # LINK_REPORT fields of the leader's clock


class Session:
    """A leader and one follower trainer on restricted shards of `shards`, the follower in a thread. `holds` maps
    a party to the ids its shard is restricted to instead (a forged intersection: parties that disagree)."""

    def __init__(self, tmp_path, shards, holds: dict[str, np.ndarray] | None = None, **config):
        from follower.trainer import FollowerTrainer
        from leader.trainer import LeaderTrainer
        from vfl.config.schema import load_config
        from vfl.obs.metrics import RunLog

        paths = party_configs(str(tmp_path), str(shards), **config)
        self.cfgs = {name: load_config(path) for name, path in paths.items()}
        self.parties = {name: self.bottom(name, (holds or {}).get(name)) for name in self.cfgs}
        queues = _Queues(("follower0",))
        self.posted = queues.posted
        self.leader_ch = MemoryLeaderChannel("leader", queues)
        self.follower_ch = MemoryFollowerChannel("follower0", queues)
        out = str(tmp_path / "out")
        self.leader = LeaderTrainer(
            self.cfgs["leader"],
            self.leader_ch,
            self.parties["leader"],
            RunLog(str(tmp_path / "leader.log"), "leader"),
            out,
        )
        self.follower = FollowerTrainer(
            self.cfgs["follower0"],
            self.follower_ch,
            self.parties["follower0"],
            RunLog(str(tmp_path / "follower0.log"), "follower0"),
            out,
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._follow, name="follower0", daemon=True)

    def bottom(self, name: str, keep: np.ndarray | None = None):
        """A fresh bottom of party `name` on its shard restricted to the ids every party holds (as after PSI), or to
        `keep`."""
        from vfl.data.shards import PartyShard
        from vfl.training.party import BottomParty

        shards = {n: PartyShard(c.data.path) for n, c in self.cfgs.items()}
        common = np.intersect1d(*[s.all_ids() for s in shards.values()])
        shards[name].restrict(common if keep is None else keep)
        return BottomParty(self.cfgs[name], shards[name], torch.device("cpu"))

    def _follow(self) -> None:
        try:
            self.follower.handshake()
            self.follower.run()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self.error = e
            if not isinstance(e, PeerAbort):  # as follower/__main__.py: the leader is told why
                self.follower_ch.post(Abort(f"follower0: {e}"))

    def __enter__(self) -> Session:
        self.thread.start()
        self.leader.handshake()
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:  # the leader failed: the follower is told, as leader/__main__.py tells it
            self.leader_ch.abort_all(f"test failed: {exc[1]}")
        self.thread.join(TIMEOUT_S + 5)
        assert not self.thread.is_alive(), "the follower thread did not end"
        if exc[0] is None and self.error is not None:
            raise self.error

    def sent(self, sender: str, cls: type[WireMessage]) -> list:
        """The messages of class `cls` that `sender` posted, in order."""
        return [m for s, _, m in self.posted if s == sender and isinstance(m, cls)]


def _record_gradients(party) -> list[torch.Tensor]:
    """Every gradient that reaches this bottom's backward pass, in order."""
    got: list[torch.Tensor] = []
    accumulate = party.accumulate_gradient

    def record(grad: torch.Tensor, part: int = 0) -> None:
        got.append(grad.detach().clone())
        accumulate(grad, part)

    party.accumulate_gradient = record
    return got


def _parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _changed(before: list[torch.Tensor], model: torch.nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_one_training_step_returns_exactly_the_leaders_gradient_and_the_centralized_loss(tmp_path, shards_small):
    """Handshake and one synchronous step (one batch holds every training row): the follower's bottom receives
    bit for bit the gradient the leader posted, which equals d loss / d cut of the centralized step on the same
    batch, and the loss equals the centralized loss; every optimizer stepped once."""
    # Prepare: one epoch of one batch (batch_size above the training rows), evaluation every step
    from vfl.data.shards import batch_order
    from vfl.labeldp.release import leader_training_labels
    from vfl.training.top import TopTrainer

    s = Session(tmp_path, shards_small, train={"batch_size": 16000})
    received = _record_gradients(s.parties["follower0"])
    before = {n: _parameters(p.model) for n, p in s.parties.items()}
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
        top_before = _parameters(s.leader.top.model)
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
    assert all(_changed(before[n], p.model) for n, p in s.parties.items()) and _changed(top_before, s.leader.top.model)
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
    main_bottom = _parameters(s.parties["follower0"].model)
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
    assert not _changed(main_bottom, s.parties["follower0"].model)
    assert s.leader.labels.report["mechanism"] == "rr_prior" and s.leader.labels.report["prior"].startswith(
        "all parties"
    )


def _tamper(channel, cls: type[WireMessage], **change) -> None:
    """Make `channel` post every message of class `cls` with the fields in `change` replaced (a malicious peer)."""
    post = channel.post

    def tampered(*args) -> None:
        *peer, message = args
        post(*peer, dataclasses.replace(message, **change) if isinstance(message, cls) else message)

    channel.post = tampered


def test_a_follower_answering_another_epoch_is_refused_by_the_leader(tmp_path, shards_small):
    """The leader checks every training EMBEDDING against the (epoch, step) it asked for, not the step alone."""
    # Prepare: a follower whose cuts claim epoch 1 while the leader trains epoch 0
    s = Session(tmp_path, shards_small, train={"batch_size": 16000})
    _tamper(s.follower_ch, Embedding, epoch=1)
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
    _tamper(s.leader_ch, Gradient, **change)
    # Execute / Assert: the follower refuses and tells the leader, which stops with its reason
    with pytest.raises(PeerAbort, match="GRADIENT: expected epoch 0 step 0 phase None, " + needle):
        with s:
            s.leader.prepare()
            s.leader.train()
            s.leader.finish(0, s.leader.loop.global_step)
    assert isinstance(s.error, WireError)


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


def _eval_cuts(s: Session) -> list:
    """The EMBEDDINGs of EVAL ranges that the follower posted."""
    return [c for c in s.sent("follower0", Embedding) if c.eval is not None]


def test_a_leader_with_a_forged_intersection_gets_no_evaluation_cut(tmp_path, shards_small, monkeypatch):
    """Issue 42's attack: a leader that made the follower accept ids it does not hold (a forged PSI: the follower
    holds every shared id, the leader every other one) and ignores the HELLO's digest mismatch asks for the cut of
    a valid range. It can name only its own ids, so the follower refuses in one line before it computes anything
    and the leader gets no EMBEDDING (before the fix: 300 rows' cut, about half of them of ids the leader does not hold)."""
    # Prepare: the parties' shards disagree; the leader's handshake check is switched off (a malicious leader)
    import leader.trainer

    probe = Session(tmp_path / "probe", shards_small)
    every = np.sort(probe.parties["follower0"].shard.all_ids())
    (tmp_path / "run").mkdir()
    s = Session(tmp_path / "run", shards_small, holds={"leader": every[::2]}, train={"eval_batch_size": 300})
    monkeypatch.setattr(leader.trainer, "hello_problems", lambda *args: [])
    # Execute / Assert: the follower's refusal reaches the leader as its ABORT
    with pytest.raises(PeerAbort, match=r"EVAL valid 0\.\.300: the leader's id digest \w+ does not name this party"):
        with s:
            s.leader.prepare()
            s.leader.evaluate("valid")
    assert isinstance(s.error, WireError) and "\n" not in str(s.error)
    assert len(s.sent("leader", Eval)) == 1 and _eval_cuts(s) == []


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
    assert (ev.start, ev.stop) == (0, len(s.parties["follower0"].valid_split)) and _eval_cuts(s) == []


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
    assert len(s.sent("leader", Eval)) == 1 and _eval_cuts(s) == []


def _fixed_nonces(monkeypatch) -> None:
    """Every nonce of the handshake from a counter restarted now (the follower's HELLO nonce, then the leader's): two
    sessions then share their run id and digest keys, so any header field that differs between them differs for
    another reason than the session's fresh entropy."""
    import itertools
    from types import SimpleNamespace

    counter = itertools.count(1)
    fixed = SimpleNamespace(token_hex=lambda n: f"{next(counter):0{2 * n}x}")
    monkeypatch.setattr("vfl.session.handshake.secrets", fixed)
    monkeypatch.setattr("vfl.session.link_probe.secrets", fixed)  # the link probes' nonces


def _follower_transcript(tmp_path, shards, monkeypatch, train: dict, permute: bool) -> tuple[list, list, list]:
    """One training run without label DP (2 epochs, an evaluation after each, a checkpoint every 4 steps), its
    training and validation labels permuted by a fixed permutation after the leader drew them when `permute`.
    Returns every message the follower received as (type, header meta, tensor dtypes and shapes), WAIT left out
    (a keepalive of the leader's timing, without fields) and LINK_REPORT's timings too (the round trip and bandwidth
    timed at the greeting: the leader's clock, read before any label); the gradient tensors in order; the leader's step losses."""
    _fixed_nonces(monkeypatch)
    s = Session(tmp_path, shards, train={"epochs": 2, "batch_size": 1024, "checkpoint_every": 4, **train})
    with s:
        s.leader.prepare()
        if permute:
            labels, valid = s.leader.labels.labels, s.leader.loop.valid_labels
            s.leader.labels.labels = np.ascontiguousarray(labels[np.random.default_rng(7).permutation(labels.size)])
            s.leader.loop.valid_labels = valid[np.random.default_rng(8).permutation(valid.size)]
        s.leader.train()
        s.leader.finish(1, s.leader.loop.global_step)
    received = [m for _, to, m in s.posted if to == "follower0" and not isinstance(m, Wait)]
    headers = []
    for m in received:
        meta, tensors = m.to_wire()
        if isinstance(m, LinkReport):  # the link's timing, measured at the greeting before any label is read
            meta = {k: v for k, v in meta.items() if k not in LINK_TIMING}
        headers.append((m.TYPE, meta, [(str(t.dtype), t.shape) for t in tensors]))
    grads = [m.grad for m in received if isinstance(m, Gradient)]
    return headers, grads, list(s.leader.loop.step_losses)


def _differing_fields(a: list, b: list) -> list[str]:
    """Where two follower transcripts' headers differ: 'TYPE.field' per differing meta field (or a type, a tensor's
    dtype and shape, or the count of messages)."""
    if len(a) != len(b):
        return [f"message count {len(a)} vs {len(b)}"]
    out = []
    for (ta, ma, sa), (tb, mb, sb) in zip(a, b):
        if ta != tb:
            out.append(f"type {ta} vs {tb}")
            continue
        out += [f"{ta}.{k}" for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)]
        if sa != sb:
            out.append(f"{ta} tensors")
    return sorted(set(out))


@pytest.mark.parametrize(
    "train", [{}, {"microbatches": 2}, {"staleness": 1}], ids=["synchronous", "microbatches", "staleness"]
)
def test_without_label_dp_nothing_but_the_gradients_the_follower_receives_varies_with_the_labels(
    tmp_path, shards_small, monkeypatch, train
):
    """The follower's transcript holds no function of the true labels beyond the gradients themselves, without label
    DP too: two runs whose only difference is a permutation of the leader's training and validation labels (the same
    seed, shards and nonces) send the follower message for message the same header fields: types, epochs, steps,
    micro-batches, digests, ranges, checkpoint tags, run id; only the gradient tensors differ. (Model selection is off:
    with train.early_stopping, SNAPSHOT and RESTORE name the best step, which without label DP is chosen on the true
    validation labels; docs/security.md.) Power: the gradients and the leader's step losses do differ between the two
    runs, so a GRADIENT carrying the batch loss, as protocol 5's did, is caught by this very comparison."""
    # Prepare / Execute: the same run twice, the second on permuted labels
    a, grads_a, losses_a = _follower_transcript(tmp_path / "a", shards_small, monkeypatch, train, permute=False)
    b, grads_b, losses_b = _follower_transcript(tmp_path / "b", shards_small, monkeypatch, train, permute=True)
    # Assert: every header field is identical, the gradients are not
    assert _differing_fields(a, b) == []
    assert {t for t, _, _ in a} >= {
        "LINK_PROBE",
        "LINK_REPORT",
        "WELCOME",
        "FORWARD",
        "GRADIENT",
        "EVAL",
        "SAVE",
        "DONE",
    }
    assert len(grads_a) == len(grads_b) and any(not np.array_equal(x, y) for x, y in zip(grads_a, grads_b))
    # the power: protocol 5's GRADIENT carried the batch loss; planted in one GRADIENT a step, it is found
    assert losses_a != losses_b

    def with_loss(transcript: list, losses: list[float]) -> list:
        last = [i for i, (t, m, _) in enumerate(transcript) if t == "GRADIENT" and m.get("micro", 0) == 0]
        planted = list(transcript)
        for i, loss in zip(last, losses):
            planted[i] = (planted[i][0], {**planted[i][1], "loss": loss}, planted[i][2])
        return planted

    assert _differing_fields(with_loss(a, losses_a), with_loss(b, losses_b)) == ["GRADIENT.loss"]


def test_every_id_digest_on_the_wire_is_keyed_by_the_session(tmp_path, shards_small):
    """HELLO's split digests are keyed by the follower's nonce, FORWARD's and EVAL's by (run id, that nonce): each
    equals the keyed digest of the rows' ids and none is the unkeyed SHA-256 of them that protocol 5 sent (which a
    party could have tabulated before the session)."""
    # Prepare
    import hashlib

    from vfl.session.cut_digest import SessionDigests, hello_digests
    from vfl.wire.messages import Hello, Welcome

    def unkeyed(ids) -> str:
        return hashlib.sha256(np.ascontiguousarray(ids, "<i8").tobytes()).hexdigest()

    s = Session(tmp_path, shards_small, train={"batch_size": 4096})
    party = s.parties["follower0"]
    # Execute
    with s:
        s.leader.prepare()
        s.leader.train()
        s.leader.finish(0, s.leader.loop.global_step)
    (hello,), (welcome,) = s.sent("follower0", Hello), s.sent("leader", Welcome)
    forwards, evals = s.sent("leader", Forward), s.sent("leader", Eval)
    keyed = SessionDigests(welcome.run, hello.nonce)
    # Assert
    splits = {n: party.shard.split(n).ids for n in ("train", "valid", "test")}
    assert hello.id_digest == hello_digests(hello.nonce, splits)
    assert all(
        hello.id_digest[n] != unkeyed(ids)[:32] and hello.id_digest[n] != unkeyed(ids) for n, ids in splits.items()
    )
    order = {f.step: party.train_split.ids[s.follower._rows(0, f.step)] for f in forwards}
    assert forwards and all(f.digest == keyed.batch(order[f.step]) != unkeyed(order[f.step])[:32] for f in forwards)
    rows = {"valid": party.valid_split.ids, "test": party.test_split.ids}
    assert evals and all(
        e.digest == keyed.range(e.split, e.start, e.stop, rows[e.split][e.start : e.stop]) for e in evals
    )
