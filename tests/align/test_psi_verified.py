"""Verified PSI (data.psi_verify): a party that asks gets the other's key in advance and a batched DLEQ proof
(vfl/align/psi/dleq.py, RFC 9497 Sec. 2.2) with every chunk that the other raised to its exponent, and refuses a
chunk whose proof fails, in one line naming it.

The attacks are the red team's, over CurveZMQ on 127.0.0.1: a leader that rotates its doubles by one slot, or raises
some of them, taken from a neighbouring slot, to a second exponent and sends its ids under that exponent too, makes
an unverified follower accept ids the leader does not hold (the power checks below show that the attack works); a
verifying follower refuses both. In the other direction, a follower that answers the leader's rows with copies of its
own doubles makes an unverified leader match rows that are not shared; a verifying leader refuses it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi import dleq, follower_side, protocol
from vfl.align.psi.ecdh import SUITE, as_wire, from_wire, hash_ids, mask_ids, new_exponent, raise_to
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.leader_side import leader_psi
from vfl.align.psi.protocol import PSIError
from vfl.wire.psi_messages import Psi

F = "follower0"
_U = np.random.default_rng(3).choice(2**62, size=200, replace=False).astype(np.int64)
Y, X = _U[:50], _U[25:65]  # the follower's and the leader's ids: 25 shared


def _forging_leader(leader, attack: str) -> None:
    """The leader's side played by hand, forging its doubles (`attack`) and proving them as well as it can: its own
    ComputeCompositesFast (Z = a M) with the key it committed to, the one proof a cheating prover can compute."""
    hello = leader.expect(F, Psi, what="hello")
    n = hello.n
    a, a2 = new_exponent(), new_exponent()
    key = dleq.public_key(a)
    rows = raise_to(hash_ids(X), a)
    if attack == "second_exponent":  # its ids under both exponents, so slot i matches when slot i + 1 is one of them
        rows = np.concatenate([rows, raise_to(hash_ids(X), a2)])
    leader.post(F, Psi.hello(SUITE, rows.shape[0], key=key if hello.verify else None))
    leader.post(F, Psi.chunk("mask", 0, n))
    masks = from_wire(leader.expect(F, Psi, what="mask").payload)
    doubles = raise_to(masks, a)
    if attack == "rotate":  # slot i carries slot i + 1's double
        doubles = np.roll(doubles, -1, axis=0)
    elif attack == "second_exponent":  # even slot i carries slot i + 1's mask raised to a2
        doubles[0:-1:2] = raise_to(masks[1::2], a2)[: doubles[0:-1:2].shape[0]]
    proof = dleq.generate_proof(a, key, masks, doubles) if hello.verify else None
    leader.post(F, Psi.chunk("double", 0, n, as_wire(doubles), proof))
    leader.post(F, Psi.chunk("leader", 0, rows.shape[0], as_wire(rows)))
    x_ab = from_wire(leader.expect(F, Psi, what="leader").payload)
    mine = {bytes(v) for v in x_ab}
    pos = np.array([i for i in range(n) if bytes(doubles[i]) in mine], np.int64)
    leader.post(F, Psi.ticket(np.zeros((1, 4), "<i8")))
    leader.post(F, Psi.result(0, pos.size, pos.size, pos))
    leader.post(F, Psi.done(pos.size))


def _against_forging_leader(tmp_path, attack: str, verify: bool) -> dict:
    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower(F)
    t, box = _in_thread(lambda: follower_psi(ch, Y, verify=verify))
    script, _ = _in_thread(_forging_leader, leader, attack)  # left waiting for a reply when the follower refuses
    try:
        t.join(30)
    finally:
        ch.close()
        leader.close()
    return box


@pytest.mark.parametrize("attack", ["rotate", "second_exponent"])
def test_without_verification_a_forging_leader_makes_the_follower_accept_ids_the_leader_does_not_hold(tmp_path, attack):
    # Execute: the power check of the refusal below (the attack works on today's unverified PSI)
    box = _against_forging_leader(tmp_path, attack, verify=False)
    # Assert
    assert "error" not in box, box.get("error")
    accepted = box["value"][0]
    assert np.setdiff1d(accepted, X).size > 0


@pytest.mark.parametrize("attack", ["rotate", "second_exponent"])
def test_a_verifying_follower_refuses_a_forging_leader_in_one_line_naming_the_chunk(tmp_path, attack):
    # Execute
    box = _against_forging_leader(tmp_path, attack, verify=True)
    # Assert: nothing accepted, one line naming the chunk
    err = box.get("error")
    assert "value" not in box, f"the follower accepted {box['value'][0].size} ids"
    assert isinstance(err, PSIError), err
    assert str(err) == (
        "PSI double 0..50 from the leader: its DLEQ proof does not verify that every value is this follower's "
        "raised to the one exponent of the key the leader committed to; refused"
    )


def test_a_verifying_follower_refuses_a_leader_that_commits_to_no_key(tmp_path):
    # Prepare
    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower(F)
    t, box = _in_thread(lambda: follower_psi(ch, Y, verify=True))
    # Execute: a leader that ignores the request (today's hello)
    try:
        assert leader.expect(F, Psi, what="hello").verify == 1
        leader.post(F, Psi.hello(SUITE, X.size))
        t.join(30)
    finally:
        ch.close()
        leader.close()
    # Assert
    err = box.get("error")
    assert isinstance(err, PSIError) and "commits to no public key" in str(err) and "\n" not in str(err), err


def _copying_follower(ch) -> None:
    """A follower that answers the leader's rows with distinct copies of its own doubles, claiming every row (the
    known gap of protocol.py), and proves its replies with its one exponent's key as well as it can."""
    b = new_exponent()
    key = dleq.public_key(b)
    ch.post(Psi.hello(SUITE, Y.size))
    hello = protocol.receive_step(ch, "hello")
    protocol.receive_step(ch, "mask")
    ch.post(Psi.chunk("mask", 0, Y.size, as_wire(mask_ids(Y, b))))
    y_ab = from_wire(protocol.receive_step(ch, "double").payload)
    x_a = from_wire(protocol.receive_step(ch, "leader").payload)
    replies = y_ab[: x_a.shape[0]].copy()
    proof = dleq.generate_proof(b, key, x_a, replies) if hello.verify else None
    ch.post(Psi.chunk("leader", 0, x_a.shape[0], as_wire(replies), proof, key if hello.verify else None))
    while protocol.receive_step(ch, None).op != "done":
        pass


def _against_copying_follower(tmp_path, verify: bool):
    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower(F)
    t, box = _in_thread(_copying_follower, ch)
    try:
        try:
            return leader_psi(leader, [F], X, verify=verify)
        except PSIError as e:
            return e
    finally:
        t.join(5)
        ch.close()
        leader.close()


def test_without_verification_a_copying_follower_makes_the_leader_match_rows_that_are_not_shared(tmp_path):
    # Execute: the power check (the known gap: every leader row claimed)
    common, report = _against_copying_follower(tmp_path, verify=False)
    # Assert
    assert report.pairwise[F] == X.size > np.intersect1d(X, Y).size


def test_a_verifying_leader_refuses_a_copying_follower_in_one_line_naming_the_chunk(tmp_path):
    # Execute
    got = _against_copying_follower(tmp_path, verify=True)
    # Assert
    assert isinstance(got, PSIError), got
    assert str(got) == (
        "PSI leader reply 0..40 from follower0: its DLEQ proof does not verify that every value is this leader's "
        "raised to the one exponent of the key follower0 committed to; refused"
    )


@pytest.mark.parametrize("leader_verifies, follower_verifies", [(True, True), (False, True), (True, False)])
def test_honest_parties_agree_on_the_intersection_with_proofs_over_several_chunks(
    tmp_path, monkeypatch, leader_verifies, follower_verifies
):
    # Prepare: chunks of 16 points, so each side proves and checks several chunks within the window
    monkeypatch.setattr(protocol, "CHUNK_POINTS", 16)
    leader, follower = _channels(tmp_path)
    ch = follower(F)
    # Execute
    try:
        t, box = _in_thread(lambda: follower_psi(ch, Y, verify=follower_verifies))
        common, report = leader_psi(leader, [F], X, verify=leader_verifies)
        t.join(30)
    finally:
        ch.close()
        leader.close()
    # Assert
    want = np.intersect1d(X, Y)
    assert "error" not in box, box.get("error")
    np.testing.assert_array_equal(common, want)
    np.testing.assert_array_equal(box["value"][0], want)


def test_without_verification_the_psi_messages_carry_no_proof_fields():
    # Prepare / Execute: today's messages, as an unverifying party sends them
    metas = [
        Psi.hello(SUITE, 10).to_wire()[0],
        Psi.chunk("double", 0, 2, as_wire(hash_ids(np.arange(2)))).to_wire()[0],
        Psi.chunk("leader", 0, 2, as_wire(hash_ids(np.arange(2)))).to_wire()[0],
    ]
    # Assert
    assert all(not {"verify", "key", "proof"} & set(m) for m in metas)


def test_a_verifying_party_does_not_reuse_an_agreement_that_an_unverified_psi_wrote(tmp_path):
    # Prepare: an agreement cached by an unverified run
    from vfl.align.psi.reuse import PSICache, new_ticket

    secret, peer_key, ids = bytes(32), bytes(range(32)), np.arange(10, dtype=np.int64)
    PSICache(str(tmp_path), secret, F, "leader", peer_key).store(new_ticket(), ids, ids[:5])
    # Execute
    unverified = PSICache(str(tmp_path), secret, F, "leader", peer_key).load(ids)
    verifying = PSICache(str(tmp_path), secret, F, "leader", peer_key, verified=True)
    # Assert: reused without verification (the power check), refused with it
    assert unverified is not None
    assert verifying.load(ids) is None and "data.psi_verify" in verifying.refused


def test_data_psi_verify_in_both_yamls_runs_a_verified_psi_and_trains_over_real_processes(
    tmp_path, shards_small, procs
):
    # Prepare: this test's own copy of the shards and a pair of configs with data.psi_verify: true in each YAML
    import json
    import os
    import shutil

    import yaml

    from tests.support.party_processes import party_configs

    shards = tmp_path / "shards"
    shutil.copytree(shards_small, shards, ignore=shutil.ignore_patterns("psi_cache"))
    cfgs = party_configs(str(tmp_path), str(shards), train={"epochs": 1, "batch_size": 1024})
    for path in cfgs.values():
        doc = yaml.safe_load(open(path))
        doc["data"]["psi_verify"] = True
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    procs.start(F, "follower", cfgs[F])
    (lcode, lout, lerr), (fcode, fout, ferr) = procs.wait("leader", timeout=300), procs.wait(F, timeout=300)
    # Assert: both sides proved and checked, the run trained, and each cache says it was verified
    assert lcode == 0 and fcode == 0, (lerr[-2000:], ferr[-2000:])
    assert "checking its DLEQ proof of every reply (data.psi_verify) and proving every double" in lout + lerr
    assert "checking its DLEQ proof of every double (data.psi_verify) and proving every reply" in fout + ferr
    metrics = json.loads(open(os.path.join(os.path.dirname(cfgs["leader"]), "out", "metrics.json")).read())
    assert metrics["psi"]["intersection"] > 0 and metrics["psi"]["reused"] == []
    for party in ("leader", F):
        (name,) = os.listdir(shards / party / "psi_cache")
        assert b'"verified": true' in (shards / party / "psi_cache" / name).read_bytes()


@pytest.mark.parametrize("key", ["00" * 32, "ff" * 32])
def test_a_leader_key_that_is_the_identity_or_no_point_is_refused_at_the_hello(key):
    # Prepare: the identity element encodes as 32 zero bytes and is a valid point, but proves nothing
    hello = Psi(op="hello", suite=SUITE, n=1, key=key)
    # Execute / Assert: refused in one line before any double is read
    with pytest.raises(PSIError, match="not a ristretto255 element"):
        follower_side.leader_key(hello)
