"""Who may hold the leader's HTTP endpoint, and for how long: connection slots (in all and per client address), each
request's whole read deadline and byte budget, and which waiting connection a newcomer displaces when slots are full.

A connection is *reading* from its accept (or from the end of its previous answer) until its request, headers and
body, has arrived; then it is *working* (being scored, or answering) until its answer is written. A reading
connection must deliver its whole request within `read_timeout_s` of the moment it started reading, however it
spreads the bytes (a deadline per request, not per recv), and at most `MAX_HEAD_BYTES` of request line and headers
plus the body its Content-Length declares; past either it gets one best-effort 408 or 431 and is closed.

When a newcomer finds its address holding `max_per_address` connections, it takes the slot of that address's
longest-reading connection; when it finds `max_connections` in all, it takes the slot of the longest-reading
connection of the address holding the most. Only a reading connection is displaced (closed without an answer: it
has sent no whole request); a working one never is. With no reading connection to displace the newcomer gets 503.
So slow or idle clients hold slots only until a client that sends its request promptly needs one, and a client on
an address of its own loses its connection to them only when no address holds more connections than it does.
"""

from __future__ import annotations

import io
import json
import math
import select
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass

MAX_HEAD_BYTES = 16 << 10  # request line and headers of one request, at most (the stdlib alone allows 100 x 64 KiB)
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_MAX_PER_ADDRESS = 16
DEFAULT_READ_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ClientLimits:
    """The endpoint's client bounds: connections at once (in all, from one address) and a request's read deadline."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_per_address: int = DEFAULT_MAX_PER_ADDRESS
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S

    def check(self) -> None:
        if not 1 <= self.max_connections <= 4096:
            raise ValueError(f"--max-connections must be in [1, 4096], got {self.max_connections}")
        if not 1 <= self.max_per_address <= self.max_connections:
            raise ValueError(
                f"--max-per-address must be in [1, --max-connections={self.max_connections}], "
                f"got {self.max_per_address}"
            )
        if not 0 < self.read_timeout_s <= 600:
            raise ValueError(f"--read-timeout-s must be in (0, 600], got {self.read_timeout_s}")


class ClientCut(ConnectionAbortedError):
    """A connection this endpoint closed: its request took too long or was too large (already counted)."""


def raw_answer(status: int, reason: str, error: str) -> bytes:
    """A whole HTTP/1.1 answer `{"error": ...}` that closes the connection, for a socket with no handler."""
    body = json.dumps({"error": error})
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


def send_once(sock: socket.socket, data: bytes) -> None:
    """Send what the socket takes at once (nothing if its buffer is full), never waiting: the socket closes next."""
    try:
        sock.setblocking(False)
        sock.send(data)
    except OSError:
        pass


class Client:
    """One admitted connection: its address, when it started reading its request, and its byte budget."""

    __slots__ = ("sock", "address", "since", "reading", "received", "budget")

    def __init__(self, sock: socket.socket, address: str):
        self.sock, self.address = sock, address
        self.since, self.reading = time.monotonic(), True  # measured from accept
        self.received, self.budget = 0, MAX_HEAD_BYTES


class ClientTable:
    """The admitted connections, under one lock; the counts /health reports."""

    def __init__(self, limits: ClientLimits):
        limits.check()
        self.limits = limits
        self._lock = threading.Lock()
        self._clients: dict[socket.socket, Client] = {}
        self._per_address: Counter[str] = Counter()
        self.refused = self.displaced = self.timed_out = self.too_large = 0

    def admit(self, sock: socket.socket, address: str) -> Client | None:
        """A slot for a newly accepted connection, displacing a reading one if the caps are reached; None: 503."""
        with self._lock:
            address_full = self._per_address[address] >= self.limits.max_per_address
            if address_full or len(self._clients) >= self.limits.max_connections:
                victim = self._longest_reading(address if address_full else None)
                if victim is None:
                    self.refused += 1
                    return None
                self._drop(victim.sock)
                self.displaced += 1
                try:  # its thread's recv sees the end of the stream at once; under the lock: it is not yet closed
                    victim.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            client = self._clients[sock] = Client(sock, address)
            self._per_address[address] += 1
            return client

    def _longest_reading(self, address: str | None) -> Client | None:
        """The reading client (of `address`, or of any) of the address holding the most, the earliest-reading."""
        reading = [c for c in self._clients.values() if c.reading and address in (None, c.address)]
        if not reading:
            return None
        return min(reading, key=lambda c: (-self._per_address[c.address], c.since))

    def _drop(self, sock: socket.socket) -> None:
        client = self._clients.pop(sock, None)
        if client is not None:
            self._per_address[client.address] -= 1
            if not self._per_address[client.address]:
                del self._per_address[client.address]

    def client_of(self, sock: socket.socket) -> Client | None:
        with self._lock:
            return self._clients.get(sock)

    def release(self, sock: socket.socket) -> None:
        """The connection is closing: its slot is free (call before closing the socket)."""
        with self._lock:
            self._drop(sock)

    def working(self, client: Client) -> bool:
        """Its whole request has arrived: no longer displaceable. False: it was displaced already (close it)."""
        with self._lock:
            client.reading = False
            return self._clients.get(client.sock) is client

    def answered(self, client: Client) -> None:
        """Its answer is written: the next request's deadline and byte budget count from now."""
        with self._lock:
            client.since, client.reading, client.received, client.budget = time.monotonic(), True, 0, MAX_HEAD_BYTES

    def cut(self, client: Client, status: int, reason: str, error: str) -> ClientCut:
        """Count the cut, send its one-line answer if the socket takes it at once; the error to raise."""
        with self._lock:
            if status == 408:
                self.timed_out += 1
            else:
                self.too_large += 1
        send_once(client.sock, raw_answer(status, reason, error))
        return ClientCut(error)

    def stats(self) -> dict:
        with self._lock:
            return {
                "connections": len(self._clients),
                "addresses": len(self._per_address),
                "most_from_one_address": max(self._per_address.values(), default=0),
                "refused": self.refused,
                "displaced": self.displaced,
                "timed_out": self.timed_out,
                "too_large": self.too_large,
            }


class DeadlineReader(io.RawIOBase):
    """A client's socket as a raw stream whose every recv waits at most until its request's deadline, and takes at
    most what is left of its byte budget."""

    def __init__(self, table: ClientTable, client: Client):
        super().__init__()
        self.table, self.client = table, client
        self._poll = select.poll()
        self._poll.register(client.sock, select.POLLIN)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        c, timeout_s = self.client, self.table.limits.read_timeout_s
        left = c.since + timeout_s - time.monotonic()
        if left <= 0 or not self._poll.poll(math.ceil(left * 1000)):
            raise self.table.cut(
                c, 408, "Request Timeout", f"no whole request within {timeout_s:g} s (--read-timeout-s): closed"
            )
        room = c.budget - c.received
        if room <= 0:
            raise self.table.cut(
                c,
                431,
                "Request Header Fields Too Large",
                f"request line and headers over {MAX_HEAD_BYTES} bytes: closed",
            )
        n = c.sock.recv_into(buffer, min(len(buffer), room))
        c.received += n
        return n
