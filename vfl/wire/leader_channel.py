"""The leader's channel: a ROUTER socket over CurveZMQ that admits only the configured follower keys, with deadlines.

Every connection is a CURVE session (Curve25519 + XSalsa20-Poly1305, libzmq's implementation): the leader admits only
the follower keys it was configured with (admission.py) and a message's sender is the party of the key that
authenticated its connection (the `User-Id` property), never a name the message claims. The channel enforces per-peer
sequence numbers, the run id and a deadline on every receive; it treats only the loss of an authenticated party's own
connection as that party's loss (strangers' connects, closes and failed handshakes are ignored), and it buffers at
most `ahead` messages per peer (one, unless the leader opens a pipelined exchange: training.microbatch.pipelined). It
knows nothing about training: the parties post() and expect() the typed messages of messages.py (parsed and checked
field by field on arrival); send() and recv() move a type string and its meta, for the transport's own tests. What
both ends share (sockets, sequence numbers, deadlines, lost connections) is endpoint.py; which connection is each
follower's, and the refusals, leader_routes.py; a lost follower's reconnection and a restarted run's REJOIN,
leader_rejoin.py; a follower's end is follower_channel.py.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import zmq

from vfl.wire.admission import Admission, guard
from vfl.wire.curve_keys import LeaderKeys, fingerprint
from vfl.wire.endpoint import (
    ABORT_SEND_MS,
    Endpoint,
    PeerLost,
    PeerTimeout,
    blamed,
    send_frames,
)
from vfl.wire.frames import (
    MAX_MESSAGE_BYTES,
    Message,
    WireError,
)
from vfl.wire.gate import MAX_UNADMITTED, ConnectionGate
from vfl.wire.leader_rejoin import LeaderRejoin
from vfl.wire.leader_routes import LeaderRoutes
from vfl.wire.messages import Abort, WireMessage

HANDSHAKE_MS = 5000  # a connection that has not completed its CURVE handshake by then is dropped


class LeaderChannel(LeaderRoutes, LeaderRejoin, Endpoint):
    """The leader's ROUTER socket: a CURVE server admitting exactly the configured follower keys."""

    def __init__(
        self,
        bind: str,
        followers: tuple[str, ...],
        keys: LeaderKeys,
        timeout_s: float,
        me: str,
        run: str = "",
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_unadmitted: int = MAX_UNADMITTED,
        notice: Callable[[str], None] | None = None,
    ):
        super().__init__(me, timeout_s, max_message_bytes)
        self.followers = tuple(followers)
        missing = [f for f in self.followers if f not in keys.followers.values()]
        if missing or len(keys.followers) != len(self.followers):
            raise WireError(
                f"follower keys {sorted(keys.followers.values())} do not match the followers {list(self.followers)}"
            )
        self.run = run
        warn = getattr(notice, "warning", notice)  # refused keys named in the leader's log, as warnings
        self._auth = Admission(self._ctx, keys.followers, (lambda line: warn(f"leader {me}: {line}")) if warn else None)
        self._auth.start()
        self._sock = self._make_socket(zmq.ROUTER)
        # pending connections are counted and capped from the socket's monitor, in a thread (gate.py)
        crypto = (  # a follower pinning another leader key: named once in the leader's log (gate.py)
            (
                lambda: warn(
                    f"leader {me}: a client failed the CURVE handshake: it sealed its greeting to another key than "
                    f"this leader's (fingerprint {fingerprint(keys.public)}), as a follower whose "
                    f"network.leader_key_file is not this leader's public key file does (further such failures are "
                    f"not logged)"
                )
            )
            if warn
            else None
        )
        self.gate = ConnectionGate(
            self._ctx, self._sock, self._fds.values, max_unadmitted,
            on_accepted=self._accepted, on_crypto_failure=crypto,
        )  # fmt: skip
        self._watch(self.gate.events)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)  # strangers cannot hold descriptors for long
        guard(self._sock, keys.public, keys.secret)
        try:
            self._sock.bind(bind)
        except zmq.ZMQError as e:
            self.close()
            if e.errno == zmq.EADDRINUSE:
                raise WireError(
                    f"cannot bind {bind}: address already in use (another leader? pick a free port in network.bind)"
                ) from None
            raise WireError(f"cannot bind {bind}: {e}") from None
        self._inbox: dict[str, deque[Message]] = {f: deque() for f in self.followers}
        self._route: dict[str, bytes] = {}  # party -> routing id of its (first) authenticated connection
        self._refused: set[bytes] = set()  # routing ids of duplicate connections: told once, then ignored
        self.duplicates_refused = 0
        self.impostors_refused = 0
        self.oversized_refused = 0
        self.notice = notice  # where refusals and losses that the run survives are reported (the leader's log)
        self.while_waiting: Callable[[], None] | None = None  # while a lost follower is waited for (keepalives)
        # --resume auto: the step this (restarted) leader resumes at; a follower of an earlier run that reaches it
        # is told to REJOIN from there (None: such a follower is refused as before)
        self.rejoin_step: int | None = None
        # unread messages a party may have here: 1, or M while each follower sends a step's M micro-batch embeddings
        # before it awaits the first gradient (training.microbatch.pipelined); one more is refused
        self.ahead = 1
        self.ahead_bytes: int | None = (
            None  # within a pipelined step: the most a message queued behind another may hold
        )

    def _accepted(self, fd: int) -> None:
        """The gate's thread saw a connection accepted: its bytes in flight are watched from now (inflight.py)."""
        if self._inflight is not None:
            self._inflight.watch(fd)

    def send(self, peer: str, type_: str, meta: dict | None = None, tensors=()) -> None:
        """Send a message given as its type and meta (the transport's own tests; the parties post typed ones)."""
        if self.reconnecting and self.resync.lost(peer):
            self._frames(peer, type_, meta, tensors)  # numbered and kept: sent once the peer is back (resync.py)
            return
        if peer not in self._route:
            raise PeerLost(f"{peer} is not connected (sending {type_})")
        frames = self._frames(peer, type_, meta, tensors)
        try:
            send_frames(self._sock, frames, [self._route[peer]])
        except PeerLost:
            if self.watch_disconnect and self.resync.on_loss(peer, self.reconnecting):
                self._lost(peer)  # the message is kept: sent again once the peer is back
                return
            # it had a route: its connection dropped, and the send found out before the disconnect event did
            raise PeerLost(f"connection lost: {peer} disconnected while sending {type_}") from None
        except PeerTimeout as e:
            raise PeerTimeout(f"sending {type_} to {peer}: {e}") from None

    def post(self, peer: str, message: WireMessage) -> None:
        """Send a typed message to `peer`."""
        self.send(peer, message.TYPE, *message.to_wire())

    def expect(self, peer: str, *classes: type[WireMessage], what: str | None = None) -> WireMessage:
        """The next message from `peer`, which must be of one of `classes`, parsed and checked field by field."""
        msg = self._receive(peer, tuple(c.TYPE for c in classes), what)
        return blamed(peer, lambda: next(c for c in classes if c.TYPE == msg.type).from_wire(msg))

    def recv(self, peer: str, type_: str, what: str | None = None) -> Message:
        """The next message from `peer`, which must be of `type_`, as a frames.Message (the transport's own tests)."""
        return self._receive(peer, (type_,), what)

    def _receive(self, peer: str, types: tuple[str, ...], what: str | None) -> Message:
        """The next message from `peer`, of one of `types`; other peers' messages are queued (one each)."""
        awaiting = what or f"{'/'.join(types)} from {peer}"
        deadline = time.monotonic() + self.timeout_s
        self._late_reads = 0
        while not self._inbox[peer]:
            if self._poll(deadline, awaiting, peer):
                self._read_one(awaiting)
        msg = self._inbox[peer].popleft()
        if msg.type not in types:
            error = WireError(f"expected {'/'.join(types)} from {peer}, got {msg.type}")
            error.peer = peer
            raise error
        return msg

    def _while_waiting(self) -> None:
        if self.while_waiting is not None:
            self.while_waiting()

    def abort_all(self, reason: str) -> None:
        """Best effort: tell every follower that ever connected why the run stops."""
        self._sock.setsockopt(zmq.SNDTIMEO, ABORT_SEND_MS)
        for peer in list(self._route):
            try:
                self.post(peer, Abort(reason))
            except (WireError, ValueError, zmq.ZMQError):
                pass

    def _unwatch(self) -> None:
        self.gate.close()

    def _check_health(self) -> None:
        if self.gate.failed:
            raise WireError(
                f"the leader's connection gate stopped ({self.gate.failed}); the run stops rather than go on without it"
            )

    def _stop_auth(self) -> None:
        self._auth.stop()
