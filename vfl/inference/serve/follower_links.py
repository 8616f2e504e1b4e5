"""The serving leader's followers: which are down and why, their keepalive, and a restarted follower's hello."""

from __future__ import annotations


class FollowerLinks:
    """The followers of the serving leader's channel: `down` (follower -> why), `late` (follower -> the number of a
    request whose answer is still on its way), WAIT every `keepalive_every` seconds while idle, and readmission.

    A follower whose connection dropped, that aborted or that broke the protocol is down: requests fail at once with
    that reason (vfl/inference/serve/leader.py) until it connects again and its SERVE_HELLO fits the run (same run and
    cut width, `check_hello`); then it is welcomed and back. A follower that broke the protocol is told why with an
    ABORT of its own error only; no other follower hears of it."""

    def __init__(self, channel, followers: list[str], cut_dims: dict[str, int], clock):
        self.ch, self.followers, self.cut_dims, self.clock = channel, followers, cut_dims, clock
        self.keepalive_every = float(channel.timeout_s) / 4
        self.down: dict[str, str] = {}  # follower -> why it is down
        self.late: dict[str, int] = {}  # follower -> request number of an answer still on its way
        self.last_sent = clock()
        self.check_hello = None  # (f, hello) -> problems, for a follower that connects again (sent to it: no path)
        self.log = None

    def post(self, f: str, message) -> None:
        """Send f a message; a connection that is gone marks f down."""
        from vfl.wire.endpoint import PeerLost, PeerTimeout

        try:
            self.ch.post(f, message)
        except (PeerLost, PeerTimeout) as e:
            self.mark_down(f, f"{f} is down ({e})")

    def mark_down(self, f: str, why: str) -> None:
        """f's connection is gone: requests fail at once until it greets again (a restarted follower)."""
        self.down[f] = why
        self.late.pop(f, None)
        self.ch.forget(f)
        if self.log is not None:
            self.log.warning(f"leader: {why}; requests fail until it is back (`python -m follower serve`)")

    def mark_lost(self, e) -> None:
        """Some follower's connection dropped (e: the channel's PeerLost): each one the channel no longer holds is
        down."""
        for g in self.followers:
            if g not in self.ch.alive and g not in self.down:
                self.mark_down(g, f"{g} is down ({e})")

    def peer_error(self, e) -> None:
        """The follower that e names (e.peer) aborted or sent what the protocol forbids: it alone is down (and told
        why, with its own error only) until it greets again. An error that names
        no follower is the channel's own (its connection gate failed): raised, and the scorer stops."""
        from vfl.wire.endpoint import PeerAbort
        from vfl.wire.messages import Abort

        f = e.peer
        if f not in self.cut_dims:
            raise e
        if isinstance(e, PeerAbort):
            self.mark_down(f, f"{f} is down ({e})")
            return
        self.post(f, Abort(f"the serving leader refused your message: {e}"))
        self.mark_down(f, f"{f} is down (protocol error: {e})")

    def keepalive(self) -> None:
        """WAIT to every follower that is up once keepalive_every seconds passed since the leader last sent."""
        from vfl.wire.messages import Wait

        if self.clock() - self.last_sent < self.keepalive_every:
            return
        for f in self.followers:
            if f not in self.down:
                self.post(f, Wait())
        self.last_sent = self.clock()

    def readmit(self) -> None:
        """Greet a follower that was down and has connected again (SERVE_HELLO of the same run and cut width)."""
        from vfl.wire import WireError
        from vfl.wire.endpoint import PeerLost, PeerTimeout
        from vfl.wire.messages import Abort
        from vfl.wire.serve_messages import ServeHello, ServeWelcome

        for f in list(self.down):
            self.ch.timeout_s = 0.001
            try:
                hello = self.ch.expect(f, ServeHello)
            except (PeerTimeout, PeerLost):  # nobody there yet, or a connection that went away again
                continue
            except WireError as e:  # f's new connection (or another follower) broke the protocol
                self.peer_error(e)
                continue
            problems = self.check_hello(f, hello) if self.check_hello is not None else []
            if hello.cut_dim != self.cut_dims[f]:
                problems.append(f"{f} now cuts {hello.cut_dim} values, {self.cut_dims[f]} before")
            if problems:  # told why (it stops with the reason), and down until a follower that fits greets
                why = "; ".join(problems)
                self.post(f, Abort(f"the serving leader refused this connection: {why}"))
                self.down[f] = f"{f} is down (its new connection was refused: {why})"
                self.ch.forget(f)
                if self.log is not None:
                    self.log.warning(f"leader: {self.down[f]}")
                continue
            try:
                self.ch.post(f, ServeWelcome(self.ch.run, hello.nonce))
            except WireError as e:  # gone again before its welcome: it stays down, serving goes on
                self.down[f] = f"{f} is down (its new connection dropped before it was welcomed: {e})"
                self.ch.forget(f)
                continue
            del self.down[f]
            self.late.pop(f, None)
            if self.log is not None:
                self.log(f"leader: {f} is back")
