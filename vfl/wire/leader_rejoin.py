"""The leader's side of a reconnection: RESYNC on a follower's new connection, and REJOIN for a restarted run.

A follower whose connection dropped greets again with a RESYNC hello on a new connection; the leader answers with its
state and a fresh nonce, and the state that echoes that nonce re-establishes the numbering (resync.py). A new process
of a lost follower (a greeting of no run) raises PeerRestarted; a follower of the run a restarted leader continues
(--resume auto) is told to REJOIN from `rejoin_step`. LeaderChannel (leader_channel.py) builds on this.
"""

from __future__ import annotations

import secrets

import zmq

from vfl.wire.endpoint import ABORT_SEND_MS, UNBOUND_TYPES, PeerLost, blamed, send_frames
from vfl.wire.frames import Message, WireError, decode, encode
from vfl.wire.gate import ConnectionGate
from vfl.wire.resync import PeerRestarted, Reconnection
from vfl.wire.resync_messages import Rejoin, Resync


class LeaderRejoin:
    """Mixin for the leader's channel: a lost follower's reconnection resynchronised, a restarted run's REJOIN."""

    gate: ConnectionGate
    rejoin_step: int | None
    resync: Reconnection
    _route: dict[str, bytes]
    _refused: set[bytes]

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
