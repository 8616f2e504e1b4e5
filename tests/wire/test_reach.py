"""What a newcomer's first connection gets wrong is named within seconds, on the side that sees it, over real sockets
on 127.0.0.1: a leader host that does not resolve, nothing listening at the endpoint, a leader key that does not match
the follower's pinned file, a follower key the leader does not admit (once per key, bounded), a peer's public key
file that is missing, and a recorded leader session replayed to a follower (a failed CURVE handshake, even when it
fails while the follower's first send is under way)."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from tests.support.party_processes import free_port, party_keys
from tests.support.tcp_tools import Forwarder, replay_server
from vfl.wire import FollowerChannel, LeaderChannel, PeerTimeout, WireError
from vfl.wire.curve_keys import (
    KeyFileError,
    create_key_pair,
    fingerprint,
    load_follower_keys,
    load_leader_keys,
    load_public_key,
)

FEW_SECONDS = 3.0  # a message must come this soon, well before the channels' deadline
DEADLINE_S = 5.0


class Notices:
    """A notice callable that keeps (seconds since it was made, line)."""

    def __init__(self):
        self.t0, self.lines = time.monotonic(), []

    def __call__(self, line: str) -> None:
        self.lines.append((time.monotonic() - self.t0, line))

    def first(self, needle: str) -> tuple[float, str] | None:
        return next(((t, line) for t, line in self.lines if needle in line), None)


def _follower(tmp_path, endpoint: str, name: str = "follower0", leader_key: str | None = None, notice=None):
    keys = party_keys(str(tmp_path), ("leader", name))
    leader_file = leader_key or keys["leader"][0]
    return FollowerChannel(
        endpoint, name, load_follower_keys(keys[name][1], leader_file), DEADLINE_S, notice=notice
    ), leader_file


def test_a_leader_host_that_does_not_resolve_is_named_at_once(tmp_path):
    # Prepare
    t0 = time.monotonic()
    # Execute
    with pytest.raises(WireError) as e:
        _follower(tmp_path, "tcp://no-such-leader.invalid:5560")
    # Assert
    assert "the leader's host 'no-such-leader.invalid' in tcp://no-such-leader.invalid:5560 does not resolve" in str(
        e.value
    )
    assert time.monotonic() - t0 < FEW_SECONDS


def test_nothing_listening_is_said_within_seconds_and_named_in_the_timeout(tmp_path):
    # Prepare: a port nobody listens on
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    notices = Notices()
    channel, _ = _follower(tmp_path, endpoint, notice=notices)
    # Execute
    try:
        with pytest.raises(PeerTimeout) as e:
            channel.recv(("PSI",), what="PSI hello from the leader")
    finally:
        channel.close()
    # Assert: said once, early; the timeout says it again
    said = notices.first(f"nothing is listening at {endpoint}")
    assert said is not None and said[0] < FEW_SECONDS, notices.lines
    assert "retrying until" in said[1]
    assert len([line for _, line in notices.lines if "nothing is listening" in line]) == 1
    assert f"nothing is listening at {endpoint}" in str(e.value)


def test_a_follower_pinning_another_leader_key_is_told_the_key_does_not_match_its_file(tmp_path):
    """The follower names its pinned file within seconds; the leader, which cannot open the follower's greeting (so
    never learns its key), says once that a client sealed it to another key than its own."""
    # Prepare: the real leader listens; the follower pins a key of another pair (a stale or swapped leader.key)
    keys = party_keys(str(tmp_path), ("leader", "follower0"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    logged = Notices()
    leader = LeaderChannel(
        endpoint,
        ("follower0",),
        load_leader_keys(keys["leader"][1], {"follower0": keys["follower0"][0]}),
        10,
        "leader",
        notice=logged,
    )
    wrong, _ = create_key_pair("leader", str(tmp_path / "other_keys"))
    notices = Notices()
    channel, pinned = _follower(tmp_path, endpoint, leader_key=wrong, notice=notices)
    # Execute
    try:
        with pytest.raises(PeerTimeout) as e:
            channel.recv(("PSI",), what="PSI hello from the leader")
    finally:
        channel.close()
        leader.close()
    # Assert
    said = notices.first(f"the leader's key does not match {pinned}")
    assert said is not None and said[0] < FEW_SECONDS, notices.lines
    assert fingerprint(load_public_key(wrong)) in said[1]
    assert f"the leader's key does not match {pinned}" in str(e.value)
    told = [line for _, line in logged.lines]
    assert len(told) == 1 and "a client failed the CURVE handshake: it sealed its greeting to another key" in told[0]
    assert logged.lines[0][0] < FEW_SECONDS and fingerprint(load_public_key(keys["leader"][0])) in told[0]
    assert leader.gate.crypto_failures > 1  # many failures, one line


def test_the_leader_names_each_refused_key_once_with_its_fingerprint_and_bounds_the_lines(tmp_path, monkeypatch):
    # Prepare: the leader admits follower0 only, and names at most 2 refused keys; 3 strangers, one of them twice
    import vfl.wire.admission as admission

    monkeypatch.setattr(admission, "NAMED_KEYS", 2)
    keys = party_keys(str(tmp_path), ("leader", "follower0"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    logged = Notices()
    leader = LeaderChannel(
        endpoint,
        ("follower0",),
        load_leader_keys(keys["leader"][1], {"follower0": keys["follower0"][0]}),
        10,
        "leader",
        notice=logged,
    )
    strangers = []
    for i in range(3):
        public, secret = create_key_pair(f"stranger{i}", str(tmp_path / f"k{i}"))
        strangers.append((load_public_key(public), load_follower_keys(secret, keys["leader"][0])))
    try:
        # Execute: each stranger is refused (its own channel says so at once); the first tries twice
        for _, stranger_keys in [strangers[0], *strangers]:
            channel = FollowerChannel(endpoint, "follower0", stranger_keys, DEADLINE_S)
            try:
                with pytest.raises(WireError, match="refused this party's key"):
                    channel.recv(("PSI",))
            finally:
                channel.close()
    finally:
        leader.close()
    # Assert: the two first keys named once each, with fingerprint and address; then one line, then nothing
    lines = [line for _, line in logged.lines]
    first, second = (fingerprint(p) for p, _ in strangers[:2])
    assert len(lines) == 3, lines
    assert lines[0].startswith("leader leader: refused a CURVE handshake from 127.0.0.1") and first in lines[0]
    assert (
        second in lines[1] and f"admitted: follower0 {fingerprint(load_public_key(keys['follower0'][0]))}" in lines[1]
    )
    assert "further refused keys are not named" in lines[2] and fingerprint(strangers[2][0]) not in lines[2]


def test_a_missing_peer_public_key_says_whose_key_to_obtain_and_where_to_put_it(tmp_path):
    # Prepare: each party has its own pair, but neither has the other's public key yet
    lead_pub, lead_sec = create_key_pair("leader", str(tmp_path / "leader_host"))
    _, f_sec = create_key_pair("follower0", str(tmp_path / "follower_host"))
    want_f = str(tmp_path / "leader_host" / "follower0.key")
    want_l = str(tmp_path / "follower_host" / "leader.key")
    # Execute
    with pytest.raises(KeyFileError) as on_leader:
        load_leader_keys(lead_sec, {"follower0": want_f})
    with pytest.raises(KeyFileError) as on_follower:
        load_follower_keys(f_sec, want_l)
    # Assert
    assert (
        "obtain follower0's public key (follower0.key, written by `python -m vfl.keys new` on follower0's host"
        in str(on_leader.value)
        and str(on_leader.value).endswith(f"put it at {want_f}")
    )
    assert "obtain the leader's public key (leader.key" in str(on_follower.value)
    assert str(on_follower.value).endswith(f"put it at {want_l}")
    assert "create key pairs" not in str(on_leader.value) + str(on_follower.value)


def _recorded_leader_stream(server_public: bytes, server_secret: bytes, keys) -> bytes:
    """What a CURVE server holding the leader's key sent to a follower through a recording forwarder (its
    greeting, WELCOME and READY for that follower's transient key)."""
    ctx = zmq.Context()
    server = ctx.socket(zmq.ROUTER)
    server.curve_server, server.curve_publickey, server.curve_secretkey = True, server_public, server_secret
    proxy = Forwarder(free_port(), server.bind_to_random_port("tcp://127.0.0.1"))
    client = ctx.socket(zmq.DEALER)
    client.curve_serverkey, client.curve_publickey, client.curve_secretkey = server_public, keys.public, keys.secret
    client.connect(f"tcp://127.0.0.1:{proxy._server.getsockname()[1]}")
    try:
        client.send(b"hello")
        assert server.poll(int(DEADLINE_S * 1000)) and server.recv_multipart()[-1] == b"hello"
        return proxy.stream("down", 0)
    finally:
        client.close(0)
        server.close(0)
        proxy.close()
        ctx.term()


def test_a_replayed_leader_session_is_named_a_failed_handshake_when_it_fails_between_the_poll_and_the_send(
    tmp_path, monkeypatch
):
    """The follower's first send found the socket writable, then the CURVE handshake failed (a replayed WELCOME
    cannot be opened with this follower's fresh transient key) and the socket could take nothing: the send watches
    the connection's events, so the refusal is named at once, never a send that waits out its deadline."""
    # Prepare: a leader session recorded, replayed to a fresh follower once its first send is under way
    keys = party_keys(str(tmp_path), ("leader", "follower0"))
    follower_keys = load_follower_keys(keys["follower0"][1], keys["leader"][0])
    leader_keys = load_leader_keys(keys["leader"][1], {"follower0": keys["follower0"][0]})
    recorded = _recorded_leader_stream(follower_keys.leader, leader_keys.secret, follower_keys)
    port, play = free_port(), threading.Event()
    replay_server(port, recorded, hold_s=2 * DEADLINE_S, play=play)
    channel = FollowerChannel(f"tcp://127.0.0.1:{port}", "follower0", follower_keys, DEADLINE_S)
    real_send = channel._sock.send

    def send_after_the_handshake_failed(*args, **kwargs):
        if not play.is_set():  # the socket was writable at the poll; the replay is played now, and the socket's
            play.set()  # first write finds no connection to take it (libzmq: EAGAIN, or a wait until SNDTIMEO)
            raise zmq.Again()
        return real_send(*args, **kwargs)

    monkeypatch.setattr(channel._sock, "send", send_after_the_handshake_failed)
    t0 = time.monotonic()
    # Execute
    try:
        with pytest.raises(WireError) as e:
            channel.send("PSI", {"op": "hello"})
            channel.recv(("PSI",))
    finally:
        channel.close()
    # Assert
    assert "failed the CURVE handshake" in str(e.value) and "replays a recorded session" in str(e.value)
    assert time.monotonic() - t0 < FEW_SECONDS
