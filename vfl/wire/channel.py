"""ZeroMQ channels with deadlines: the leader's ROUTER and a follower's DEALER.

A channel moves authenticated messages (see frames.py) and enforces per-peer sequence numbers,
the run id, deadlines on every receive, and notices a dropped TCP connection through a socket
monitor, so that no wait outlives its peer. It knows nothing about training.
"""
from __future__ import annotations

import time
from collections import deque

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from vfl.wire.frames import Message, WireError, decode, encode

ZERO_COPY_MIN_BYTES = 1 << 16  # below this zmq copies anyway (pyzmq serialization docs)
LINGER_MS = 2000
MAX_FRAME_BYTES = 1 << 30  # largest single frame accepted (an eval batch of 65536 x 4096 float32 fits)


class PeerAbort(WireError):
    """The peer sent ABORT; the text is its reason."""


class PeerTimeout(WireError):
    """A receive deadline passed."""


class PeerLost(WireError):
    """The TCP connection to a peer dropped."""


def _send(sock: zmq.Socket, frames: list, prefix: list | None = None) -> None:
    parts = (prefix or []) + frames
    copy_flags = [not (isinstance(p, memoryview) and p.nbytes >= ZERO_COPY_MIN_BYTES) for p in parts]
    try:
        for i, (part, copy) in enumerate(zip(parts, copy_flags)):
            sock.send(part, zmq.SNDMORE if i < len(parts) - 1 else 0, copy=copy)
    except zmq.ZMQError as e:
        if e.errno == zmq.EHOSTUNREACH:
            raise PeerLost("peer is not connected") from None
        raise


class _Endpoint:
    def __init__(self, me: str, key: bytes, timeout_s: float):
        self.me = me
        self.key = key
        self.timeout_s = float(timeout_s)
        self.run = ""
        self._ctx = zmq.Context()
        self._send_seq: dict[str, int] = {}
        self._recv_seq: dict[str, int] = {}
        self.watch_disconnect = True
        self.bytes_sent = 0
        self.bytes_received = 0

    def _make_socket(self, kind: int) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, LINGER_MS)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)  # a peer cannot make us allocate without bound
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        return sock

    def _frames(self, peer: str, type_: str, meta: dict | None, tensors) -> list:
        seq = self._send_seq.get(peer, 0)
        self._send_seq[peer] = seq + 1
        frames = encode(self.key, type_, self.me, self.run, seq, meta, [np.asarray(t) for t in tensors])
        self.bytes_sent += sum(memoryview(f).nbytes for f in frames)
        return frames

    def _accept(self, peer: str, frames: list, check_sender: bool = True) -> Message:
        self.bytes_received += sum(memoryview(f).nbytes for f in frames)
        msg = decode(self.key, frames, peer)
        if check_sender and msg.sender != peer:
            raise WireError(f"message on {peer}'s connection claims to be from {msg.sender!r}")
        want = self._recv_seq.get(peer, 0)
        if msg.seq != want:
            raise WireError(f"{msg.type} from {peer} has sequence number {msg.seq}, expected {want} (replayed or lost message)")
        if msg.type not in ("HELLO", "WELCOME", "ABORT") and msg.run != self.run:
            raise WireError(f"{msg.type} from {peer} belongs to run {msg.run!r}, this run is {self.run!r}")
        self._recv_seq[peer] = want + 1
        if msg.type == "ABORT":
            raise PeerAbort(f"{peer} aborted: {msg.meta.get('reason', 'no reason given')}")
        return msg

    def _poll(self, deadline: float, awaiting: str) -> bool:
        """Wait for socket input until the deadline; True when the data socket is readable."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PeerTimeout(f"timed out after {self.timeout_s:g} s awaiting {awaiting} (network.timeout_s)")
        events = dict(self._poller.poll(max(1, int(remaining * 1000))))
        if self._sock in events:  # messages that arrived before a disconnect are read first (an ABORT, say)
            return True
        if self._monitor in events:
            evt = recv_monitor_message(self._monitor)
            if evt["event"] == zmq.EVENT_DISCONNECTED and self.watch_disconnect:
                raise PeerLost(f"connection lost while awaiting {awaiting}")
        return False

    def close(self) -> None:
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._monitor.close(0)
        self._sock.close()
        self._ctx.term()


class LeaderChannel(_Endpoint):
    """The leader's ROUTER socket: followers connect to it with their party name as identity."""

    def __init__(self, bind: str, followers: tuple[str, ...], key: bytes, timeout_s: float, me: str, run: str):
        super().__init__(me, key, timeout_s)
        self.followers = tuple(followers)
        self.run = run
        self._sock = self._make_socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        try:
            self._sock.bind(bind)
        except zmq.ZMQError as e:
            self.close()
            if e.errno == zmq.EADDRINUSE:
                raise WireError(f"cannot bind {bind}: address already in use (another leader? pick a free port in network.bind)") from None
            raise WireError(f"cannot bind {bind}: {e}") from None
        self._inbox: dict[str, deque[Message]] = {f: deque() for f in self.followers}
        self.connected: set[str] = set()

    def send(self, peer: str, type_: str, meta: dict | None = None, tensors=()) -> None:
        try:
            _send(self._sock, self._frames(peer, type_, meta, tensors), [peer.encode()])
        except PeerLost:
            raise PeerLost(f"{peer} is not connected (sending {type_})") from None

    def recv(self, peer: str, type_: str, what: str | None = None) -> Message:
        """The next message from `peer`, which must be of `type_`; other peers' messages are queued."""
        awaiting = what or f"{type_} from {peer}"
        deadline = time.monotonic() + self.timeout_s
        while not self._inbox[peer]:
            try:
                if self._poll(deadline, awaiting):
                    self._read_one()
            except PeerLost as e:
                raise PeerLost(f"{e} (a follower disconnected; awaited peer: {peer})") from None
        msg = self._inbox[peer].popleft()
        if msg.type != type_:
            raise WireError(f"expected {type_} from {peer}, got {msg.type}")
        return msg

    def _read_one(self) -> None:
        frames = self._sock.recv_multipart(copy=False)
        ident = frames[0].bytes.decode("utf-8", "replace")
        if ident not in self._inbox:
            raise WireError(f"message from unexpected party {ident!r}; expected one of {list(self.followers)}")
        self.connected.add(ident)
        self._inbox[ident].append(self._accept(ident, frames[1:]))

    def abort_all(self, reason: str) -> None:
        """Best effort: tell every follower that ever connected why the run stops."""
        for peer in self.connected:
            try:
                self.send(peer, "ABORT", {"reason": reason[:2000]})
            except (WireError, zmq.ZMQError):
                pass


class FollowerChannel(_Endpoint):
    """A follower's DEALER socket to the leader."""

    def __init__(self, connect: str, me: str, key: bytes, timeout_s: float, leader_name: str = "leader"):
        super().__init__(me, key, timeout_s)
        self.endpoint = connect
        self.leader = leader_name
        self._sock = self._make_socket(zmq.DEALER)
        self._sock.setsockopt(zmq.IDENTITY, me.encode())
        self._sock.connect(connect)

    def send(self, type_: str, meta: dict | None = None, tensors=()) -> None:
        _send(self._sock, self._frames(self.leader, type_, meta, tensors))

    def recv(self, types: tuple[str, ...], what: str | None = None) -> Message:
        awaiting = what or f"{'/'.join(types)} from the leader at {self.endpoint}"
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self._poll(deadline, awaiting):
                frames = self._sock.recv_multipart(copy=False)
                msg = self._accept(self.leader, frames, check_sender=False)
                if msg.type not in types:
                    raise WireError(f"expected {'/'.join(types)} from the leader, got {msg.type}")
                return msg

    def abort(self, reason: str) -> None:
        try:
            self.send("ABORT", {"reason": reason[:2000]})
        except (WireError, zmq.ZMQError):
            pass
