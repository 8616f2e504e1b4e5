"""Which connection is each follower's on the leader's socket: the first one its key authenticated; what arrives is queued.

A message's party is the key that authenticated its connection (the `User-Id` property). The first connection of a
key that sends a message of this run becomes that party's route; a second connection of the same key is refused
(duplicates_refused), and so is one whose messages claim another party's name (impostors_refused). A party may have
at most `ahead` unread messages queued here. LeaderChannel (leader_channel.py) builds on this; a reconnection's
RESYNC and REJOIN are leader_rejoin.py.
"""

from __future__ import annotations

from collections import deque

import zmq

from vfl.wire.endpoint import blamed
from vfl.wire.frames import Message, WireError, decode, encode, short_repr
from vfl.wire.gate import ConnectionGate
from vfl.wire.messages import Abort
from vfl.wire.resync_messages import Resync


class LeaderRoutes:
    """Mixin for the leader's channel: the route of each follower's connection, refusals, and its queue of messages."""

    followers: tuple[str, ...]
    gate: ConnectionGate
    _inbox: dict[str, deque[Message]]
    _route: dict[str, bytes]  # party -> routing id of its (first) authenticated connection
    _refused: set[bytes]  # routing ids of duplicate connections: told once, then ignored

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

    def _lost(self, peer: str) -> None:
        self._route.pop(peer, None)
        self._fds.pop(peer, None)

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
