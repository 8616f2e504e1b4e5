"""The leader's gate on connections that have not proven a key yet: a bounded number of them at once.

Anyone who can reach the leader's port can open TCP connections and start a CURVE handshake. libzmq gives
each one a decoder whose frames are capped at frames.MAX_WIRE_FRAME (about 1 MiB, leader_channel.py), and drops
it when the handshake has not completed within HANDSHAKE_MS; but libzmq has no limit on how many such
connections it holds at once, so many strangers together could still make the leader hold
(connections x 1 MiB). This gate watches the socket's monitor in a thread of its own (the leader's
main thread may be busy in a training step for seconds):

- every accepted connection is pending until its first message arrives (the channel then knows it as an
  authenticated party's connection: `admitted()` returns those file descriptors; an admitted follower
  always speaks first, since the leader's ROUTER cannot address it before, and it does so within a few
  round trips of connecting);
- at most `per_host` connections from one address group (an IPv4 /24, an IPv6 /48) and `limit` in all are pending
  at once; beyond that pending connections are shut down (shutdown(2) on the descriptor, which libzmq then sees as
  the peer hanging up and cleans up as usual; the descriptor's peer address is checked first, so one that libzmq
  closed and reused meanwhile is left alone), chosen at random within the over-full group, and beyond the total from
  the largest group. An honest follower is pending for a few round trips (it speaks as soon as its handshake
  completes), alone in its group unless it shares a stranger's network, so a stranger must hold connections from
  more than `limit` groups to reach it at all. Two earlier rules fell to a hostile review: newest-first let a
  stranger reopening its connections lock a follower out on loopback; oldest-first did the same from two addresses
  over a 40 ms round trip (a follower's handshake in flight was always the oldest);
- connections the channel refuses (a duplicate of a connected party, an impostor) are shut down a moment
  after their ABORT is queued (`cut_later`), so they do not stay pending;
- DISCONNECTED events of admitted connections are forwarded to `events`, a PAIR socket the channel polls
  as it would poll the monitor itself, without ever blocking this thread (a connect/close flood by strangers
  forwards nothing);
- if the thread stops on an unexpected error, `failed` says why and the channel stops the run (fail closed);
- the first CURVE handshake that fails on cryptography (a client that sealed its greeting to another key than this
  leader's: a follower whose pinned leader key is not this leader's) is named once through `on_crypto_failure`; the
  rest are counted in `crypto_failures` (a stranger cannot flood the log). ZAP never sees such a client: its key is
  inside the box this leader cannot open (admission.py names the keys it refuses).

An honest follower whose connection is cut reconnects by itself (its DEALER's reconnect interval). The monitor's
events carry the descriptor (ZMQ_EVENT_ACCEPTED and ZMQ_EVENT_DISCONNECTED; zmq_socket_monitor(3)).
"""

from __future__ import annotations

import collections
import random
import socket
import threading
import time
from collections.abc import Callable, Collection

import zmq
from zmq.utils.monitor import parse_monitor_message

MAX_UNADMITTED = 64  # pending connections held at once; x MAX_WIRE_FRAME bounds what strangers can make us hold
MAX_UNADMITTED_PER_HOST = 8  # from one address group (an IPv4 /24, an IPv6 /48)
CUT_REFUSED_AFTER_S = 1.0  # a refused connection's ABORT is on its way by then
POLL_MS = 100


class ConnectionGate:
    """Counts a ROUTER's pending connections in a thread and cuts the oldest beyond the limits."""

    def __init__(
        self,
        ctx: zmq.Context,
        sock: zmq.Socket,
        admitted: Callable[[], Collection[int]],
        limit: int = MAX_UNADMITTED,
        per_host: int = MAX_UNADMITTED_PER_HOST,
        on_accepted: Callable[[int], None] | None = None,
        on_crypto_failure: Callable[[], None] | None = None,
    ):
        self.limit, self.per_host = int(limit), int(per_host)
        self.crypto_failures = 0  # CURVE handshakes that failed on a box this leader could not open
        self._on_crypto_failure = on_crypto_failure
        self.refused = 0
        self.peak_pending = 0
        self.failed: str | None = None
        self._admitted = admitted
        self._on_accept = on_accepted  # told each accepted descriptor, in this thread (the channel's in-flight guard)
        self._known_admitted: set[int] = set()
        self._pending: dict[int, tuple] = {}  # fd -> (peer address, accepted at), oldest first
        self._cut: set[int] = set()
        self._later: list[tuple[float, int]] = []  # (when, fd) of refused connections to cut
        self._later_lock = threading.Lock()
        self._outbox: collections.deque[list[bytes]] = collections.deque()
        self._rng = random.Random()  # which pending connection goes: not predictable by a stranger
        monitor = sock.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        )
        address = f"inproc://vfl-gate-{id(self):x}"
        self.events = ctx.socket(zmq.PAIR)  # the channel's view of the monitor: admitted DISCONNECTED events only
        self.events.bind(address)
        self._forward = ctx.socket(zmq.PAIR)
        self._forward.setsockopt(zmq.SNDHWM, 0)
        self._forward.connect(address)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(monitor,), name="vfl-connection-gate", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return len(self._pending) - len(self._cut & set(self._pending))

    def cut_later(self, fd: int) -> None:
        """Shut down the connection on `fd` in CUT_REFUSED_AFTER_S (the channel refused it; its ABORT is queued), if
        the descriptor still leads to the peer it leads to now."""
        with self._later_lock:
            self._later.append((time.monotonic() + CUT_REFUSED_AFTER_S, int(fd), peer_address(int(fd))))

    def _run(self, monitor: zmq.Socket) -> None:
        try:
            while not self._stopping.is_set():
                self._flush()
                self._cut_due()
                if not monitor.poll(POLL_MS, zmq.POLLIN):
                    continue
                frames = monitor.recv_multipart()
                event = parse_monitor_message(frames)
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    return
                fd = int(event["value"])
                if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:  # the value is the error, not a descriptor
                    self._on_handshake_failed(fd)
                elif event["event"] == zmq.EVENT_ACCEPTED:
                    self._on_accepted(fd)
                elif event["event"] == zmq.EVENT_DISCONNECTED:
                    self._on_disconnected(fd, frames)
        except zmq.ContextTerminated:
            return
        except Exception as e:  # fail closed: the channel stops the run rather than run without the gate
            self.failed = f"{type(e).__name__}: {e}"
        finally:
            monitor.close(0)

    def _on_handshake_failed(self, error: int) -> None:
        if error != zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
            return
        self.crypto_failures += 1
        if self.crypto_failures == 1 and self._on_crypto_failure is not None:
            self._on_crypto_failure()

    def _refresh_admitted(self) -> set[int]:
        for _ in range(3):  # the channel's thread may add a party while we copy
            try:
                self._known_admitted = set(self._admitted())
                break
            except RuntimeError:
                continue
        return self._known_admitted  # on failure, the last good copy (never an empty set by accident)

    def _on_accepted(self, fd: int) -> None:
        if self._on_accept is not None:
            self._on_accept(fd)
        self._pending.pop(fd, None)
        self._cut.discard(fd)
        self._pending[fd] = (peer_address(fd), time.monotonic())
        for known in self._refresh_admitted():
            self._pending.pop(known, None)
        live = [f for f in self._pending if f not in self._cut]
        self.peak_pending = max(self.peak_pending, len(live))
        groups: dict = collections.defaultdict(list)
        for f in live:
            groups[address_group(self._pending[f][0])].append(f)
        victims = []
        for fds in groups.values():  # at most per_host from one address group
            victims += self._rng.sample(fds, max(0, len(fds) - self.per_host))
        for f in victims:
            groups[address_group(self._pending[f][0])].remove(f)
        over = sum(len(v) for v in groups.values()) - self.limit
        while over > 0:  # beyond the total: from the largest group, at random within it
            largest = max(groups.values(), key=len)
            victim = largest.pop(self._rng.randrange(len(largest)))
            victims.append(victim)
            over -= 1
        for f in victims:
            if shut_down_if_peer(f, self._pending[f][0]):
                self.refused += 1
            self._cut.add(f)

    def _on_disconnected(self, fd: int, frames: list[bytes]) -> None:
        was_pending = self._pending.pop(fd, None) is not None
        self._cut.discard(fd)
        if fd in self._refresh_admitted() or not was_pending:
            self._outbox.append(frames)  # the channel decides whether it was a party's connection
        self._flush()

    def _flush(self) -> None:
        while self._outbox:
            try:
                self._forward.send_multipart(self._outbox[0], flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            self._outbox.popleft()

    def _cut_due(self) -> None:
        now = time.monotonic()
        with self._later_lock:
            due = [(fd, peer) for when, fd, peer in self._later if when <= now]
            self._later = [entry for entry in self._later if entry[0] > now]
        for fd, peer in due:
            if fd in self._refresh_admitted():
                continue  # the number now belongs to a party's connection
            if shut_down_if_peer(fd, peer):  # only if it still leads to the refused connection's peer
                self.refused += 1
            self._cut.add(fd)

    def close(self) -> None:
        """Stop the thread (the caller disables the socket's monitor first) and close the gate's sockets."""
        self._stopping.set()
        self._thread.join(timeout=5)
        self._forward.close(0)
        self.events.close(0)


def address_group(peer) -> object:
    """The network a peer address belongs to, for the per-group cap: its IPv4 /24, its IPv6 /48 (one site's
    allocation: a stranger holding a /48 would otherwise have 65,536 /64s), or the address itself."""
    import ipaddress

    host = peer[0] if isinstance(peer, tuple) and peer else peer
    try:
        ip = ipaddress.ip_address(str(host).split("%")[0])
    except ValueError:
        return host
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ipaddress.ip_network(f"{ip}/{24 if ip.version == 4 else 48}", strict=False)


def peer_address(fd: int):
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


def shut_down_if_peer(fd: int, peer) -> bool:
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
