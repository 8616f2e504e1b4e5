"""Whether a connection's whole request has been delivered: read by its handler, or still waiting in its socket.

A request that has arrived whole must keep its connection's slot although its handler has not reached it yet (a
loaded machine may leave a handler thread unrun for a second): the endpoint then treats it like one being worked on.
The request's end is found the way its handler will find it: the blank line that ends the request line and headers
(`HEAD_END`), then as many bytes as the first Content-Length declares (none: 0). Once the handler has parsed the
headers its own Content-Length governs, so a head this module reads differently from the standard library's parser
misleads it at most until the handler runs; a head whose lines end in a bare LF (which the standard library also
reads) never counts as arrived, which only ever leaves it displaceable.

The handler's reads are noted as they happen (`read`, under the client table's lock, together with the recv: what
was read and what still waits in the socket are then always contiguous). The blank line is searched for in each new
chunk only, and the bytes kept for it are dropped once it is found or the head's limit is passed.
"""

from __future__ import annotations

import socket

from vfl.inference.serve.socket_queues import unread_bytes, waiting_bytes

HEAD_END = b"\r\n\r\n"  # the blank line that ends a request's line and headers


def declared_length(head: bytes) -> int | None:
    """The body length a request's line and headers declare: its first Content-Length (none: 0; not a decimal of at
    most 12 digits: None)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            value = value.strip()
            return int(value) if value.isdigit() and len(value) <= 12 else None
    return 0


class RequestArrival:
    """One request's head as its handler reads it: its length with the blank line and its declared body, once known."""

    __slots__ = ("max_head", "start", "head_len", "declared")

    def __init__(self, max_head: int):
        self.max_head = max_head
        self.reset()

    def reset(self) -> None:
        """A new request begins (at accept, or once the previous answer is taken)."""
        self.start: bytearray | None = bytearray()  # the bytes read while the blank line is not found; None: done
        self.head_len: int | None = None
        self.declared: int | None = None

    def read(self, chunk: memoryview | bytes) -> None:
        """The handler read `chunk`, following every byte it read before in this request."""
        if self.start is None:
            return
        before = len(self.start)
        self.start += chunk[: self.max_head - before]
        end = self.start.find(HEAD_END, max(0, before - len(HEAD_END) + 1))
        if end >= 0:
            self.head_len, self.declared = end + len(HEAD_END), declared_length(bytes(self.start[:end]))
            self.start = None
        elif len(self.start) >= self.max_head:
            self.start = None  # a head past the limit: refused (431) by the reader, never arrived

    def parsed(self, declared: int) -> None:
        """The handler parsed the headers: their Content-Length, as it read it, governs."""
        self.declared, self.start = declared, None

    def arrived(self, sock: socket.socket, received: int) -> bool:
        """Whether the head and its declared body have all been delivered: `received` bytes read by the handler in this
        request, and what waits in `sock`."""
        unread = unread_bytes(sock)
        head_len, declared = self.head_len, self.declared
        if head_len is None:
            if self.start is None or not unread or len(self.start) != received:
                return False
            before = len(self.start)
            head = bytes(self.start) + waiting_bytes(sock, self.max_head - before)
            end = head.find(HEAD_END, max(0, before - len(HEAD_END) + 1))
            if end < 0:
                return False
            head_len, declared = end + len(HEAD_END), declared_length(head[:end])
        return declared is not None and received + unread - head_len >= declared
