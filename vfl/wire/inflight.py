"""What libzmq may hold of messages in flight on one connection, bounded: a connection that passes it is cut.

libzmq hands a multipart message to the application only whole (its pipe publishes a message's frames when the last
one arrives), and ZMQ_MAXMSGSIZE caps each frame, not the message: a peer that sends 1 GiB as 1024 frames of 1 MiB
makes the receiver hold 1 GiB before the application can read, or refuse, its first frame. RCVHWM stops libzmq
reading a connection while that many whole messages wait, but a message in progress never stops it. So a thread
reads, every WATCH_S (IDLE_WATCH_S while no count moves), how many bytes libzmq has read from each watched TCP connection (the kernel's
tcpi_bytes_received less what still waits in the socket's receive queue, FIONREAD) and compares it with the count
when the application last took a message from it. More than `allowance(limit)` (RCVHWM whole messages of at most
`limit` bytes and one in progress, a frame being decoded, and the heartbeats since) means a message larger than the
limit is arriving: the connection is shut down (shutdown(2); libzmq drops the message in progress and frees it)
and the channel reports it in one line naming the peer and the limit (endpoint.py). What the receiver holds is then
at most the allowance plus what arrives within one IDLE_WATCH_S and one WATCH_S, whatever the message's size.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from vfl.wire.frames import MAX_WIRE_FRAME
from vfl.wire.gate import peer_address, shut_down_if_peer

WATCH_S = 0.005  # between two reads of the counters while a watched connection's count moves
IDLE_WATCH_S = 0.025  # while none moved since the last read
SLACK_BYTES = 2 * MAX_WIRE_FRAME  # a frame being decoded, with CURVE's and ZMTP's framing of every frame
HEARTBEAT_BYTES_PER_S = 256  # ZMTP PING and PONG commands (about 60 bytes each, both ways every 2 s), generously
_TCP_INFO_BYTES = 232
_BYTES_RECEIVED_AT = 128  # struct tcp_info's tcpi_bytes_received (Linux >= 4.1, RFC 4898)


def allowance(limit: int, queued: int, idle_s: float) -> int:
    """The bytes a connection may have delivered to libzmq since the application last took a message from it:
    `queued` whole messages and one in progress, each of at most `limit` bytes, the slack of a frame, and heartbeats."""
    return (queued + 1) * int(limit) + SLACK_BYTES + int(HEARTBEAT_BYTES_PER_S * max(0.0, idle_s))


def bytes_read(fd: int) -> int | None:
    """The bytes libzmq has read from the TCP connection on `fd` (None: not a TCP socket, or no counter here)."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
        if len(info) < _BYTES_RECEIVED_AT + 8:
            return None
        (received,) = struct.unpack_from("=Q", info, _BYTES_RECEIVED_AT)
        (waiting,) = struct.unpack("=i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))
        return int(received) - int(waiting)
    except OSError:
        return None
    finally:
        s.detach()  # the descriptor stays libzmq's


@dataclass
class _Watched:
    peer: object  # the remote address: a descriptor libzmq closed and reused is left alone
    label: str  # the party, once its first message named it; its address before
    taken_at: int  # bytes read when the application last took a message (or when the watch began)
    taken_time: float
    party: bool = False
    last: int = -1  # the count at the thread's last read


@dataclass(frozen=True)
class Cut:
    """A connection shut down for passing its allowance: who it was (a party, or an address), and what arrived."""

    label: str
    party: bool
    arrived: int


class InflightGuard:
    """Watches the TCP connections of one socket in a thread; `cuts()` returns the connections it shut down."""

    def __init__(self, limit: Callable[[], int], queued: int, name: str):
        self._limit = limit
        self._queued = int(queued)
        self._watched: dict[int, _Watched] = {}
        self._lock = threading.Lock()
        self._cuts: list[Cut] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"vfl-inflight-{name}", daemon=True)
        self._thread.start()

    def watch(self, fd: int, label: str | None = None) -> None:
        """Start watching the connection on `fd` (from its acceptance or connection on)."""
        fd = int(fd)
        peer = peer_address(fd)
        now = bytes_read(fd)
        if peer is None or now is None:
            return  # not a TCP connection (or gone already): nothing to watch
        with self._lock:
            self._watched[fd] = _Watched(peer, label or _address(peer), now, time.monotonic(), label is not None)

    def taken(self, fd: int | None, party: str) -> None:
        """The application took a message from `party`'s connection on `fd`: its count starts again."""
        if fd is None:
            return
        now = bytes_read(int(fd))
        with self._lock:
            w = self._watched.get(int(fd))
            if w is None:
                return
            w.label, w.party = party, True
            if now is not None:
                w.taken_at, w.taken_time = now, time.monotonic()

    def forget(self, fd: int) -> None:
        with self._lock:
            self._watched.pop(int(fd), None)

    def cuts(self) -> list[Cut]:
        """The connections cut since the last call."""
        with self._lock:
            out, self._cuts = self._cuts, []
        return out

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        pause = IDLE_WATCH_S
        while not self._stopping.wait(pause):
            with self._lock:
                watched = list(self._watched.items())
            limit = self._limit()
            pause = IDLE_WATCH_S
            for fd, w in watched:
                now = bytes_read(fd)
                if now is None:
                    continue
                if now != w.last:
                    w.last, pause = now, WATCH_S
                arrived = now - w.taken_at
                if arrived <= allowance(limit, self._queued, time.monotonic() - w.taken_time):
                    continue
                if not shut_down_if_peer(fd, w.peer):
                    with self._lock:
                        self._watched.pop(fd, None)
                    continue
                with self._lock:
                    self._watched.pop(fd, None)
                    self._cuts.append(Cut(w.label, w.party, arrived))


def _address(peer) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
