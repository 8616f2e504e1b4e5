"""The leader's gate on connections that have not proven a key yet: at most MAX_UNADMITTED of them at once.

Anyone who can reach the leader's port can open TCP connections and start a CURVE handshake. libzmq gives
each one a decoder whose frames are capped at frames.MAX_WIRE_FRAME (about 1 MiB, channel.py), and drops
it when the handshake has not completed within HANDSHAKE_MS; but libzmq has no limit on how many such
connections it holds at once, so many strangers together could still make the leader hold
(connections x 1 MiB). This gate watches the socket's monitor in a thread of its own (the leader's
main thread may be busy in a training step for seconds):

- every accepted connection is pending until its first message arrives (the channel then knows it as an
  authenticated party's connection: `admitted()` returns those file descriptors; an admitted follower
  always speaks first, since the leader's ROUTER cannot address it before);
- when more than `limit` connections are pending, the newest ones are shut down (shutdown(2) on the
  descriptor, which libzmq then sees as the peer hanging up and cleans up as usual; the descriptor's peer
  address is checked first, so a descriptor that libzmq closed and reused meanwhile is left alone);
- the socket's DISCONNECTED events are forwarded unchanged to `events`, a PAIR socket the channel polls
  exactly as it would poll the monitor itself.

An honest follower whose connection is cut while the gate is full is not harmed: its DEALER reconnects
(libzmq's reconnect interval), and it was not yet a party of the run. The monitor's events carry the
descriptor (ZMQ_EVENT_ACCEPTED and ZMQ_EVENT_DISCONNECTED; libzmq's socket monitor, zmq_socket_monitor(3)).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Collection

import zmq
from zmq.utils.monitor import parse_monitor_message

MAX_UNADMITTED = 16  # pending connections held at once; x MAX_WIRE_FRAME bounds what strangers can make us hold
STOP_POLL_MS = 500


class ConnectionGate:
    """Counts a ROUTER's pending connections in a thread and cuts the newest beyond `limit`."""

    def __init__(
        self,
        ctx: zmq.Context,
        sock: zmq.Socket,
        admitted: Callable[[], Collection[int]],
        limit: int = MAX_UNADMITTED,
    ):
        self.limit = int(limit)
        self.refused = 0
        self.peak_pending = 0
        self._admitted = admitted
        self._pending: dict[int, tuple] = {}  # fd -> (peer address, accepted at)
        self._cut: set[int] = set()
        monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        address = f"inproc://vfl-gate-{id(self):x}"
        self.events = ctx.socket(zmq.PAIR)  # the channel's view of the monitor: DISCONNECTED events only
        self.events.bind(address)
        self._forward = ctx.socket(zmq.PAIR)
        self._forward.connect(address)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, args=(monitor,), name="vfl-connection-gate", daemon=True)
        self._stopping = threading.Event()
        self._thread.start()

    @property
    def pending(self) -> int:
        return len(self._pending) - len(self._cut)

    def _run(self, monitor: zmq.Socket) -> None:
        try:
            while not self._stopping.is_set():
                if not monitor.poll(STOP_POLL_MS, zmq.POLLIN):
                    continue
                frames = monitor.recv_multipart()
                event = parse_monitor_message(frames)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    return
                if event["event"] == zmq.EVENT_ACCEPTED:
                    self._on_accepted(int(event["value"]))
                elif event["event"] == zmq.EVENT_DISCONNECTED:
                    self._pending.pop(int(event["value"]), None)
                    self._cut.discard(int(event["value"]))
                    self._forward.send_multipart(frames)
        except zmq.ZMQError:
            return  # the context is being torn down
        finally:
            monitor.close(0)

    def _on_accepted(self, fd: int) -> None:
        self._pending[fd] = (_peer(fd), time.monotonic())
        for known in _snapshot(self._admitted):
            self._pending.pop(known, None)
            self._cut.discard(known)
        self.peak_pending = max(self.peak_pending, self.pending)
        newest_first = sorted((fd for fd in self._pending if fd not in self._cut), key=lambda f: -self._pending[f][1])
        for extra in newest_first[: max(0, self.pending - self.limit)]:
            if _shut_down(extra, self._pending[extra][0]):
                self.refused += 1
            self._cut.add(extra)

    def close(self) -> None:
        """Stop the thread (the caller disables the socket's monitor first) and close the gate's sockets."""
        self._stopping.set()
        self._thread.join(timeout=5)
        self._forward.close(0)
        self.events.close(0)


def _snapshot(admitted: Callable[[], Collection[int]]) -> set[int]:
    for _ in range(3):  # the channel's thread may add a party while we copy
        try:
            return set(admitted())
        except RuntimeError:
            continue
    return set()


def _peer(fd: int):
    """The remote address of a descriptor (None when it is not a connected socket any more)."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        return s.getpeername()
    except OSError:
        return None
    finally:
        s.detach()  # the descriptor stays libzmq's


def _shut_down(fd: int, peer) -> bool:
    """shutdown(2) the connection on `fd` if it still leads to `peer`; libzmq sees the peer hang up."""
    if peer is None:
        return False
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return False
    try:
        if s.getpeername() != peer:
            return False  # libzmq closed it and the number now names another connection
        s.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        s.detach()
