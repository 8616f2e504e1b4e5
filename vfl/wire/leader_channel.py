"""The leader's channel: a ROUTER socket over CurveZMQ that admits only the configured follower keys, with deadlines.

Every connection is a CURVE session (Curve25519 + XSalsa20-Poly1305, libzmq's implementation): the leader admits only
the follower keys it was configured with (admission.py) and a message's sender is the party of the key that
authenticated its connection (the `User-Id` property), never a name the message claims. The channel enforces per-peer
sequence numbers, the run id and a deadline on every receive; it treats only the loss of an authenticated party's own
connection as that party's loss (strangers' connects, closes and failed handshakes are ignored), and it buffers at
most `ahead` messages per peer (one, unless the leader opens a pipelined exchange: training.microbatch.pipelined). It
knows nothing about training: the parties post() and expect() the typed messages of messages.py (parsed and checked
field by field on arrival); send() and recv() move a type string and its meta, for the transport's own tests. What
both ends share (sockets, sequence numbers, deadlines, lost connections) is endpoint.py; a follower's end is
follower_channel.py.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from collections.abc import Callable

import zmq

from vfl.wire.admission import Admission, guard
from vfl.wire.curve_keys import LeaderKeys, fingerprint
from vfl.wire.endpoint import (
    ABORT_SEND_MS,
    UNBOUND_TYPES,
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
    decode,
    encode,
    short_repr,
)
from vfl.wire.gate import MAX_UNADMITTED, ConnectionGate
from vfl.wire.messages import Abort, WireMessage
from vfl.wire.resync import PeerRestarted, Reconnection
from vfl.wire.resync_messages import Rejoin, Resync

HANDSHAKE_MS = 5000  # a connection that has not completed its CURVE handshake by then is dropped


class LeaderChannel(Endpoint):
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

    def _stranger_cut(self, cut) -> None:
        self.oversized_refused += 1
        if self.notice is not None:
            self.notice(
                f"leader {self.me}: cut a connection from {cut.label} that sent a message larger than the limit of "
                f"{self.max_message_bytes} bytes before its first message ({cut.arrived} bytes had arrived)"
            )

    @property
    def connected(self) -> set[str]:
        return set(self._route)

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
            raise PeerLost(f"{peer} is not connected (sending {type_})") from None
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

    def _read_one(self, awaiting: str) -> None:
        frames = self._sock.recv_multipart(copy=False)
        rid, body = frames[0].bytes, frames[1:]
        party = body[0].get("User-Id") if body else ""
        if party not in self._inbox:  # cannot happen while ZAP is enforced; never trust a routing id instead
            raise WireError(f"message from an unauthenticated connection (User-Id {party!r}); refused")
        blamed(party, lambda: self._file(party, rid, body))

    def _file(self, party: str, rid: bytes, body: list) -> None:
        """Queue a message that arrived from `party`'s key (or refuse its connection); errors are party's."""
        if rid in self._refused:
            return
        if not self.run and self.rejoin_step is not None and self._from_earlier_run(party, rid, body):
            return
        known = self._route.get(party)
        if known != rid and self.reconnecting and (known is not None or self.resync.lost(party)):
            if self._reconnected(party, rid, body):
                return
            known = self._route.get(party)
        if known is not None and known != rid:
            self.duplicates_refused += 1
            self._refuse(
                rid,
                body[0],
                f"party {party} is already connected to this run; a second connection with {party}'s key was "
                f"refused (is another process of {party} running?)",
            )
            return
        if known is None:
            claimed = decode(body, party).claimed
            if self.check_claims and claimed != party:
                self._refuse_impostor(party, claimed, rid, body[0])
                return
            self._track(party, body[0])
            self._route[party] = rid
        if len(self._inbox[party]) >= self.ahead:
            raise WireError(
                f"{party} sent a message while {len(self._inbox[party])} of its messages were unread "
                f"({self._inbox[party][0].type} first; a party may be at most {self.ahead} message(s) ahead here)"
            )
        if self._inbox[party] and self.ahead_bytes is not None:
            size = sum(memoryview(f).nbytes for f in body)
            if size > self.ahead_bytes:  # a queued message is one micro-batch's embedding, no more
                raise WireError(
                    f"{party} sent a message of {size} bytes ahead of its turn; a message queued here may hold one "
                    f"micro-batch's embedding, at most {self.ahead_bytes} bytes"
                )
        if self.reconnecting and self.resync.lost(party) and decode(body, party).type != Resync.TYPE:
            return  # before its RESYNC state nothing of a reconnecting party is taken (nor numbered); sent again after
        msg = self._accept(party, body)
        if msg is None:  # a duplicate of a message applied before the resynchronisation
            return
        if msg.type == Resync.TYPE:
            self._on_resync(party, msg)
            return
        self._inbox[party].append(msg)

    def _reconnected(self, party: str, rid: bytes, body: list) -> bool:
        """A new connection of `party`'s key while this run waits for lost connections: its RESYNC hello makes it
        party's connection (the old one, if it still looks open, is cut); a message of this run before that hello
        is one left in the party's queue when its link dropped (dropped: sent again after the resynchronisation).
        True when the message was dealt with; False: anything else (a second process's HELLO), refused as before."""
        head = decode(body, party)
        if self.check_claims and head.claimed != party:
            return False  # the impostor rule below refuses it
        if not head.run and self.resync.lost(party):  # a greeting of no run: a new process of the lost party
            self._route[party] = rid  # where a REJOIN reaches it (rejoin_all)
            raise PeerRestarted(party, self.resync.link(party).lost_step)
        if head.run != self.run or head.type in UNBOUND_TYPES:
            return False
        if head.type != Resync.TYPE or head.meta.get("op") != "hello":
            return True
        old = self._fds.pop(party, None)
        if old is not None:  # its old connection looked open to us: it is closed now
            self.gate.cut_later(old)
        self.resync.on_loss(party, True)
        self._route[party] = rid
        self._track(party, body[0])
        return False

    def _from_earlier_run(self, party: str, rid: bytes, body: list) -> bool:
        """Before this run exists, a message bound to another run: a follower of the run this restarted leader
        continues (its RESYNC hello). It is told to REJOIN from `rejoin_step` and that connection is cut (it greets
        again on a new one). False: a message of no run, handled as usual."""
        head = decode(body, party)
        if not head.run or (self.check_claims and head.claimed != party):
            return False
        self._refused.add(rid)
        self._send_rejoin(rid, self.rejoin_step)
        self.gate.cut_later(body[0].get(zmq.SRCFD))
        if self.notice is not None:
            self.notice(
                f"leader {self.me}: {party} is still in the run this leader restarted; told it to rejoin from its "
                f"latest checkpoint at or below step {self.rejoin_step}"
            )
        return True

    def _send_rejoin(self, rid: bytes, step: int) -> None:
        """REJOIN{step} to one connection, outside any run and numbering; best effort, at most ABORT_SEND_MS."""
        frames = encode(Rejoin.TYPE, self.me, "", 0, *Rejoin(step).to_wire())
        usual = self._sock.getsockopt(zmq.SNDTIMEO)
        self._sock.setsockopt(zmq.SNDTIMEO, ABORT_SEND_MS)
        try:
            self._sock.send_multipart([rid, *frames])
        except zmq.ZMQError:
            pass  # gone already: it greets this leader again and hears the step then
        finally:
            self._sock.setsockopt(zmq.SNDTIMEO, usual)

    def rejoin_all(self, step: int) -> None:
        """Tell every follower connected now to start again from its latest checkpoint at or below `step`."""
        for rid in list(self._route.values()):
            self._send_rejoin(rid, step)

    def start_again(self) -> None:
        """Forget the run, keep the socket (--resume auto: the leader starts the run again on it, so that no follower's
        next connection can reach a socket about to close): routes, numbering, lost links and queued messages go;
        a late message of the old run on an old connection is answered REJOIN and that connection cut."""
        self.run = ""
        self._route.clear()
        self._fds.clear()  # in place: the gate reads its values
        self._send_seq.clear()
        self._recv_seq.clear()
        for queue in self._inbox.values():
            queue.clear()
        notice = self.resync.notice
        self.resync = Reconnection(self.me, 0.0)
        self.resync.notice = notice
        self.ahead, self.ahead_bytes = 1, None
        self.watch_disconnect = True
        self.while_waiting = None

    def _on_resync(self, party: str, msg: Message) -> None:
        """RESYNC from `party` (resync.py): a hello is answered with this side's state and a fresh nonce; the state
        that echoes that nonce re-establishes the numbering and what the party missed is sent again."""
        r: Resync = blamed(party, lambda: Resync.from_wire(msg))
        link = self.resync.link(party)
        if r.op == "hello":
            if link.hello_from == self._route.get(party):  # an honest follower says hello once a connection
                raise WireError(f"{party} sent a second RESYNC hello on one connection (one a connection is allowed)")
            link.hello_from = self._route.get(party)
            self.resync.on_loss(party, True)  # a reconnection the leader had not noticed yet
            link.nonce = secrets.token_hex(16)
            link.stated = self._recv_seq.get(party, 0) - 1  # what this state announces is what `agreed` records
            state = Resync("state", link.nonce, r.nonce, link.stated, self.resync.progress)
            self._send_raw(party, self._resync_frames(party, state))
            return
        if not link.nonce or r.echo != link.nonce or not self.resync.lost(party):
            return  # an answer to an earlier hello of this party: stale, dropped
        again = blamed(
            party,
            lambda: self.resync.agreed(
                party, r.received, r.step, self._send_seq.get(party, 0), self._recv_seq.get(party, 0) - 1, True
            ),
        )
        for kept in again:
            self._send_raw(party, kept.frames)

    def _send_raw(self, party: str, frames: list) -> None:
        """Frames to party's current connection (a RESYNC, or a kept message sent again); a loss meanwhile is
        waited for again."""
        try:
            send_frames(self._sock, frames, [self._route[party]])
        except (PeerLost, KeyError):
            self.resync.on_loss(party, True)
            self._lost(party)

    def _lost(self, peer: str) -> None:
        self._route.pop(peer, None)
        self._fds.pop(peer, None)

    def _while_waiting(self) -> None:
        if self.while_waiting is not None:
            self.while_waiting()

    def _refuse_impostor(self, party: str, claimed: str, rid: bytes, frame: zmq.Frame) -> None:
        """A first message whose header names another party than its key's: refuse that connection and carry on,
        so the key's own process, or the party it named, can still join this run."""
        self.impostors_refused += 1
        self._refuse(
            rid,
            frame,
            f"this connection holds {party}'s key but its messages claim to be {short_repr(claimed)}: a party is "
            f"its key, never a name; refused (does network.secret_key_file name {short_repr(claimed)}'s own key?)",
        )
        if self.notice is not None:
            self.notice(
                f"leader {self.me}: refused a connection authenticated as {party} that claims to be "
                f"{short_repr(claimed)}; still waiting for {sorted(set(self.followers) - set(self._route))}"
            )

    def _refuse(self, rid: bytes, frame: zmq.Frame, reason: str) -> None:
        """Tell a connection why it is refused, once and without blocking; ignore it, and shut it down a moment
        later (gate.py), so it does not stay among the pending connections."""
        self._refused.add(rid)
        self.gate.cut_later(frame.get(zmq.SRCFD))
        try:  # never blocks: a refused connection that does not read cannot stall the run
            self._sock.send_multipart(
                [rid, *encode(Abort.TYPE, self.me, "", 0, *Abort(reason).to_wire())], flags=zmq.DONTWAIT
            )
        except (WireError, zmq.ZMQError):
            pass

    @property
    def alive(self) -> set[str]:
        """The followers whose authenticated connection is open, as far as the socket's events have told."""
        return set(self._fds)

    def forget(self, peer: str) -> None:
        """Drop what this channel knows of `peer`'s connection (a serving leader whose follower was lost): its next
        connection is a new one, its messages numbered from 0 again, and it must greet again."""
        self._route.pop(peer, None)
        self._fds.pop(peer, None)
        self._send_seq.pop(peer, None)
        self._recv_seq.pop(peer, None)
        self.resync.links.pop(peer, None)
        self._inbox[peer].clear()

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
