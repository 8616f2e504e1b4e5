"""Online scoring's failures without processes: a follower that reconnects and drops again, or breaks the protocol,
is down alone (the scorer and the other followers go on), and a refused reconnect is told why."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.serve_in_memory import CUT, _leader_model, _Table
from vfl.inference.serve.leader import ScoringWorker, ServeError
from vfl.wire import WireError
from vfl.wire.endpoint import PeerLost, PeerTimeout
from vfl.wire.serve_messages import ServeCut, ServeHello, ServeIds, ServeWelcome


def _hello(cut_dim: int = CUT) -> ServeHello:
    return ServeHello("b" * 32, "f", 5, "a" * 32, 400, "fp", cut_dim, 20.0, 64, 100.0)


class _Returning:
    """The leader's channel to follower f, which was down: each hello in `hellos` arrives once; the first
    `drop_welcomes` SERVE_WELCOMEs find its new connection gone (PeerLost); SERVE_IDS get cuts of the ids."""

    def __init__(self, hellos: list, drop_welcomes: int):
        self.timeout_s, self.alive, self.run, self.sent, self.cuts = 1.0, {"f"}, "r" * 32, [], []
        self.hellos, self.drop_welcomes = hellos, drop_welcomes

    def post(self, peer, msg):
        if isinstance(msg, ServeWelcome) and self.drop_welcomes:
            self.drop_welcomes -= 1
            raise PeerLost(f"{peer} is not connected (sending SERVE_WELCOME)")
        self.sent.append((peer, msg))
        if isinstance(msg, ServeIds):
            cut = np.stack([np.sin(msg.ids * (k + 1.0)) for k in range(CUT)], 1).astype(np.float32)
            self.cuts.append(ServeCut(msg.request, cut, np.zeros(0, np.int64)))

    def expect(self, peer, *classes, what=None):
        if ServeHello in classes:
            if not self.hellos:
                raise PeerTimeout("timed out after 0.001 s awaiting SERVE_HELLO")
            return self.hellos.pop(0)
        return self.cuts.pop(0)

    def forget(self, peer):
        pass


def _worker(ch, followers=("f",)) -> ScoringWorker:
    return ScoringWorker(ch, list(followers), {f: CUT for f in followers}, _leader_model(1), _Table(1), None, 64)


def test_a_follower_that_drops_again_before_its_welcome_stays_down_and_the_scorer_goes_on():
    # Prepare: f is down; it greets again but its connection is gone before the leader's SERVE_WELCOME
    ch = _Returning([_hello()], drop_welcomes=1)
    worker = _worker(ch)
    worker.down["f"] = "f is down (connection lost)"
    worker.start()
    # Execute: a request while f is down; then f greets again and stays
    with pytest.raises(ServeError) as down:
        worker.submit(np.array([3, 4]), 5.0).result(timeout=10)
    ch.hellos.append(_hello())
    scored = worker.submit(np.array([3, 4]), 5.0).result(timeout=10)
    worker.stop()
    # Assert: the first request names why f is down (not a stopped scorer); the scorer never stopped, f was welcomed
    # on its next hello and the second request is scored
    assert down.value.status == 503 and "dropped before it was welcomed" in str(down.value), down.value
    assert worker.failed is None and "f" not in worker.down
    assert [type(m).__name__ for _, m in ch.sent][:2] == ["ServeWelcome", "ServeIds"]
    assert None not in scored.scores and scored.missing == {}


class _OneBroken:
    """The leader's channel to followers honest and bad: bad's every SERVE_CUT breaks the protocol (the channel's
    WireError naming bad); every message sent is recorded with its peer."""

    def __init__(self, error_peer: str | None = "bad"):
        self.timeout_s, self.alive, self.sent, self.cuts = 1.0, {"honest", "bad"}, [], []
        self.error_peer = error_peer

    def post(self, peer, msg):
        self.sent.append((peer, msg))
        if isinstance(msg, ServeIds) and peer == "honest":
            self.cuts.append(ServeCut(msg.request, np.zeros((msg.ids.size, CUT), np.float32), np.zeros(0, np.int64)))

    def expect(self, peer, *classes, what=None):
        if peer == "bad" or self.error_peer is None:
            error = WireError("SERVE_CUT from bad: tensor 'unknown' must list strictly increasing positions below 1")
            error.peer = self.error_peer
            raise error
        return self.cuts.pop(0)

    def forget(self, peer):
        pass


def test_one_followers_protocol_error_aborts_that_follower_alone_and_tells_no_other():
    from vfl.wire.messages import Abort

    # Prepare: two followers, one of which sends a malformed SERVE_CUT
    ch = _OneBroken()
    worker = _worker(ch, ("honest", "bad"))
    worker.start()
    # Execute
    with pytest.raises(ServeError) as failed:
        worker.submit(np.array([3]), 5.0).result(timeout=10)
    worker.stop()
    # Assert: the request names bad; bad alone got an ABORT (with its own error) and is down; honest got nothing
    # but its SERVE_IDS and is up; the scorer goes on
    assert failed.value.status == 503 and "bad is down (protocol error" in str(failed.value)
    aborts = [(peer, m.reason) for peer, m in ch.sent if isinstance(m, Abort)]
    assert len(aborts) == 1 and aborts[0][0] == "bad" and "strictly increasing" in aborts[0][1]
    assert [type(m).__name__ for peer, m in ch.sent if peer == "honest"] == ["ServeIds"]
    assert set(worker.down) == {"bad"} and worker.failed is None


def test_a_channel_error_that_names_no_follower_stops_the_scorer_with_its_reason():
    # Prepare: the channel itself fails (its connection gate stopped: no follower's fault)
    ch = _OneBroken(error_peer=None)
    worker = _worker(ch, ("honest", "bad"))
    worker.start()
    # Execute
    with pytest.raises(ServeError):
        worker.submit(np.array([3]), 5.0).result(timeout=10)
    worker._thread.join(timeout=10)
    later = worker.submit(np.array([3]), 5.0)
    # Assert: no follower is blamed; every later request is refused with why the scorer stopped
    assert worker.down == {} and worker.failed is not None
    with pytest.raises(ServeError, match="the scorer stopped: SERVE_CUT from bad"):
        later.result(timeout=1)


def test_a_refused_reconnect_is_told_why_and_stays_down():
    from vfl.wire.messages import Abort

    # Prepare: f was down and greets again with a cut of another width than the top reads
    ch = _Returning([_hello(cut_dim=CUT + 1)], drop_welcomes=0)
    worker = _worker(ch)
    worker.down["f"] = "f is down (connection lost)"
    worker.start()
    # Execute
    with pytest.raises(ServeError) as down:
        worker.submit(np.array([3]), 5.0).result(timeout=10)
    worker.stop()
    # Assert: f got an ABORT naming why (it stops with that reason, instead of waiting for a welcome); the leader's
    # clients are told the same
    (abort,) = [m for _, m in ch.sent if isinstance(m, Abort)]
    assert f"f now cuts {CUT + 1} values, {CUT} before" in abort.reason
    assert down.value.status == 503 and "its new connection was refused" in str(down.value)
