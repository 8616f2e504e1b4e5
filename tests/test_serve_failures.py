"""Online scoring's failures without processes: a follower that reconnects and drops again, or breaks the protocol,
is down alone (the scorer and the other followers go on), and a refused reconnect is told why."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_serve_units import CUT, _leader_model, _Table
from vfl.inference.serve_leader import ScoringWorker, ServeError
from vfl.wire.channel import PeerLost, PeerTimeout
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
