"""PSI's chunks stream: the leader keeps up to PSI_WINDOW requests out before a reply returns, so over a long round
trip the PSI takes about bytes / bandwidth plus a few RTTs, not chunks x RTT; and the follower still takes each step
once, in order (masks ahead of their doubles, never a double ahead of its mask)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.support.party_processes import free_port
from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi import protocol
from vfl.align.psi.ecdh import SUITE, as_wire, random_points
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.leader_side import leader_psi
from vfl.align.psi.protocol import PSI_WINDOW, PSIError
from vfl.netlink.relay import LinkSpec, Relay
from vfl.wire.psi_messages import Psi

SMALL_CHUNK = 64  # points a chunk in these tests, so a few thousand ids make dozens of chunks


def _pair(tmp_path, through: Relay | None = None, timeout=20.0, port=None):
    """A leader channel on a free port (or `port`) and follower0's, connected directly or through a relay."""
    leader, follower = _channels(tmp_path, timeout=timeout, through=through, port=port)
    return leader, follower("follower0")


class Recorder:
    """A leader channel that logs ("post" | "recv", PSI op) in order (everything else passes through)."""

    def __init__(self, ch):
        self._ch, self.log = ch, []

    def __getattr__(self, name):
        return getattr(self._ch, name)

    def post(self, peer, message):
        if isinstance(message, Psi):
            self.log.append(("post", message.op))
        self._ch.post(peer, message)

    def expect(self, peer, *classes, what=None):
        msg = self._ch.expect(peer, *classes, what=what)
        if isinstance(msg, Psi):
            self.log.append(("recv", msg.op))
        return msg


def _sets(seed=4, n=1500):
    rng = np.random.default_rng(seed)
    universe = rng.choice(2**62, size=2 * n, replace=False).astype(np.int64)
    return universe[:n], universe[n // 2 : n + n // 2]  # leader's, follower's: n / 2 shared


def test_the_leader_keeps_a_window_of_chunks_in_flight_in_both_phases(tmp_path, monkeypatch):
    # Prepare: 1500 ids a side in chunks of 64 (24 chunks each)
    monkeypatch.setattr(protocol, "CHUNK_POINTS", SMALL_CHUNK)
    lead, mine = _sets()
    leader, follower = _pair(tmp_path)
    rec = Recorder(leader)
    t, box = _in_thread(follower_psi, follower, mine)
    try:
        # Execute
        common, _ = leader_psi(rec, ["follower0"], lead)
        t.join(60)
    finally:
        follower.close()
        leader.close()
    # Assert: the right intersection, and PSI_WINDOW requests out before the first reply in each phase
    assert "error" not in box, box.get("error")
    np.testing.assert_array_equal(common, np.intersect1d(lead, mine))
    np.testing.assert_array_equal(box["value"][0], common)
    log = rec.log[2:]  # after the hellos
    first_mask_reply = log.index(("recv", "mask"))
    assert log[:first_mask_reply] == [("post", "mask")] * PSI_WINDOW
    start = log.index(("post", "leader"))
    first_leader_reply = log.index(("recv", "leader"))
    assert log[start:first_leader_reply] == [("post", "leader")] * PSI_WINDOW
    assert max(_in_flight(log, "mask")) == PSI_WINDOW and max(_in_flight(log, "leader")) == PSI_WINDOW


def _in_flight(log, op):
    """Requests of `op` posted and not yet answered, after each event of the log."""
    out, n = [], 0
    for kind, o in log:
        if o == op:
            n += 1 if kind == "post" else -1
            out.append(n)
    return out


def test_a_psi_over_a_long_round_trip_takes_far_fewer_than_chunks_times_rtt(tmp_path, monkeypatch):
    # Prepare: 24 chunks a side (48 request/reply pairs) through a 200 ms link: 9.6 s if each paid a round trip
    monkeypatch.setattr(protocol, "CHUNK_POINTS", SMALL_CHUNK)
    lead, mine = _sets()
    port = free_port()
    rtt = 0.2
    with Relay(("127.0.0.1", port), LinkSpec(rtt_ms=rtt * 1000)) as relay:
        leader, follower = _pair(tmp_path, through=relay, port=port)
        t, box = _in_thread(follower_psi, follower, mine)
        try:
            # Execute
            t0 = time.monotonic()
            common, _ = leader_psi(leader, ["follower0"], lead)
            elapsed = time.monotonic() - t0
            t.join(60)
        finally:
            follower.close()
            leader.close()
    # Assert: correct; at least a few round trips (a lower bound), well under chunks x RTT (its slack is 2x the
    # window's 48 / 4 x RTT = 2.4 s, plus compute)
    assert "error" not in box, box.get("error")
    np.testing.assert_array_equal(common, np.intersect1d(lead, mine))
    serial = 48 * rtt
    assert 3 * rtt <= elapsed < serial, (elapsed, serial)


def _scripted_leader(leader, steps):
    """Hello, then the given (op, start, stop) steps; masks/doubles carry random points where they need some."""
    n = leader.expect("follower0", Psi, what="hello").n
    leader.post("follower0", Psi.hello(SUITE, 100))
    for op, start, stop in steps:
        payload = as_wire(random_points(stop - start)) if op == "double" else None
        leader.post("follower0", Psi.chunk(op, start, stop, payload))
    return n


@pytest.mark.parametrize(
    "steps, needle",
    [
        (
            [("mask", 0, 64), ("mask", 64, 128), ("double", 64, 128)],
            "PSI double from the leader: range 64..128 is not the requested 0..64",
        ),
        ([("mask", 0, 64), ("mask", 0, 64)], "range 0..64 is not the requested 64..128"),
        ([("double", 0, 64)], "PSI double from the leader out of order: expected PSI mask 0..64 (each step once"),
    ],
)
def test_the_follower_refuses_a_double_ahead_of_its_mask_or_a_mask_asked_twice(tmp_path, monkeypatch, steps, needle):
    # Prepare: the follower's 300 ids in chunks of 64
    monkeypatch.setattr(protocol, "CHUNK_POINTS", SMALL_CHUNK)
    leader, follower = _pair(tmp_path, timeout=5.0)
    t, box = _in_thread(follower_psi, follower, np.arange(300, dtype=np.int64))
    try:
        # Execute
        _scripted_leader(leader, steps)  # the follower's mask replies stay unread
        t.join(30)
    finally:
        follower.close()
        leader.close()
    # Assert
    err = box.get("error")
    assert isinstance(err, PSIError) and needle in str(err) and "\n" not in str(err), err
