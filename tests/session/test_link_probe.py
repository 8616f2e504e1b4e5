"""Know your link (vfl/session/link_probe.py): the leader times each follower's round trip and bandwidth over the
parties' own authenticated channel between hello and welcome; the follower echoes within its caps; every run logs
the round trip and warns with the number when it bounds training; `--check-link` measures, advises and stops both
parties cleanly. Timing assertions point the robust way: a delay only grows under load (RTT bounded below, bandwidth
bounded above), the other side has a wide slack."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.support.party_processes import free_port, party_keys
from vfl.netlink.relay import LinkSpec, Relay
from vfl.session.link_probe import (
    ECHO_BUDGET,
    MAX_ECHOES,
    PAD_BYTES,
    LinkCheckDone,
    LinkFigures,
    ProbeAnswerer,
    follower_link_check,
    latency_note,
    measure,
)
from vfl.wire import FollowerChannel, LeaderChannel, PeerAbort, WireError
from vfl.wire.curve_keys import load_follower_keys, load_leader_keys
from vfl.wire.frames import Message
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


class _Recorder:
    """A channel that records what is posted to it."""

    def __init__(self):
        self.posted = []

    def post(self, *args):
        self.posted.append(args[-1])


NONCE = "0123456789abcdef" * 2


def test_a_follower_echoes_at_most_max_echoes_probes_and_each_with_its_nonce():
    # Prepare
    ch = _Recorder()
    answerer, probe = ProbeAnswerer(ch), LinkProbe(0, NONCE, 16, np.zeros(0, np.uint8))
    # Execute: MAX_ECHOES probes, then one more
    for _ in range(MAX_ECHOES):
        answerer(probe)
    # Assert: each echoed with its nonce and the bytes it asked for; the next one is a protocol error
    assert len(ch.posted) == MAX_ECHOES
    assert all(isinstance(m, LinkEcho) and m.nonce == NONCE and m.pad.size == 16 for m in ch.posted)
    with pytest.raises(WireError, match=f"more than {MAX_ECHOES} probes before the welcome"):
        answerer(probe)


def test_a_leader_cannot_make_a_follower_a_traffic_source():
    # Prepare: probes that ask for an echo over PAD_BYTES, or PAD_BYTES each past ECHO_BUDGET in all
    big = LinkProbe(0, NONCE, PAD_BYTES + 1, np.zeros(0, np.uint8))
    pad = LinkProbe(1, NONCE, PAD_BYTES, np.zeros(0, np.uint8))
    budget, answerer = ProbeAnswerer(_Recorder()), ProbeAnswerer(_Recorder())
    # Execute / Assert: the first refused at once; the second after ECHO_BUDGET / PAD_BYTES echoes
    with pytest.raises(WireError, match=f"at most {PAD_BYTES} a probe and {ECHO_BUDGET} a greeting"):
        answerer(big)
    for _ in range(ECHO_BUDGET // PAD_BYTES):
        budget(pad)
    with pytest.raises(WireError, match=f"{ECHO_BUDGET + PAD_BYTES} in all"):
        budget(pad)
    assert len(budget.ch.posted) == ECHO_BUDGET // PAD_BYTES


def test_a_third_report_before_the_welcome_is_a_protocol_error():
    # Prepare
    answerer, report = ProbeAnswerer(_Recorder()), LinkReport(40.0, 0)
    # Execute / Assert
    assert answerer(report) is False and answerer(report) is False
    with pytest.raises(WireError, match="more than 2 before the welcome"):
        answerer(report)


class _EchoChannel:
    """A leader's channel whose follower echoes each probe, with another nonce when `forge`."""

    timeout_s = 5.0

    def __init__(self, forge: bool):
        self.forge, self.queue = forge, []

    def post(self, peer, probe):
        nonce = "f" * 32 if self.forge else probe.nonce
        self.queue.append(LinkEcho(probe.probe, nonce, np.zeros(probe.echo_bytes, np.uint8)))

    def expect(self, peer, cls, what=None):
        return self.queue.pop(0)


def test_an_echo_without_its_probes_nonce_is_refused_so_none_can_be_sent_ahead():
    # Prepare / Execute / Assert: the honest echoes time; a follower answering ahead (another nonce) is refused
    assert measure(_EchoChannel(forge=False), "f0", rounds=2).rtt_s >= 0
    with pytest.raises(WireError, match="expected probe 0 with its nonce and 0 bytes, got probe 0 with another nonce"):
        measure(_EchoChannel(forge=True), "f0", rounds=2)


def test_a_follower_exits_0_on_the_check_only_when_it_was_started_for_it():
    # Prepare
    done = LinkCheckDone("link check only (--check-link): the followers were told, nothing was trained")
    # Execute / Assert: both asked: a line to log; one side only: the session ended without what was started
    assert follower_link_check(done, True, "f0").startswith("follower f0: link check only")
    assert follower_link_check(None, False, "f0") == ""
    with pytest.raises(PeerAbort, match="f0 was started to train, so nothing it was started for ran"):
        follower_link_check(done, False, "f0")
    with pytest.raises(PeerAbort, match="started with --check-link, but the leader started a run"):
        follower_link_check(None, True, "f0")


def _wire(message) -> Message:
    meta, tensors = message.to_wire()
    return Message(message.TYPE, "leader", "", 0, meta, tensors)


@pytest.mark.parametrize(
    "meta, tensors, words",
    [
        ({"probe": 0, "nonce": NONCE, "echo_bytes": MAX_PROBE_BYTES + 1}, [np.zeros(0, np.uint8)], "'echo_bytes'"),
        ({"probe": MAX_PROBES, "nonce": NONCE, "echo_bytes": 0}, [np.zeros(0, np.uint8)], "field 'probe'"),
        ({"probe": 0, "nonce": "x" * 32, "echo_bytes": 0}, [np.zeros(0, np.uint8)], "field 'nonce'"),
        ({"probe": 0, "nonce": NONCE, "echo_bytes": 0}, [np.zeros(MAX_PROBE_BYTES + 1, np.uint8)], "at most"),
        ({"probe": 0, "nonce": NONCE, "echo_bytes": 0}, [np.zeros(4, np.float32)], "tensor 'pad' must be uint8"),
        ({"probe": 0, "nonce": NONCE, "echo_bytes": 0, "rtt": 1}, [np.zeros(0, np.uint8)], "unknown field 'rtt'"),
    ],
)
def test_a_malformed_probe_is_refused_naming_the_field(meta, tensors, words):
    # Prepare / Execute / Assert
    with pytest.raises(WireError, match=words):
        LinkProbe.from_wire(Message("LINK_PROBE", "leader", "", 0, meta, tensors))


def test_probe_echo_and_report_round_trip_through_their_wire_form():
    # Prepare
    messages = [
        LinkProbe(3, NONCE, 1024, np.zeros(7, np.uint8)),
        LinkEcho(3, NONCE, np.zeros(1024, np.uint8)),
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
