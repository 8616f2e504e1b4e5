"""Resynchronisation after a lost connection (vfl/wire/resync.py), channel to channel through the shipped relay: every
message is applied once and in order across a drop in the middle of a message, a duplicate is dropped, and what a
stranger or a peer cannot do with RESYNC is refused."""

from __future__ import annotations

import threading

import pytest

from tests.support.party_processes import free_port, party_keys
from vfl.netlink.relay import Relay
from vfl.wire import FollowerChannel, LeaderChannel, WireError
from vfl.wire.curve_keys import load_follower_keys, load_leader_keys

RUN = "ab" * 16


def _pair(tmp_path, reconnect_s: float = 30.0, timeout_s: float = 10.0):
    """A leader and a follower channel through a relay, in one run, waiting up to reconnect_s for a lost link."""
    keys = party_keys(str(tmp_path), ("leader", "follower0"))
    port = free_port()
    leader = LeaderChannel(
        f"tcp://127.0.0.1:{port}",
        ("follower0",),
        load_leader_keys(keys["leader"][1], {"follower0": keys["follower0"][0]}),
        timeout_s,
        "leader",
    )
    relay = Relay(("127.0.0.1", port)).start()
    follower = FollowerChannel(
        relay.endpoint, "follower0", load_follower_keys(keys["follower0"][1], keys["leader"][0]), timeout_s
    )
    follower.send("WAIT", {})  # the leader learns the follower's connection from its first message
    leader.recv("follower0", "WAIT")
    for ch in (leader, follower):
        ch.run = RUN
        ch.resync.reconnect_s = reconnect_s
    return leader, follower, relay


def _echo(follower: FollowerChannel, steps: int, got: list, errors: list) -> None:
    try:
        for _ in range(steps):
            m = follower.recv(("FORWARD",))
            got.append(m.meta["step"])
            follower.send("EMBEDDING", {"step": m.meta["step"]})
    except Exception as e:  # reported by the test
        errors.append(e)


def _exchange(leader, follower, steps: int) -> tuple[list, list, list]:
    got, errors, answers = [], [], []
    t = threading.Thread(target=_echo, args=(follower, steps, got, errors), daemon=True)
    t.start()
    for i in range(steps):
        leader.send("follower0", "FORWARD", {"step": i}, [__import__("numpy").zeros(50_000, "float32")])
        answers.append(leader.recv("follower0", "EMBEDDING").meta["step"])
    t.join(30)
    return got, answers, errors


def test_a_drop_in_the_middle_of_a_message_is_resynchronised_and_every_message_applied_once_in_order(tmp_path):
    """The relay resets both connections after 1 MB towards the follower (inside a 200 kB FORWARD) and refuses
    connections for 0.3 s: the follower reconnects, both sides agree, and the leader's lost FORWARD is sent again;
    each side applies every message exactly once, in order."""
    # Prepare
    leader, follower, relay = _pair(tmp_path)
    lines = []
    leader.notice = lines.append
    relay.drop_after(down_bytes=1_000_000, down_s=0.3)
    try:
        # Execute
        got, answers, errors = _exchange(leader, follower, 12)
    finally:
        follower.close()
        leader.close()
        relay.close()
    # Assert
    assert not errors, errors
    assert got == list(range(12)) and answers == list(range(12))
    assert relay.drops == 1 and relay.connections == 2
    assert any("link to follower0 lost at step" in x for x in lines), lines
    assert any("link to follower0 back after" in x for x in lines), lines


def test_power_without_reconnect_s_the_same_drop_ends_the_exchange(tmp_path):
    """Power: with reconnect_s 0 (the first loss ends the run) the same drop is a lost connection."""
    # Prepare
    leader, follower, relay = _pair(tmp_path, reconnect_s=0.0, timeout_s=3.0)
    relay.drop_after(down_bytes=1_000_000, down_s=0.3)
    try:
        # Execute / Assert
        with pytest.raises(WireError):
            _exchange(leader, follower, 12)
    finally:
        follower.close()
        leader.close()
        relay.close()


def test_a_resync_claiming_a_message_never_sent_is_refused():
    """A peer that says it received message 9 when 5 were sent to it cannot make this side skip what it holds."""
    # Prepare
    from vfl.wire.resync import PeerGone, Reconnection

    r = Reconnection("leader", 30.0)
    r.on_loss("follower0", True)
    # Execute / Assert
    with pytest.raises(PeerGone, match="claims to have received message 9, but only 5 were sent"):
        r.agreed("follower0", 9, 0, 5, -1, True)


def test_a_follower_claiming_a_step_ahead_of_the_leader_is_refused():
    # Prepare
    from vfl.wire.resync import PeerGone, Reconnection

    r = Reconnection("leader", 30.0)
    r.progress = 12
    r.on_loss("follower0", True)
    # Execute / Assert
    with pytest.raises(PeerGone, match="started step 13, but the leader is at step 12"):
        r.agreed("follower0", 3, 13, 5, 2, True)


def test_after_a_resync_a_duplicate_is_dropped_and_a_replay_below_the_announced_number_refused():
    """Announced 4 with 7 expected next: 5 and 6 (sent again) are dropped, 3 (applied before the loss) is a replay."""
    # Prepare
    from vfl.wire.resync import Reconnection

    r = Reconnection("leader", 30.0)
    r.on_loss("follower0", True)
    r.agreed("follower0", -1, 0, 0, 4, True)
    # Execute / Assert
    assert r.sequence("follower0", 5, 7) is None and r.sequence("follower0", 6, 7) is None
    with pytest.raises(WireError, match="replayed or lost"):
        r.sequence("follower0", 3, 7)
    assert r.sequence("follower0", 7, 7) == 7
    with pytest.raises(WireError, match="replayed or lost"):
        r.sequence("follower0", 9, 8)  # the gap allowance was used by the first message after the resync


def test_a_peer_that_acknowledges_nothing_cannot_grow_what_is_kept_for_it_without_bound(monkeypatch):
    # Prepare
    from vfl.wire import resync

    monkeypatch.setattr(resync, "OUTBOX_MAX_MESSAGES", 3)
    r = resync.Reconnection("leader", 30.0)
    for seq in range(3):
        r.keep("follower0", seq, "GRADIENT", {"step": seq}, [b"x" * 10])
    # Execute / Assert
    with pytest.raises(resync.PeerGone, match="acknowledged none of the last 3 messages"):
        r.keep("follower0", 3, "GRADIENT", {"step": 3}, [b"x" * 10])
    r.acknowledged("follower0", 1, 3)  # once it acknowledges, room again
    r.keep("follower0", 3, "GRADIENT", {"step": 3}, [b"x" * 10])
    assert [k.seq for k in r.links["follower0"].outbox] == [2, 3]


def test_a_resync_of_another_run_is_refused(tmp_path):
    """A RESYNC carrying another run id is refused like any message of another run."""
    # Prepare
    from vfl.wire.frames import encode
    from vfl.wire.resync_messages import Resync

    leader, follower, relay = _pair(tmp_path)
    try:
        follower.run = "cd" * 16
        frames = encode("RESYNC", "follower0", follower.run, 0, *Resync("hello", "0" * 32).to_wire())
        # Execute / Assert
        with pytest.raises(WireError, match="RESYNC from follower0 outside a run"):
            leader._accept("follower0", frames)
    finally:
        follower.close()
        leader.close()
        relay.close()


def test_keepalives_sent_while_a_follower_is_lost_are_kept_and_the_run_goes_on_after_it():
    """An outage longer than a keepalive interval: the leader's WAITs to the lost follower are numbered, so they are
    kept and sent again with the FORWARD; the follower applies every number once and the next GRADIENT passes (the
    red team's exp1: before, the GRADIENT's number jumped over the unkept WAITs and ended the run)."""
    import tempfile

    # Prepare
    leader, follower, relay = _pair(tempfile.mkdtemp())
    got, errors = [], []

    def answer() -> None:
        try:
            for _ in range(2):
                m = follower.recv(("FORWARD",))
                follower.send("EMBEDDING", {"step": m.meta["step"]})
                got.append(follower.recv(("GRADIENT",)).meta["step"])
        except Exception as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    waits = []

    def keepalive() -> None:  # LeaderSession.keepalive while a follower is waited for
        if len(waits) < 3:
            waits.append(leader.send("follower0", "WAIT", {}))

    try:
        leader.send("follower0", "FORWARD", {"step": 0})
        leader.recv("follower0", "EMBEDDING")
        leader.send("follower0", "GRADIENT", {"step": 0})
        # Execute: both connections reset and refused for 1 s; a FORWARD and keepalives while the follower is away
        relay.drop_all(down_s=1.0)
        assert relay.dropped.wait(5)
        leader.send("follower0", "FORWARD", {"step": 1})
        leader.while_waiting = keepalive
        leader.recv("follower0", "EMBEDDING")
        leader.while_waiting = None
        leader.send("follower0", "GRADIENT", {"step": 1})
        t.join(30)
    finally:
        follower.close()
        leader.close()
        relay.close()
    # Assert
    assert not errors, errors
    assert got == [0, 1] and len(waits) >= 1


def test_a_peer_that_sends_without_acknowledging_is_refused_before_its_kept_messages_grow():
    """A live peer whose every header acknowledges nothing: once more than ACK_LAG_MAX of this side's messages wait
    for it, its next message is refused (the red team's 2 GiB outbox), and a later RESYNC may not claim less than
    it acknowledged (nothing skipped silently)."""
    from vfl.wire.resync import ACK_LAG_MAX, PeerGone, Reconnection

    # Prepare
    side = Reconnection("leader", 30.0)
    for seq in range(ACK_LAG_MAX + 1):
        side.keep("follower0", seq, "GRADIENT", {"step": seq}, [b"x" * 100])
    # Execute / Assert
    with pytest.raises(WireError, match=f"at most {ACK_LAG_MAX} unacknowledged while it sends"):
        side.acknowledged("follower0", -1, ACK_LAG_MAX + 1)
    side.acknowledged("follower0", 10, ACK_LAG_MAX + 1)
    with pytest.raises(PeerGone, match="acknowledged 10 before"):
        side.agreed("follower0", 5, 0, ACK_LAG_MAX + 1, 0, leader=True)


def test_a_lost_peers_wait_that_runs_out_between_two_clock_reads_ends_in_its_own_line(tmp_path, monkeypatch):
    """The wait for a lost follower ends as PeerGone, naming reconnect_s and the step, even when its deadline passes
    between the clock read that computed it and the one that finds it passed (a loaded machine's scheduling: once a
    generic 'timed out after 60 s awaiting EMBEDDING', with no checkpoint named)."""
    import time

    from vfl.wire.resync import PeerGone

    # Prepare: the follower's connection is gone (closed) and the leader waits up to 0.5 s for it; each time the
    # leader computes the wait's deadline, the clock moves past it before the receive looks at the clock again
    leader, follower, relay = _pair(tmp_path, reconnect_s=0.5, timeout_s=60.0)
    compute = leader.resync.deadline

    def deadline_already_passed(peer, deadline, enabled):
        due = compute(peer, deadline, enabled)
        if leader.resync.links.get(peer) is not None and leader.resync.links[peer].lost_since is not None:
            return min(due, time.monotonic() - 1e-3)  # the clock the receive reads next is past it (no sleep)
        return due

    monkeypatch.setattr(leader.resync, "deadline", deadline_already_passed)
    follower.close()
    relay.close()
    try:
        # Execute / Assert
        with pytest.raises(
            PeerGone, match=r"link to follower0 lost at step .* not back within network.reconnect_s=0.5 s"
        ):
            leader.recv("follower0", "EMBEDDING")
    finally:
        leader.close()
