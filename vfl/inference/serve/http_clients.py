"""Who may hold the leader's HTTP endpoint, and for how long.

Connection slots (in all and per client address), each request's whole read deadline and byte budget, each answer's
write deadline, and which connection a newcomer displaces when slots are full.

A connection is *reading* from its accept (or from the end of its previous answer) until its request, headers and
body, has arrived; then it is *working* (being scored) until its answer is ready; then *writing* while the client has
not taken the whole answer (a send that blocks, or bytes the client has not acknowledged), and only then reading its
next request: a pipelined request is not read before the previous answer is taken. A reading connection must deliver
its whole request within `read_timeout_s` of the moment it started reading, however it spreads the bytes (a deadline
per request, not per recv), and at most `MAX_HEAD_BYTES` of request line and headers plus the body its Content-Length
declares; past either it gets one best-effort 408 or 431 and is closed. A writing connection must take its answer
within `read_timeout_s` of its first byte, or it is closed.

When a newcomer finds its address holding `max_per_address` connections, it takes the slot of one of that address's
reading or writing connections; when it finds `max_connections` in all, of one of the address holding the most. Of
those it takes the one of lowest progress: the fewest bytes a second since its phase began (delivered while reading,
whether read or still in the socket for a handler a loaded machine has not run yet; taken by the client while
writing), the longest-waiting first among equals. A connection in the first `FRESH_S` of its reading, whose first
bytes may still be on their way, is taken only after every older one, oldest first. A reading connection whose
headers are complete and whose body has kept arriving at `MIN_BODY_BYTES_PER_S` or more (after `BODY_GRACE_S`) is
taken only after every other connection of its group, the slowest first: it outlasts faster newcomers, yet bodies
trickled just on pace on every slot cannot keep a prompt request out. One whose whole request (headers and declared
body) has arrived, read or still waiting in the socket for a handler a loaded machine has not run yet, is never
taken, nor is a working one. With none to take the newcomer gets 503. So slow, idle and unread clients hold slots
only until a client that sends its request promptly needs one; a client on an address of its own loses its
connection to them only when no address holds more connections than it does; and an honest request that has arrived
is never displaced, even by clients on its own address, nor one whose body arrives on pace while a connection of its
group is not on pace or is slower.
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

from vfl.inference.serve.request_arrival import RequestArrival
from vfl.inference.serve.socket_queues import unread_bytes, unsent_bytes

MAX_HEAD_BYTES = 16 << 10  # request line and headers of one request, at most (the stdlib alone allows 100 x 64 KiB)
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_MAX_PER_ADDRESS = 16
DEFAULT_READ_TIMEOUT_S = 10.0
MIN_BODY_BYTES_PER_S = 16 << 10  # a body arriving at least this fast (after its grace) is never displaced
BODY_GRACE_S = 0.5  # a body's first half second is not held to that rate
FRESH_S = 0.5  # a request's first half second (a round trip, a client's scheduling) is not measured for progress
UNSENT_WAIT_S, MAX_UNSENT_WAIT_S = 0.005, 0.1  # a writing connection's unacknowledged bytes are looked at again
# after 5 ms, then twice as long each time, 0.1 s at most
READING, WORKING, WRITING = "reading", "working", "writing"


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
    """A whole HTTP/1.1 answer `{"error": ...}` that closes the connection (a refusal, a cut, a request unread)."""
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
    """One admitted connection: its address, its state, when that phase began, and its bytes in it."""

    __slots__ = ("sock", "address", "since", "state", "received", "budget", "head_at", "head_bytes", "sent", "arrival")

    def __init__(self, sock: socket.socket, address: str):
        self.sock, self.address = sock, address
        self.since, self.state = time.monotonic(), READING  # measured from accept
        self.received, self.budget, self.head_at, self.head_bytes, self.sent = 0, MAX_HEAD_BYTES, None, 0, 0
        self.arrival = RequestArrival(MAX_HEAD_BYTES)

    def progress(self, now: float) -> float:
        """Bytes a second since its phase began: delivered by the client while reading (read, or waiting in the socket
        for a busy handler), taken by the client while writing."""
        if self.state == READING:
            moved = self.received + unread_bytes(self.sock)
        else:
            moved = max(0, self.sent - unsent_bytes(self.sock))
        return moved / max(now - self.since, 1e-3)

    def request_arrived(self) -> bool:
        """Its whole request has been delivered while reading (read by its handler or waiting in the socket)."""
        return self.state == READING and self.arrival.arrived(self.sock, self.received)

    def body_on_pace(self, now: float) -> bool:
        """Its headers are complete and its body has arrived at MIN_BODY_BYTES_PER_S since (after BODY_GRACE_S)."""
        if self.state != READING or self.head_at is None:
            return False
        return self.received - self.head_bytes >= MIN_BODY_BYTES_PER_S * (now - self.head_at - BODY_GRACE_S)


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
        """A slot for a newly accepted connection, displacing a reading or writing one if the caps are reached; None:
        503."""
        with self._lock:
            address_full = self._per_address[address] >= self.limits.max_per_address
            if address_full or len(self._clients) >= self.limits.max_connections:
                victim = self._least_progress(address if address_full else None)
                if victim is None:
                    self.refused += 1
                    return None
                self._drop(victim.sock)
                self.displaced += 1
                try:  # its thread's recv or send fails at once; under the lock: it is not yet closed
                    victim.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            client = self._clients[sock] = Client(sock, address)
            self._per_address[address] += 1
            return client

    def _least_progress(self, address: str | None) -> Client | None:
        """The displaceable client (of `address`, or of any) of the address holding the most, of lowest progress
        (the longest-waiting among equals), a reading one in its first FRESH_S after every older one of its group and
        oldest first, a body arriving on pace after every other of its group and slowest first; a request arrived
        whole and a working client are not displaceable."""
        now = time.monotonic()
        open_ = [
            c
            for c in self._clients.values()
            if c.state != WORKING and address in (None, c.address) and not c.request_arrived()
        ]
        if not open_:
            return None

        def rank(c: Client) -> tuple:
            on_pace = c.body_on_pace(now)
            fresh = not on_pace and c.state == READING and now - c.since < FRESH_S  # first bytes still on their way?
            return -self._per_address[c.address], on_pace, fresh, 0.0 if fresh else c.progress(now), c.since

        return min(open_, key=rank)

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

    def _holds(self, client: Client) -> bool:
        return self._clients.get(client.sock) is client

    def headers_read(self, client: Client, declared: int) -> None:
        """Its request line and headers have arrived, declaring a body of `declared` bytes: its body's pace is measured
        from now."""
        with self._lock:
            client.head_at, client.head_bytes = time.monotonic(), client.received
            client.arrival.parsed(declared)

    def receive(self, client: Client, buffer, most: int) -> int:
        """Read what is waiting (at most `most` bytes; the socket has been polled readable) and note it, under the lock:
        a displacement scan sees what was read and what still waits as one contiguous stream."""
        with self._lock:
            n = client.sock.recv_into(buffer, most)
            client.received += n
            client.arrival.read(memoryview(buffer)[:n])
        return n

    def working(self, client: Client) -> bool:
        """Its whole request has arrived: not displaceable until its answer is ready. False: it was displaced already
        (close it)."""
        with self._lock:
            client.state = WORKING
            return self._holds(client)

    def answered(self, client: Client) -> None:
        """Its answer is taken: the next request's deadline and byte budget count from now."""
        with self._lock:
            client.since, client.state, client.received, client.budget = time.monotonic(), READING, 0, MAX_HEAD_BYTES
            client.head_at, client.head_bytes, client.sent = None, 0, 0
            client.arrival.reset()

    def write_answer(self, client: Client, data: bytes) -> None:
        """Send a whole answer. While the client does not take it (a send that would block, or bytes it has not yet
        acknowledged) the connection is *writing*: displaceable, and closed (ClientCut) unless the client takes it
        within read_timeout_s of its first byte. An answer sent and acknowledged at once never leaves *working*."""
        sock, view, timeout_s = client.sock, memoryview(data), self.limits.read_timeout_s
        started = time.monotonic()
        can_send, can_read = select.poll(), select.poll()
        can_send.register(sock, select.POLLOUT)
        can_read.register(sock, select.POLLIN)
        timeout, writing, wait_s = sock.gettimeout(), False, UNSENT_WAIT_S
        sock.settimeout(0.0)
        try:
            while True:
                while view:
                    try:
                        n = sock.send(view)
                    except BlockingIOError:
                        break
                    view = view[n:]
                    with self._lock:
                        client.sent += n
                if not view and not unsent_bytes(sock):
                    return
                if not writing:
                    writing = self._writing(client, started)
                left = started + timeout_s - time.monotonic()
                if left <= 0:
                    with self._lock:
                        self.timed_out += 1
                    raise ClientCut(f"answer not taken within {timeout_s:g} s (--read-timeout-s): closed")
                if view:
                    can_send.poll(math.ceil(left * 1000))
                elif can_read.poll(math.ceil(min(left, wait_s) * 1000)) and unsent_bytes(sock):
                    time.sleep(wait_s)  # a request waits unread (pipelined) but the answer is not taken
                wait_s = min(2 * wait_s, MAX_UNSENT_WAIT_S)  # the client's next request wakes the wait at once
                with self._lock:
                    if not self._holds(client):
                        raise ClientCut("displaced while its answer was not taken: closed")
        finally:
            if sock.fileno() >= 0:
                sock.settimeout(timeout)

    def _writing(self, client: Client, started: float) -> bool:
        with self._lock:
            if not self._holds(client):
                raise ClientCut("displaced while its answer was not taken: closed")
            client.state, client.since = WRITING, started
            return True

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
        return self.table.receive(c, buffer, min(len(buffer), room))
