"""Know your link (vfl/session/link_probe.py): the leader times each follower's round trip and bandwidth over the
parties' own authenticated channel between hello and welcome; the follower echoes within its caps; every run logs
the round trip and warns with the number when it bounds training; `--check-link` measures, advises and stops both
parties cleanly. Timing assertions point the robust way: a delay only grows under load (RTT bounded below, bandwidth
bounded above), the other side has a wide slack."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.procs import free_port, party_keys
from vfl.netlink.relay import LinkSpec, Relay
from vfl.session.link_probe import LinkFigures, ProbeAnswerer, latency_note, measure
from vfl.wire import FollowerChannel, LeaderChannel, WireError
from vfl.wire.frames import Message
from vfl.wire.keys import load_follower_keys, load_leader_keys
from vfl.wire.link_messages import MAX_PROBE_BYTES, MAX_PROBES, LinkEcho, LinkProbe, LinkReport

LINK = LinkSpec(rtt_ms=40, bandwidth_mbit=40)


def _channels(tmp_path, port: int):
    keys = party_keys(str(tmp_path), ("leader", "f0"))
    leader = LeaderChannel(
        f"tcp://127.0.0.1:{port}", ("f0",), load_leader_keys(keys["leader"][1], {"f0": keys["f0"][0]}), 20.0, "leader"
    )
    return leader, keys


def _follower(keys, endpoint: str) -> FollowerChannel:
    return FollowerChannel(endpoint, "f0", load_follower_keys(keys["f0"][1], keys["leader"][0]), 20.0)


def _answer_until_report(follower: FollowerChannel, answerer: ProbeAnswerer, errors: list) -> None:
    try:
        follower.send("HELLO", {})
        while not isinstance(msg := follower.expect(LinkProbe, LinkReport), LinkReport):
            answerer(msg)
        answerer(msg)
    except Exception as e:  # reported to the test's thread
        errors.append(e)


def test_the_leader_times_the_round_trip_and_each_directions_bandwidth_through_a_40_ms_40_mbit_link(tmp_path):
    # Prepare: a channel pair through the shipped relay at 40 ms RTT, 40 Mbit/s each way; the follower echoes
    port = free_port()
    leader, keys = _channels(tmp_path, port=port)
    errors: list = []
    with Relay(("127.0.0.1", port), LINK, seed=1) as relay:
        follower = _follower(keys, relay.endpoint)
        answerer = ProbeAnswerer(follower)
        thread = threading.Thread(target=_answer_until_report, args=(follower, answerer, errors), daemon=True)
        thread.start()
        try:
            leader.recv("f0", "HELLO")
            # Execute: 3 round trips, then 2 MiB each way
            figures = measure(leader, "f0", rounds=3, bulk_bytes=2 << 20)
            leader.post("f0", figures.report(final=True))
            thread.join(20)
        finally:
            follower.close()
            leader.close()
    # Assert: the RTT is at least the link's (and not seconds more); each direction no faster than 40 Mbit/s (+10%
    # for the relay's pacing granularity) and at least a quarter of it; the follower logged the leader's figures
    assert errors == [] and not thread.is_alive()
    assert 0.040 <= figures.rtt_s < 0.040 + 1.0, figures
    for rate in (figures.down, figures.up):
        assert 40e6 / 8 / 4 <= rate <= 40e6 / 8 * 1.1, figures
    assert answerer.answered == 3 + 2 * 8 and answerer.figures.rtt_s == pytest.approx(figures.rtt_s, rel=1e-6)
    assert relay.bytes_down >= 2 << 20 and relay.bytes_up >= 2 << 20


def test_a_follower_answers_at_most_max_probes_before_its_welcome(tmp_path):
    # Prepare: a follower's answerer over a channel that only records what it posts
    posted = []
    answerer = ProbeAnswerer(type("Recorder", (), {"post": lambda self, m: posted.append(m)})())
    probe = LinkProbe(0, 16, np.zeros(0, np.uint8))
    # Execute: MAX_PROBES probes, then one more
    for _ in range(MAX_PROBES):
        answerer(probe)
    # Assert: each echoed with the bytes it asked for; the next one is a protocol error
    assert len(posted) == MAX_PROBES and all(isinstance(m, LinkEcho) and m.pad.size == 16 for m in posted)
    with pytest.raises(WireError, match=f"more than {MAX_PROBES} probes before the welcome"):
        answerer(probe)


def _wire(message) -> Message:
    meta, tensors = message.to_wire()
    return Message(message.TYPE, "leader", "", 0, meta, tensors)


@pytest.mark.parametrize(
    "meta, tensors, words",
    [
        ({"probe": 0, "echo_bytes": MAX_PROBE_BYTES + 1}, [np.zeros(0, np.uint8)], "field 'echo_bytes'"),
        ({"probe": MAX_PROBES, "echo_bytes": 0}, [np.zeros(0, np.uint8)], "field 'probe'"),
        ({"probe": 0, "echo_bytes": 0}, [np.zeros(MAX_PROBE_BYTES + 1, np.uint8)], "at most"),
        ({"probe": 0, "echo_bytes": 0}, [np.zeros(4, np.float32)], "tensor 'pad' must be uint8"),
        ({"probe": 0, "echo_bytes": 0, "rtt": 1}, [np.zeros(0, np.uint8)], "unknown field 'rtt'"),
    ],
)
def test_a_malformed_probe_is_refused_naming_the_field(meta, tensors, words):
    # Prepare / Execute / Assert
    with pytest.raises(WireError, match=words):
        LinkProbe.from_wire(Message("LINK_PROBE", "leader", "", 0, meta, tensors))


def test_probe_echo_and_report_round_trip_through_their_wire_form():
    # Prepare
    messages = [
        LinkProbe(3, 1024, np.zeros(7, np.uint8)),
        LinkEcho(3, np.zeros(1024, np.uint8)),
        LinkFigures(0.04, 12.5e6, None).report(final=True),
    ]
    # Execute / Assert
    for m in messages:
        assert type(m).from_wire(_wire(m)) == m
    assert messages[2] == LinkReport(40.0, 1, 100.0, None)


def test_a_far_link_warns_with_its_latency_bound_and_the_staleness_that_lifts_it():
    # Prepare: 40 ms and batch 1024 bound a synchronous run at 25,600 samples/s
    far, near = LinkFigures(0.040), LinkFigures(0.0002)
    # Execute
    note = latency_note(far, 1024, 0)
    # Assert: the number, and train.staleness=4 (5 x 1024 / 40 ms = 128,000 >= 100,000); nothing on a near link
    assert "at most 25,600 samples/s" in note and "train.staleness=4 lifts that bound to 128,000" in note
    assert latency_note(near, 1024, 0) is None and latency_note(far, 1024, 4) is None
