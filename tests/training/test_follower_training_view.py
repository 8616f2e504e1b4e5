"""What a follower receives of a training run, in memory (tests/support/trainer_session.py): without label DP nothing but
the gradients varies with the labels (synchronous, micro-batched, stale), and every id digest on the wire is keyed by
the session."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.trainer_session import Session
from vfl.wire.link_messages import LinkReport
from vfl.wire.messages import Eval, Forward, Gradient, Wait

LINK_TIMING = ("rtt_ms", "down_mbit", "up_mbit")  # LINK_REPORT fields of the leader's clock


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
