"""One end of a CurveZMQ channel: what the leader's ROUTER and a follower's DEALER share.

LeaderChannel (leader_channel.py) and FollowerChannel (follower_channel.py) build on it. The socket's options, per-peer sequence numbers, the run id, the message size limit, a deadline on every receive, and
the loss of an authenticated party's own connection (from the socket's monitor events), with the errors that report
them. With `resync.reconnect_s` > 0 a loss within a run is waited out and resynchronised (resync.py).
The size limit holds before a message is whole too: libzmq holds a multipart message whole before it hands over
its first frame, so each connection's bytes in flight are watched (inflight.py), and one that passes what RCVHWM
messages of the limit allow is cut and reported in one line naming the peer and the limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from vfl.wire.frames import MAX_MESSAGE_BYTES, MAX_WIRE_FRAME, Message, WireError, decode, encode
from vfl.wire.inflight import Cut, InflightGuard
from vfl.wire.messages import Abort, Hello, Welcome
from vfl.wire.resync import Reconnection
from vfl.wire.resync_messages import Rejoin, Resync
from vfl.wire.serve_messages import ServeHello, ServeWelcome

ZERO_COPY_MIN_BYTES = 1 << 16  # below this zmq copies anyway (pyzmq serialization docs)
LINGER_MS = 2000
HEARTBEAT_IVL_MS = 2000  # ZMTP PING every 2 s; a peer silent for 20 s is disconnected (and so lost)
HEARTBEAT_TIMEOUT_MS = 20000
ABORT_SEND_MS = 1000  # a best-effort ABORT waits at most this long for a peer
RCVHWM = 4  # messages queued per connection before libzmq stops reading that peer's socket
LATE_READS = 64  # messages read after a deadline passed, before the timeout is declared anyway
# the messages that come before a run id is agreed (the handshakes of training and serving) or that end any run
UNBOUND_TYPES = (Hello.TYPE, Welcome.TYPE, ServeHello.TYPE, ServeWelcome.TYPE, Abort.TYPE, Rejoin.TYPE)


class PeerAbort(WireError):
    """The peer sent ABORT; the text is its reason."""


class PeerTimeout(WireError):
    """A receive deadline passed."""


class PeerLost(WireError):
    """The connection of an authenticated peer dropped."""


def send_frames(sock: zmq.Socket, frames: list, prefix: list | None = None, wait: bool = True) -> bool:
    """Send `prefix` (a ROUTER's routing id) and a message's frames, large ones without a copy; a send past the
    deadline is PeerTimeout, a peer not connected PeerLost. wait=False: False, and nothing sent, when the socket
    cannot take the first frame at once (the caller watches its connection's events meanwhile); True once sent."""
    parts = (prefix or []) + frames
    copy_flags = [not (isinstance(p, memoryview) and p.nbytes >= ZERO_COPY_MIN_BYTES) for p in parts]
    try:
        for i, (part, copy) in enumerate(zip(parts, copy_flags)):
            flags = zmq.SNDMORE if i < len(parts) - 1 else 0
            if i == 0 and not wait:
                try:
                    sock.send(part, flags | zmq.DONTWAIT, copy=copy)
                except zmq.Again:
                    return False
                continue
            sock.send(part, flags, copy=copy)
        return True
    except zmq.Again:
        raise PeerTimeout(
            f"send timed out after {sock.getsockopt(zmq.SNDTIMEO) / 1000:g} s (peer not connected or not reading)"
        ) from None
    except zmq.ZMQError as e:
        if e.errno == zmq.EHOSTUNREACH:
            raise PeerLost("peer is not connected") from None
        raise


class Endpoint:
    """One end of a channel: its socket's options, sequence numbers, run id, size limit, deadlines and the
    authenticated peers' connections (LeaderChannel and FollowerChannel build on it)."""

    def __init__(self, me: str, timeout_s: float, max_message_bytes: int):
        self._late_reads = 0
        self.me = me
        self.timeout_s = float(timeout_s)
        self.max_message_bytes = int(min(max_message_bytes, MAX_MESSAGE_BYTES))
        self.run = ""
        self._ctx = zmq.Context()  # this channel's own context: its ZAP handler must live on it
        self._send_seq: dict[str, int] = {}
        self._recv_seq: dict[str, int] = {}
        self._fds: dict[str, int] = {}  # authenticated party -> file descriptor of its connection
        self.watch_disconnect = True
        self.check_claims = True
        self.bytes_sent = 0
        self.bytes_received = 0
        self._inflight: InflightGuard | None = None
        self.notice = None  # where what the run survives is reported (the party's log)
        # network.reconnect_s (0: the first loss ends the run): what is kept, lost, waited for, resynchronised
        self.resync = Reconnection(me, 0.0)
        self.resync.timeout_s = self.timeout_s
        self.resync.notice = lambda text: self.notice(text) if self.notice is not None else None

    @property
    def reconnecting(self) -> bool:
        """A lost connection is waited for (network.reconnect_s > 0, inside a run)."""
        return self.resync.reconnect_s > 0 and bool(self.run)

    def _make_socket(self, kind: int) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, LINGER_MS)
        # every frame, the CURVE handshake's included, is capped small: libzmq allocates a frame's claimed size
        # when its header arrives, so this bounds what a stranger's connection can make us hold (frames.py)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_WIRE_FRAME)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        sock.setsockopt(zmq.SNDTIMEO, max(1, int(self.timeout_s * 1000)))  # a send waits no longer than a receive
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
        return sock

    def _watch(self, monitor: zmq.Socket) -> None:
        """Poll the data socket and `monitor`, a socket that delivers the data socket's monitor events."""
        self._monitor = monitor
        self._inflight = InflightGuard(lambda: self.max_message_bytes, RCVHWM, self.me)
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)

    def _frames(self, peer: str, type_: str, meta: dict | None, tensors) -> list:
        seq = self._send_seq.get(peer, 0)
        ack = self._recv_seq.get(peer, 0) - 1
        frames = encode(type_, self.me, self.run, seq, meta, [np.asarray(t) for t in tensors], ack=ack)
        if self.reconnecting:  # kept until the peer acknowledges it: sent again after a lost connection
            self.resync.keep(peer, seq, type_, meta, frames)
        self._send_seq[peer] = seq + 1  # only once the message exists: a failed encode uses up no number
        self.bytes_sent += sum(memoryview(f).nbytes for f in frames)
        return frames

    def _resync_frames(self, peer: str, message: Resync) -> list:
        """A RESYNC's frames: inside the run, outside the sequence numbers it re-establishes."""
        frames = encode(message.TYPE, self.me, self.run, 0, *message.to_wire(), ack=self._recv_seq.get(peer, 0) - 1)
        self.bytes_sent += sum(memoryview(f).nbytes for f in frames)
        return frames

    def _accept(self, peer: str, frames: list) -> Message | None:
        """The checked message (None: a duplicate of one already applied, dropped after a resynchronisation)."""
        if self._inflight is not None:
            self._inflight.taken(self._fds.get(peer), peer)
        size = sum(memoryview(f).nbytes for f in frames)
        self.bytes_received += size
        if size > self.max_message_bytes:
            raise WireError(
                f"a message of {size} bytes from {peer} exceeds this run's limit of {self.max_message_bytes} bytes"
            )
        msg = decode(frames, peer)
        if self.check_claims and msg.claimed != peer:
            raise WireError(f"a message authenticated as {peer} claims to be from {msg.claimed!r}; refused")
        if msg.type == Rejoin.TYPE:  # outside any run and numbering: only a restarted run sends it (resync.py)
            self._on_rejoin(peer, msg)
        if msg.type == Resync.TYPE:  # bound to the run, outside the numbering it re-establishes (resync.py)
            if not self.reconnecting or msg.run != self.run:
                raise WireError(f"RESYNC from {peer} outside a run that waits for lost connections; refused")
            return msg
        want = self._recv_seq.get(peer, 0)
        if msg.seq != want and not self.reconnecting:
            raise WireError(
                f"{msg.type} from {peer} has sequence number {msg.seq}, expected {want} (replayed or lost message)"
            )
        if msg.type not in UNBOUND_TYPES and msg.run != self.run:
            raise WireError(f"{msg.type} from {peer} belongs to run {msg.run!r}, this run is {self.run!r}")
        if self.reconnecting:
            try:
                taken = self.resync.sequence(peer, msg.seq, want)
            except WireError:
                raise WireError(
                    f"{msg.type} from {peer} has sequence number {msg.seq}, expected {want} (replayed or lost message)"
                ) from None
            self.resync.acknowledged(peer, msg.ack, self._send_seq.get(peer, 0))
            if taken is None:
                return None
            want = taken
            self.resync.heard(peer)
        self._recv_seq[peer] = want + 1
        if msg.type == Abort.TYPE:
            try:
                reason = Abort.from_wire(msg).reason
            except WireError:
                reason = "no reason given"
            raise PeerAbort(f"{peer} aborted: {reason}")
        return msg

    def _on_rejoin(self, peer: str, msg: Message) -> None:
        """A REJOIN from `peer`: only the leader sends it (a follower's is refused here)."""
        raise WireError(f"REJOIN from {peer}: only the leader restarts a run; refused")

    def _track(self, peer: str, frame: zmq.Frame) -> None:
        """Remember which connection an authenticated peer's messages arrive on (once)."""
        if peer not in self._fds:
            self._drain_events("the first message")  # stale events of a closed fd that this connection reuses
            self._fds[peer] = frame.get(zmq.SRCFD)
            if self._inflight is not None:
                self._inflight.watch(self._fds[peer], peer)

    def _drain_events(self, awaiting: str) -> None:
        while self._monitor.poll(0):
            self._raise_cuts()
            self._on_event(recv_monitor_message(self._monitor), awaiting)

    def _raise_cuts(self) -> None:
        """WireError naming the party whose connection the in-flight guard cut (a message past the limit)."""
        for cut in self._inflight.cuts() if self._inflight is not None else ():
            if not cut.party:
                self._stranger_cut(cut)
                continue
            error = WireError(
                f"{cut.label} sent a message larger than this run's limit of {self.max_message_bytes} bytes "
                f"({cut.arrived} bytes of it had arrived): its connection was cut before the message was held whole"
            )
            error.peer = cut.label
            raise error

    def _stranger_cut(self, cut: Cut) -> None:
        """A connection no message has named yet was cut for a message past the limit (the leader's hook)."""

    def _on_event(self, evt: dict, awaiting: str) -> None:
        if evt["event"] == zmq.EVENT_DISCONNECTED and self._inflight is not None:
            self._inflight.forget(evt["value"])
        if evt["event"] == zmq.EVENT_DISCONNECTED:
            lost = [p for p, fd in self._fds.items() if fd == evt["value"]]
            for p in lost:
                del self._fds[p]
                if self.watch_disconnect and self.resync.on_loss(p, self.reconnecting):
                    self._lost(p)
                    lost = [q for q in lost if q != p]
            if lost and self.watch_disconnect:
                raise PeerLost(f"connection lost: {lost[0]} disconnected while awaiting {awaiting}")

    def _lost(self, peer: str) -> None:
        """`peer`'s connection dropped and is waited for (the leader forgets its route)."""

    def _poll(self, deadline: float, awaiting: str, peer: str | None = None) -> bool:
        """Wait for socket input until the deadline; True when the data socket is readable. With reconnect_s, a
        receive awaited from a lost or silent `peer` waits for it up to reconnect_s instead (resync.py)."""
        self._check_health()
        self._raise_cuts()
        wake = float("inf")
        if self.reconnecting:
            deadline = self.resync.deadline(peer, deadline, self.watch_disconnect)
            if self._waiting_for_someone():
                self._while_waiting()
                wake = 1.0  # the waits are counted, and the others kept alive, about once a second
        remaining = deadline - time.monotonic()
        if remaining <= 0 and self._late_reads < LATE_READS and self._sock.poll(0, zmq.POLLIN):
            self._late_reads += 1  # input that already arrived is read before a timeout is declared (bounded)
            return True
        if remaining <= 0:
            if self.reconnecting:
                self.resync.ran_out(peer)  # the wait for a lost peer ran out between deadline()'s clock and this one
            raise PeerTimeout(
                f"timed out after {self.timeout_s:g} s awaiting {awaiting} (network.timeout_s){self._why_silent()}"
            )
        events = dict(self._poller.poll(max(1, int(min(remaining, wake) * 1000))))
        if self._sock in events:  # messages that arrived before a disconnect are read first (an ABORT, say)
            return True
        if self._monitor in events:
            self._raise_cuts()  # a cut connection's DISCONNECTED event is reported as the cut
            self._on_event(recv_monitor_message(self._monitor), awaiting)
        return False

    def _why_silent(self) -> str:
        return ""

    def _waiting_for_someone(self) -> bool:
        return any(link.lost_since is not None or link.silent_since is not None for link in self.resync.links.values())

    def _while_waiting(self) -> None:
        """Called about once a second while a lost peer is waited for (the leader keeps the others' deadlines)."""

    def _check_health(self) -> None:
        pass

    def close(self) -> None:
        if self._inflight is not None:
            self._inflight.stop()
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._unwatch()
        self._sock.close()
        self._stop_auth()
        self._ctx.term()

    def _unwatch(self) -> None:
        self._monitor.close(0)

    def _stop_auth(self) -> None:
        pass


def blamed(peer: str, step: Callable):
    """step(), whose WireError (an ABORT included) is `peer`'s message's: it names that peer (error.peer); a lost
    connection or a deadline is no message's fault."""
    try:
        return step()
    except (PeerLost, PeerTimeout):
        raise
    except WireError as e:
        e.peer = e.peer or peer
        raise
