"""Whether a follower reaches its leader: its host resolved first, then the monitor's events named as they happen.

Nothing listening and a leader key that does not match are said when the events show them, not as a timeout's guess.

libzmq retries a connection for ever and says why only through the socket's monitor (zmq_socket_monitor(3)):
`CONNECT_RETRIED` with no `CONNECTED` before it is a refused (or unanswered) TCP connect, and `CONNECTED` followed by
`HANDSHAKE_FAILED_NO_DETAIL` is a server that closed the CURVE handshake: a client that pins a key whose secret the
server lacks cannot even be answered (CurveZMQ's HELLO box is sealed to the pinned key), so that is what a wrong
`network.leader_key_file` looks like from the follower. A name that does not resolve is retried silently too, so the
follower resolves it first (getaddrinfo, bounded in time) and stops with one line when it cannot.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import zmq

from vfl.wire.curve_keys import fingerprint
from vfl.wire.frames import WireError

RESOLVE_WITHIN_S = 5.0  # a resolver that has not answered by then is left to libzmq's own retries
KEY_MISMATCH_AFTER = 3  # handshakes closed by the server in a row (none succeeded) before the key is named
EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_SUCCEEDED


def tcp_host(endpoint: str) -> tuple[str, str] | None:
    """(host, port) of a `tcp://[source;]host:port` endpoint (brackets of an IPv6 literal removed); None otherwise."""
    if not endpoint.startswith("tcp://"):
        return None
    address = endpoint[len("tcp://") :].rsplit(";", 1)[-1]
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        return None
    return host.strip("[]"), port


def check_resolves(endpoint: str, within_s: float = RESOLVE_WITHIN_S) -> None:
    """Raise WireError naming the host when `endpoint`'s host name does not resolve; a resolver that does not answer
    within `within_s` is left alone (libzmq resolves again on every retry)."""
    parts = tcp_host(endpoint)
    if parts is None or parts[0] == "*":
        return
    host, port = parts
    box: dict = {}

    def resolve() -> None:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as e:
            box["error"] = e

    worker = threading.Thread(target=resolve, name="vfl-resolve", daemon=True)
    worker.start()
    worker.join(within_s)
    if "error" in box:
        why = getattr(box["error"], "strerror", None) or str(box["error"])
        raise WireError(
            f"the leader's host {host!r} in {endpoint} does not resolve ({why}): give network.connect (--connect) as "
            f"tcp://HOST:PORT with a host name this machine resolves, or the leader's IP address"
        )


class ConnectWatch:
    """A follower's view of its connection to the leader, from the monitor events: says once, through `notice`,
    that nothing listens at the endpoint yet (before any connection; a follower started before its leader is told so
    too: an information) and, as an information too (a relay whose leader is not up yet looks the same), that the
    leader's key does not match (KEY_MISMATCH_AFTER handshakes in a row closed by the server); `silent()` says the same for a timeout's text."""

    def __init__(
        self, endpoint: str, timeout_s: float, leader_key: bytes, leader_key_file: str, notice: Callable | None
    ):
        self.endpoint, self.timeout_s = endpoint, float(timeout_s)
        self.leader_key, self.leader_key_file = leader_key, leader_key_file or "network.leader_key_file"
        self.notice = notice
        self.connected = 0
        self.refused = 0  # connect attempts retried before any connection
        self.closed_in_handshake = 0  # handshakes in a row the server closed
        self.handshakes = 0
        self._said: set[str] = set()

    def on_event(self, kind: int) -> None:
        if kind == zmq.EVENT_CONNECT_RETRIED and not self.connected:
            self.refused += 1
            self._say("nothing", self.nothing_listening() + f"; retrying until {self._until()}", warn=False)
        elif kind == zmq.EVENT_CONNECTED:
            self.connected += 1
        elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.handshakes += 1
            self.closed_in_handshake = 0
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self.closed_in_handshake += 1
            if self.closed_in_handshake >= KEY_MISMATCH_AFTER and not self.handshakes:
                self._say("key", self.key_mismatch() + f"; retrying until {self._until()}", warn=False)

    def nothing_listening(self) -> str:
        return (
            f"nothing is listening at {self.endpoint} ({self.refused} connection attempt(s) refused or unanswered): "
            f"is the leader started, and are this host and port its network.bind (--bind)?"
        )

    def key_mismatch(self) -> str:
        return (
            f"the leader's key does not match {self.leader_key_file}, or a forwarder's leader is not up yet: the "
            f"server at {self.endpoint} closed {self.closed_in_handshake} CURVE handshake(s) in a row, as a server "
            f"without the secret key of the pinned key (fingerprint {fingerprint(self.leader_key)}) does, and as a "
            f"relay does while nothing answers behind it; if it goes on, obtain the leader's public key file again "
            f"and compare `python -m vfl.keys show` on both hosts"
        )

    def silent(self) -> str:
        """Why nothing arrived, for a timeout's message ('' when the events say nothing)."""
        if not self.connected and self.refused:
            return "; " + self.nothing_listening()
        if self.closed_in_handshake and not self.handshakes:
            return "; " + self.key_mismatch()
        return ""

    def _until(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(time.time() + self.timeout_s)) + (
            f" (network.timeout_s {self.timeout_s:g} s)"
        )

    def _say(self, what: str, line: str, warn: bool) -> None:
        if what not in self._said and self.notice is not None:
            self._said.add(what)
            (getattr(self.notice, "warning", self.notice) if warn else self.notice)(line)
