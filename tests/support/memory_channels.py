"""An in-memory channel pair for the trainers and predictors: typed messages through real frames, no sockets."""

from __future__ import annotations

import queue

from vfl.wire import PeerAbort, PeerTimeout, WireError
from vfl.wire.frames import decode, encode
from vfl.wire.messages import Abort, WireMessage, parse
from vfl.wire.resync import Reconnection

TIMEOUT_S = 20.0  # a receive deadline: a trainer that waits longer has lost its peer (the test fails, never hangs)


class _Queues:
    """One queue of frames per direction and follower, and the typed messages each side posted, in order."""

    def __init__(self, followers: tuple[str, ...]):
        self.to_follower = {f: queue.Queue() for f in followers}
        self.to_leader = {f: queue.Queue() for f in followers}
        self.posted: list[tuple[str, str, WireMessage]] = []  # (sender, receiver, message)


class _MemoryEndpoint:
    """What the trainers use of a channel: post / expect typed messages, the run id, byte counts."""

    def __init__(self, me: str, queues: _Queues):
        self.me, self.q = me, queues
        self.run = ""
        self.timeout_s = TIMEOUT_S
        self.bytes_sent = self.bytes_received = 0
        self.watch_disconnect = True
        # a queue never loses its connection: nothing is kept or resynchronised (vfl/wire/resync.py)
        self.resync = Reconnection(me, 0.0)

    def _put(self, box: queue.Queue, peer: str, message: WireMessage) -> None:
        meta, tensors = message.to_wire()
        frames = [bytes(memoryview(f)) for f in encode(message.TYPE, self.me, self.run, 0, meta, tensors)]
        self.bytes_sent += sum(len(f) for f in frames)
        self.q.posted.append((self.me, peer, message))
        box.put(frames)

    def _take(self, box: queue.Queue, peer: str, classes: tuple[type[WireMessage], ...], what: str | None):
        try:
            frames = box.get(timeout=self.timeout_s)
        except queue.Empty:
            raise PeerTimeout(
                f"timed out after {self.timeout_s:g} s awaiting {what or '/'.join(c.TYPE for c in classes)} from {peer}"
            ) from None
        self.bytes_received += sum(len(f) for f in frames)
        msg = decode(frames, peer)
        if msg.type == Abort.TYPE:
            raise PeerAbort(f"{peer} aborted: {parse(msg).reason}")
        if msg.type not in [c.TYPE for c in classes]:
            raise WireError(f"expected {'/'.join(c.TYPE for c in classes)} from {peer}, got {msg.type}")
        return parse(msg)


class MemoryLeaderChannel(_MemoryEndpoint):
    """The leader's side of the in-memory pair (LeaderChannel's typed API)."""

    def post(self, peer: str, message: WireMessage) -> None:
        self._put(self.q.to_follower[peer], peer, message)

    def expect(self, peer: str, *classes: type[WireMessage], what: str | None = None) -> WireMessage:
        return self._take(self.q.to_leader[peer], peer, classes, what)

    def abort_all(self, reason: str) -> None:
        for f in self.q.to_follower:
            self.post(f, Abort(reason))


class MemoryFollowerChannel(_MemoryEndpoint):
    """A follower's side of the in-memory pair (FollowerChannel's typed API)."""

    endpoint = "memory://leader"

    def post(self, message: WireMessage) -> None:
        self._put(self.q.to_leader[self.me], "leader", message)

    def expect(self, *classes: type[WireMessage], what: str | None = None) -> WireMessage:
        return self._take(self.q.to_follower[self.me], "leader", classes, what)
