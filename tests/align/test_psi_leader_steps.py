"""A malicious leader against an honest follower: the follower takes the PSI steps in the protocol's exact order, each
chunk once, and refuses repeated double-masked values, so the leader cannot make it accept an id it does not hold
(the replayed double of hostile review 33's r1, the copied double of r1c) nor tell its padding from its ids (r4)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi.ecdh import SUITE, as_wire, from_wire, hash_ids, new_exponent, raise_to, random_points
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.protocol import PSIError
from vfl.wire.psi_messages import Psi

F = "follower0"
_U = np.random.default_rng(2).choice(2**62, size=200, replace=False).astype(np.int64)
Y, X = _U[:50], _U[25:65]  # the follower's and the leader's ids: 25 shared


def _leader_script(leader, deviation: str) -> None:
    """The leader's side played by hand: honest up to `deviation`, which it then commits."""
    n = leader.expect(F, Psi, what="hello").n
    leader.post(F, Psi.hello(SUITE, X.size))
    a = new_exponent()
    if deviation == "double_first":
        leader.post(F, Psi.chunk("double", 0, n, as_wire(random_points(n))))
        return
    leader.post(F, Psi.chunk("mask", 0, n))
    y_ab = raise_to(from_wire(leader.expect(F, Psi, what="mask").payload), a)
    if deviation == "mask_twice":  # r4: real slots come back equal, padding fresh
        leader.post(F, Psi.chunk("mask", 0, n))
        return
    doubles = y_ab.copy()
    if deviation == "copied_double":  # r1c: slot 0's value on every slot
        doubles[:] = y_ab[0]
    leader.post(F, Psi.chunk("double", 0, n, as_wire(doubles)))
    if deviation == "copied_double":
        return
    sent = raise_to(hash_ids(X), a) if deviation != "forged_double" else random_points(X.size)
    leader.post(
        F,
        Psi.chunk(
            "leader", 0, X.size - (deviation == "short_leader"), as_wire(sent[: X.size - (deviation == "short_leader")])
        ),
    )
    if deviation == "short_leader":
        return
    x_ab = from_wire(leader.expect(F, Psi, what="leader").payload)
    if deviation == "forged_double":  # r1: a second double naming the follower's R^b as slots 0..2's values
        forged = y_ab.copy()
        forged[:3] = x_ab[:3]
        leader.post(F, Psi.chunk("double", 0, n, as_wire(forged)))
    if deviation == "leader_twice":
        leader.post(F, Psi.chunk("leader", 0, X.size, as_wire(sent)))
    if deviation != "no_ticket":
        leader.post(F, Psi.ticket(np.zeros((1, 4), "<i8")))
    mine = {bytes(v): i for i, v in enumerate(x_ab)}
    pos = np.array([i for i in range(n) if bytes(y_ab[i]) in mine], np.int64)
    if deviation == "forged_double":
        pos = np.arange(3, dtype=np.int64)
    leader.post(F, Psi.result(0, pos.size, pos.size, pos))
    leader.post(F, Psi.done(pos.size))


def _run(tmp_path, deviation):
    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower(F)
    t, box = _in_thread(follower_psi, ch, Y)
    try:
        _leader_script(leader, deviation)
        t.join(30)
    finally:
        ch.close()
        leader.close()
    return box


def test_an_honest_scripted_leader_gets_the_intersection(tmp_path):
    # Execute: the script with no deviation (the power check of the refusals below)
    box = _run(tmp_path, "none")
    # Assert
    assert "error" not in box, box.get("error")
    np.testing.assert_array_equal(box["value"][0], np.intersect1d(X, Y))


@pytest.mark.parametrize(
    "deviation, needle",
    [
        ("forged_double", "PSI double from the leader out of order: expected PSI ticket"),
        ("copied_double", "the leader's PSI double values holds repeated points"),
        ("mask_twice", "PSI mask from the leader out of order: expected PSI double 0..50"),
        ("double_first", "PSI double from the leader out of order: expected PSI mask 0..50"),
        ("leader_twice", "PSI leader from the leader out of order: expected PSI ticket"),
        ("short_leader", "range 0..39 is not the requested 0..40"),
        ("no_ticket", "PSI result from the leader out of order: expected PSI ticket"),
    ],
)
def test_follower_refuses_a_leader_step_out_of_order_or_a_repeated_double_in_one_line(tmp_path, deviation, needle):
    # Prepare / Execute: the leader deviates from the protocol at one step
    box = _run(tmp_path, deviation)
    # Assert: the follower accepts nothing and says why in one line
    err = box.get("error")
    assert "value" not in box, f"the follower accepted {box['value'][0].size} ids"
    assert isinstance(err, PSIError) and needle in str(err) and "\n" not in str(err), err


def test_a_leader_that_only_sends_wait_is_refused_after_the_follower_s_wait_limit(tmp_path, monkeypatch):
    # Prepare: a 1 s wait limit (1 h + 1 ms per leader id in a run) and a 1 s channel deadline
    import time

    from vfl.align.psi import protocol
    from vfl.wire.messages import Wait

    monkeypatch.setattr(protocol, "WAIT_BASE_S", 1.0, raising=False)
    monkeypatch.setattr(protocol, "WAIT_PER_LEADER_ID_S", 0.0, raising=False)
    leader, follower = _channels(tmp_path, timeout=1.0)
    ch = follower(F)
    t, box = _in_thread(follower_psi, ch, Y)
    # Execute: the leader answers the hello with a WAIT every 0.25 s, each renewing the channel's deadline (r5)
    try:
        leader.expect(F, Psi, what="hello")
        t0 = time.monotonic()
        while t.is_alive() and time.monotonic() - t0 < 8:
            leader.post(F, Wait())
            time.sleep(0.25)
        waited = time.monotonic() - t0
        t.join(5)
    finally:
        ch.close()
        leader.close()
    # Assert: refused in one line after about the limit, not held for as long as WAITs come
    err = box.get("error")
    assert isinstance(err, PSIError) and "has sent only WAIT for" in str(err) and "\n" not in str(err), err
    assert waited < 4


def test_a_leader_declaring_more_ids_than_the_follower_s_limit_is_refused_before_any_allocation(tmp_path):
    # Prepare
    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower(F)
    t, box = _in_thread(lambda: follower_psi(ch, Y, max_peer_ids=1000))
    # Execute: the leader declares 1001 ids (r8: up to 2**27, 4 GiB for the follower to allocate)
    try:
        leader.expect(F, Psi, what="hello")
        leader.post(F, Psi.hello(SUITE, 1001))
        t.join(30)
    finally:
        ch.close()
        leader.close()
    # Assert
    err = box.get("error")
    assert isinstance(err, PSIError), err
    assert str(err) == "the leader declares 1001 ids, above this follower's limit of 1000 (data.psi_max_peer_ids)"
