"""A user-space TCP relay that behaves like a WAN link: propagation delay, a bandwidth limit and jitter per direction.

Every connection accepted on `listen` is piped to `to`, each direction through its own `LinkDirection`: a chunk read
at time t leaves the bottleneck when the link is free and its bytes are serialised (bytes x 8 / bandwidth, a
departure-time schedule: the link carries one chunk after another), then arrives one propagation delay later (RTT / 2,
plus a jitter drawn uniformly in [-jitter, +jitter] and clamped so that no chunk arrives before the one read before it:
TCP's bytes stay in order, as netem's jitter does with a rate limit). At most `buffer_bytes` wait in a direction (the
chunks on the wire and queued for it); a reader that finds it full stops reading, so the sender's TCP window closes
(back-pressure, bounded memory). The kernel's qdiscs (`tc netem`) need root and are missing on many CI runners; this
needs neither, at the price of Python's speed (a few hundred MB/s a direction on one core, enough for 1 Gbit/s).

    with Relay(("127.0.0.1", leader_port), LinkSpec(rtt_ms=40, bandwidth_mbit=100)) as relay:
        connect the follower to relay.endpoint ("tcp://127.0.0.1:<port>"); relay.bytes_up / relay.bytes_down

`python -m vfl.netlink relay --listen HOST:PORT --to HOST:PORT --rtt-ms 40 --bandwidth-mbit 100 --jitter-ms 5` runs one
as a process until SIGINT / SIGTERM.

Faults, for the tests and benches of a run that must survive them (vfl/netlink/faults.py): `drop_all(down_s)` resets
every relayed connection now and refuses new ones for down_s (a link outage); `drop_after(up_bytes=N)` (or
`down_bytes`) does so once N bytes crossed that way, cutting the chunk that crosses N after its N-th byte (a reset in
the middle of a message); `stall(s)` holds every byte for s seconds (a peer that hears nothing, its connection open);
`random_faults(...)` draws such faults from a seed. `drops` counts the drops, `dropped` is set at each (an event a test
waits on instead of sleeping), `connections` counts the connections accepted (a reconnection adds one).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass

from vfl.netlink.faults import Faults

READ_BYTES = 64 * 1024  # one chunk: a read of at most this much is serialised and delayed as a unit
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class LinkSpec:
    """A link: round-trip propagation delay, bandwidth each way (0: unlimited), jitter of each one-way delay."""

    rtt_ms: float = 0.0
    bandwidth_mbit: float = 0.0
    jitter_ms: float = 0.0
    buffer_bytes: int = 0  # per direction; 0: the bandwidth-delay product plus 4 MiB

    def __post_init__(self):
        for name in ("rtt_ms", "bandwidth_mbit", "jitter_ms"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0 <= v < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {name}={v!r}")
        if self.jitter_ms > self.rtt_ms / 2:
            raise ValueError(
                f"jitter_ms must be at most the one-way delay rtt_ms / 2 = {self.rtt_ms / 2:g}, got "
                f"jitter_ms={self.jitter_ms!r}"
            )
        if not isinstance(self.buffer_bytes, int) or isinstance(self.buffer_bytes, bool) or self.buffer_bytes < 0:
            raise ValueError(f"buffer_bytes must be an integer >= 0, got buffer_bytes={self.buffer_bytes!r}")

    @property
    def one_way_s(self) -> float:
        return self.rtt_ms / 2000.0

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_mbit * 1e6 / 8 if self.bandwidth_mbit > 0 else float("inf")

    @property
    def buffer(self) -> int:
        if self.buffer_bytes:
            return max(self.buffer_bytes, READ_BYTES)
        bdp = 0 if self.bandwidth_mbit == 0 else int(self.bytes_per_s * self.rtt_ms / 1000)
        return bdp + (4 << 20)

    def describe(self) -> str:
        if self.rtt_ms == 0 and self.bandwidth_mbit == 0:
            return "no delay, unlimited"
        bw = f"{self.bandwidth_mbit:g} Mbit/s" if self.bandwidth_mbit else "unlimited"
        jit = f" +-{self.jitter_ms:g} ms jitter" if self.jitter_ms else ""
        return f"{self.rtt_ms:g} ms RTT{jit}, {bw}"


class LinkDirection:
    """One direction of one connection: chunks scheduled to arrive, at most `spec.buffer` bytes held."""

    def __init__(self, spec: LinkSpec, rng: random.Random, count):
        self.spec, self.rng, self.count = spec, rng, count  # count(n): add n delivered bytes to the relay's total
        self.queue: deque[tuple[float, bytes]] = deque()  # (arrival time, chunk); b"" = end of stream
        self.held = 0
        self.link_free = 0.0  # when the bottleneck has serialised every chunk scheduled so far
        self.last_arrival = 0.0
        self.cond = threading.Condition()
        self.closed = False

    def schedule(self, chunk: bytes, now: float) -> float:
        """The arrival time of a chunk read at `now` (b"": the sender's end of stream, after every byte before it)."""
        start = max(now, self.link_free)
        self.link_free = start + len(chunk) / self.spec.bytes_per_s
        delay = self.spec.one_way_s
        if self.spec.jitter_ms:
            delay += self.rng.uniform(-self.spec.jitter_ms, self.spec.jitter_ms) / 1000.0
        self.last_arrival = max(self.link_free + delay, self.last_arrival)  # never ahead of an earlier chunk
        return self.last_arrival

    def put(self, chunk: bytes) -> bool:
        """Queue a chunk once there is room (back-pressure); False when the direction was closed meanwhile."""
        with self.cond:
            while not self.closed and self.held and self.held + len(chunk) > self.spec.buffer:
                self.cond.wait(0.5)
            if self.closed:
                return False
            self.queue.append((self.schedule(chunk, time.monotonic()), chunk))
            self.held += len(chunk)
            self.cond.notify_all()
            return True

    def take(self) -> bytes | None:
        """The next chunk at its arrival time (b"": end of stream); None once closed."""
        with self.cond:
            while not self.closed and not self.queue:
                self.cond.wait(0.5)
            if self.closed:
                return None
            due, chunk = self.queue[0]
        while (wait := due - time.monotonic()) > 0:
            time.sleep(min(wait, 0.5))
            if self.closed:
                return None
        with self.cond:
            self.queue.popleft()
            self.held -= len(chunk)
            self.cond.notify_all()
        return chunk

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class Relay:
    """Listens on `listen` (default: a free port on 127.0.0.1) and relays each connection to `target` over `spec`'s
    link, in threads; a context manager (start on enter, close on exit). bytes_up: client to target, bytes_down:
    target to client, both as delivered, over all connections."""

    def __init__(
        self,
        target: tuple[str, int],
        spec: LinkSpec = LinkSpec(),
        listen: tuple[str, int] = ("127.0.0.1", 0),
        seed: int | None = None,
    ):
        self.target, self.spec = target, spec
        self.rng = random.Random(seed)
        self.bytes_up = 0
        self.bytes_down = 0
        self.connections = 0
        self.faults = Faults(self)  # drops, outages, stalls (faults.py)
        self._pairs: set[_Pair] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._server = socket.create_server(listen)
        self._server.settimeout(0.2)
        self.address = self._server.getsockname()[:2]
        self._acceptor = threading.Thread(target=self._accept, name="relay-accept", daemon=True)

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.address[0]}:{self.address[1]}"

    def start(self) -> Relay:
        self._acceptor.start()
        return self

    def __enter__(self) -> Relay:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, cut every relayed connection, and wait for the threads (each wakes within 0.5 s)."""
        self._stop.set()
        self._server.close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for s in sockets:
            _shut(s, socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout_s
        for t in [self._acceptor, *threads]:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        for s in sockets:
            s.close()

    # -- faults (faults.py schedules them) -----------------------------------------------------------
    @property
    def drops(self) -> int:
        return self.faults.drops

    @property
    def dropped(self) -> threading.Event:
        return self.faults.dropped

    def drop_all(self, down_s: float = 0.0) -> None:
        """Reset every relayed connection now, and refuse new connections for down_s seconds (0: none refused)."""
        self.faults.drop_all(down_s)

    def drop_after(self, up_bytes: int | None = None, down_bytes: int | None = None, down_s: float = 0.0) -> None:
        """Reset every connection once `up_bytes` crossed client to target in all (or `down_bytes` the other way),
        in the middle of the chunk that crosses it; then refuse connections for down_s seconds."""
        self.faults.drop_after(up_bytes, down_bytes, down_s)

    def stall(self, seconds: float) -> None:
        """Deliver nothing either way for `seconds` (connections stay open; bytes wait, in order)."""
        self.faults.stall(seconds)

    def _reset_all(self) -> None:
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.cut(reset=True)

    def _add(self, n: int, up: bool) -> None:
        with self._lock:
            if up:
                self.bytes_up += n
            else:
                self.bytes_down += n

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            if self.faults.refusing():  # an outage: the client sees its connection closed and retries
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
            except OSError:
                client.close()  # nothing listens there yet: the client sees a closed connection and retries
                continue
            for s in (client, upstream):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._stop.is_set():
                    client.close()
                    upstream.close()
                    return
                self.connections += 1
                self._sockets |= {client, upstream}
                pair = _Pair(client, upstream, self)
                self._pairs.add(pair)
                self._threads = [t for t in self._threads if t.is_alive()] + pair.start()  # ended pairs' threads go

    def _forget(self, pair: _Pair, *sockets: socket.socket) -> None:
        with self._lock:
            self._pairs.discard(pair)
            for s in sockets:
                self._sockets.discard(s)
                s.close()


class _Pair:
    """A relayed connection: for each direction a reader (schedules chunks) and a writer (delivers them on time)."""

    def __init__(self, client: socket.socket, upstream: socket.socket, relay: Relay):
        self.client, self.upstream, self.relay = client, upstream, relay
        self.directions = [
            (
                client,
                upstream,
                LinkDirection(relay.spec, random.Random(relay.rng.random()), lambda n: relay._add(n, True)),
                True,
            ),
            (
                upstream,
                client,
                LinkDirection(relay.spec, random.Random(relay.rng.random()), lambda n: relay._add(n, False)),
                False,
            ),
        ]
        self.ended = 0  # writers done
        self.lock = threading.Lock()

    def start(self) -> list[threading.Thread]:
        threads = []
        for src, dst, link, up in self.directions:
            threads.append(threading.Thread(target=self._read, args=(src, link), daemon=True))
            threads.append(threading.Thread(target=self._write, args=(dst, link, up), daemon=True))
        for t in threads:
            t.start()
        return threads

    def _read(self, src: socket.socket, link: LinkDirection) -> None:
        while True:
            try:
                chunk = src.recv(READ_BYTES)
            except OSError:
                self.cut()
                return
            if not link.put(chunk) or not chunk:  # b"": the sender closed its side; the writer half-closes after it
                return

    def _write(self, dst: socket.socket, link: LinkDirection, up: bool) -> None:
        faults = self.relay.faults
        while (chunk := link.take()) is not None:
            if not chunk:
                _shut(dst, socket.SHUT_WR)
                break
            faults.hold()  # a stall: nothing is delivered until it ends
            cut_at = faults.cut_within(len(chunk), up)  # a drop due inside this chunk: its first bytes go, then reset
            try:
                dst.sendall(chunk if cut_at is None else chunk[:cut_at])
            except OSError:
                self.cut()
                return
            link.count(len(chunk) if cut_at is None else cut_at)
            if cut_at is not None:
                faults.fire()
                return
        with self.lock:
            self.ended += 1
            done = self.ended == 2
        if done:  # both directions ended cleanly
            self.cut()

    def cut(self, reset: bool = False) -> None:
        """Close the connection both ways (a finished exchange, or with reset an RST to both ends, as a middlebox
        that drops a connection sends): wake every thread of this pair."""
        for _, _, link, _ in self.directions:
            link.close()
        for s in (self.client, self.upstream):
            if reset:
                _reset(s)
            else:
                _shut(s, socket.SHUT_RDWR)
        self.relay._forget(self, self.client, self.upstream)


def _reset(s: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0): the peer sees its connection reset at once."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.shutdown(socket.SHUT_RD)  # wakes this pair's reader; the close below sends the RST
    except OSError:
        pass
    s.close()


def _shut(s: socket.socket, how: int) -> None:
    try:
        s.shutdown(how)
    except OSError:
        pass


def parse_hostport(text: str, what: str) -> tuple[str, int]:
    """'HOST:PORT' (or tcp://HOST:PORT) as (host, port); a clear error otherwise."""
    raw = text[len("tcp://") :] if text.startswith("tcp://") else text
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{what} must be HOST:PORT with a port in 0..65535, got {text!r}")
    return host.strip("[]"), int(port)
