"""A follower's channel: a DEALER socket over CurveZMQ that talks only to the holder of the pinned leader key.

The follower pins the leader's public key; the channel enforces sequence numbers, the run id and a deadline on every
receive, says why a connection does not come up (reach.py) and waits out a lost connection where the run allows it
(resync.py). It knows nothing about training: the party posts and expects the typed messages of messages.py. What both
ends share is endpoint.py; the leader's end is leader_channel.py.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from vfl.wire.admission import pin
from vfl.wire.curve_keys import FollowerKeys, fingerprint
from vfl.wire.endpoint import (
    ABORT_SEND_MS,
    Endpoint,
    PeerTimeout,
    send_frames,
)
from vfl.wire.frames import (
    MAX_MESSAGE_BYTES,
    Message,
    WireError,
)
from vfl.wire.messages import Abort, Wait, WireMessage
from vfl.wire.reach import EVENTS as REACH_EVENTS
from vfl.wire.reach import ConnectWatch, check_resolves
from vfl.wire.resync import RejoinRequested
from vfl.wire.resync_messages import Rejoin, Resync

_FOLLOWER_EVENTS = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | REACH_EVENTS
)


class FollowerChannel(Endpoint):
    """A follower's DEALER socket: a CURVE client that talks only to the holder of the pinned leader key."""

    def __init__(
        self,
        connect: str,
        me: str,
        keys: FollowerKeys,
        timeout_s: float,
        leader_name: str = "leader",
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        notice: Callable[[str], None] | None = None,
    ):
        check_resolves(connect)  # a name that does not resolve is one line now, not a timeout later (reach.py)
        super().__init__(me, timeout_s, max_message_bytes)
        self.endpoint = connect
        # nothing listening, a leader key that does not match: said through `notice` as the events arrive
        self._reach = ConnectWatch(connect, timeout_s, keys.leader, keys.leader_file, notice)
        self.leader = leader_name
        self.check_claims = False  # the leader's party name is not configured here; its key is
        self._public = keys.public
        self._connected_fd: int | None = None  # the descriptor of the last connection made (a monitor event)
        self._sock = self._make_socket(zmq.DEALER)
        self._watch(self._sock.get_monitor_socket(_FOLLOWER_EVENTS))
        pin(self._sock, keys.public, keys.secret, keys.leader)
        self._sock.connect(connect)

    def post(self, message: WireMessage) -> None:
        """Send a typed message to the leader."""
        self.send(message.TYPE, *message.to_wire())

    def expect(self, *classes: type[WireMessage], what: str | None = None) -> WireMessage:
        """The next message from the leader, which must be of one of `classes`, parsed and checked field by field."""
        msg = self.recv(tuple(c.TYPE for c in classes), what)
        return next(c for c in classes if c.TYPE == msg.type).from_wire(msg)

    def send(self, type_: str, meta: dict | None = None, tensors=()) -> None:
        """Send a message given as its type and meta (the transport's own tests; the parties post typed ones)."""
        if self.reconnecting and self.resync.lost(self.leader):
            self._frames(self.leader, type_, meta, tensors)  # numbered and kept: sent once the leader is back
            return
        wait_s = self._sock.getsockopt(zmq.SNDTIMEO) / 1000  # timeout_s; a best-effort ABORT's ABORT_SEND_MS
        deadline = time.monotonic() + (wait_s if wait_s >= 0 else self.timeout_s)
        self._wait_writable(type_, deadline)
        frames = self._frames(self.leader, type_, meta, tensors)
        # the socket that could take a message a moment ago may have lost its connection since (a CURVE handshake
        # refused just after the poll): a send never blocks, so the connection's events are watched until it goes
        while True:
            if self.reconnecting and self.resync.lost(self.leader):
                return  # lost while waiting to send: kept, sent again after the resynchronisation
            if send_frames(self._sock, frames, wait=False):
                return
            if time.monotonic() >= deadline:
                raise PeerTimeout(f"send timed out after {wait_s:g} s (peer not connected or not reading)")
            self._wait_writable(type_, deadline)

    def _wait_writable(self, type_: str, deadline: float) -> None:
        """Until the socket can take a message (or the deadline), watch the connection's events, so a refused CURVE
        handshake is reported as such at once instead of as a send that timed out."""
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLOUT)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            events = dict(poller.poll(max(1, int((deadline - time.monotonic()) * 1000))))
            if self._monitor in events:
                evt = recv_monitor_message(self._monitor)
                if evt["event"] == zmq.EVENT_DISCONNECTED and self._sock.poll(0, zmq.POLLIN):
                    return  # the peer's last message (an ABORT, say) is read by the next receive
                self._on_event(evt, f"sending {type_}")
            if events.get(self._sock, 0) & zmq.POLLOUT:
                return
            if time.monotonic() >= deadline:
                return  # the send itself reports the timeout

    def recv(self, types: tuple[str, ...], what: str | None = None) -> Message:
        """The next message from the leader, of one of `types`, as a frames.Message (the transport's own tests)."""
        awaiting = what or f"{'/'.join(types)} from the leader at {self.endpoint}"
        deadline = time.monotonic() + self.timeout_s
        self._late_reads = 0
        while True:
            if self._poll(deadline, awaiting, self.leader):
                frames = self._sock.recv_multipart(copy=False)
                self._track(self.leader, frames[0])
                msg = self._accept(self.leader, frames)
                if msg is None:  # a duplicate of a message applied before the resynchronisation
                    continue
                if msg.type == Resync.TYPE:
                    self._on_resync(msg)
                    continue
                if msg.type == Wait.TYPE and Wait.TYPE not in types and self.reconnecting:
                    deadline = time.monotonic() + self.timeout_s  # the leader waits for another party: keepalive
                    continue
                if msg.type not in types:
                    raise WireError(f"expected {'/'.join(types)} from the leader, got {msg.type}")
                return msg

    def _on_event(self, evt: dict, awaiting: str) -> None:
        kind = evt["event"]
        self._reach.on_event(kind)
        if kind == zmq.EVENT_CONNECTED:
            self._connected_fd = evt["value"]
            return
        if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:  # the pinned leader's connection: its bytes in flight are watched
            if self._inflight is not None and self._connected_fd is not None:  # from now on (inflight.py)
                self._inflight.watch(self._connected_fd, self.leader)
            if self.reconnecting and self.resync.lost(self.leader):  # a new connection: ask to resynchronise
                link = self.resync.link(self.leader)
                link.nonce = secrets.token_hex(16)
                send_frames(self._sock, self._resync_frames(self.leader, Resync("hello", link.nonce)))
            return
        if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            raise WireError(
                f"the leader at {self.endpoint} refused this party's key (fingerprint {fingerprint(self._public)}): "
                f"is this follower's public key listed as {self.me} in the leader's network.follower_keys?"
            )
        if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            raise WireError(
                f"the server at {self.endpoint} failed the CURVE handshake: it does not hold the leader key "
                f"pinned in network.leader_key_file, or it replays a recorded session"
            )
        if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            return
        if kind == zmq.EVENT_DISCONNECTED and self.leader not in self._fds and self.reconnecting:
            self.resync.on_loss(self.leader, self.watch_disconnect)  # its connection before the first message
        super()._on_event(evt, awaiting)

    def _on_rejoin(self, peer: str, msg: Message) -> None:
        """The leader's REJOIN (it restarted the run, or a party did): RejoinRequested with its step."""
        raise RejoinRequested(Rejoin.from_wire(msg).step)

    def _on_resync(self, msg: Message) -> None:
        """The leader's RESYNC state answering this party's latest hello (resync.py): this party's state follows,
        then every kept message the leader missed; an answer to an earlier hello is dropped."""
        r = Resync.from_wire(msg)
        link = self.resync.link(self.leader)
        if r.op != "state" or not link.nonce or r.echo != link.nonce or not self.resync.lost(self.leader):
            return
        received, nonce = self._recv_seq.get(self.leader, 0) - 1, link.nonce
        again = self.resync.agreed(self.leader, r.received, r.step, self._send_seq.get(self.leader, 0), received, False)
        send_frames(
            self._sock,
            self._resync_frames(self.leader, Resync("state", nonce, r.nonce, received, self.resync.progress)),
        )
        for kept in again:
            send_frames(self._sock, kept.frames)

    def _why_silent(self) -> str:
        return self._reach.silent()

    def abort(self, reason: str) -> None:
        try:
            self._sock.setsockopt(zmq.SNDTIMEO, ABORT_SEND_MS)
            self.post(Abort(reason))
        except (WireError, ValueError, zmq.ZMQError):
            pass
