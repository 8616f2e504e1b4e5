"""A follower's session with the leader: the handshake (nonce echoed, run joined) and the loop that answers it.

Training (follower/trainer.py), batch prediction and online serving each give a `FollowerSession` their handlers;
the session receives the leader's messages under the channel's deadline, answers WAIT (a keepalive: a fresh deadline
starts) itself, and calls the handler of every other message's class until the mode says it is done.

API (everything a new mode needs):

    session = FollowerSession(cfg, channel)
    welcome = session.greet(hello, Welcome, what)  # post our hello (its `nonce`), echo link probes, await the welcome
    session.join(welcome.run)                      # every later message carries this run id; digests keyed
    session.digests.batch(ids)                     # FORWARD's digest of a batch, .range(...) EVAL's and PREDICT_ROWS'
    session.serve({Msg: handler, ...}, done)       # handler(msg) per message until done() is true
    session.waited                                 # seconds the last message was awaited (step timing)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from vfl.config.schema import PartyConfig
from vfl.session.cut_digest import SessionDigests
from vfl.session.link_probe import LinkCheckDone, LinkFigures, ProbeAnswerer
from vfl.wire import FollowerChannel, WireError
from vfl.wire.link_messages import LinkProbe, LinkReport
from vfl.wire.messages import Wait, WireMessage


class FollowerSession:
    """A follower's side of one run: it reacts to the leader and never decides the schedule."""

    def __init__(self, cfg: PartyConfig, channel: FollowerChannel):
        self.cfg = cfg
        self.ch = channel
        self.waited = 0.0  # seconds the last message was awaited
        self.nonce = ""  # the nonce of the hello this follower sent (greet)
        self.digests: SessionDigests | None = None  # the session's keyed id digests, from join
        self.link: LinkFigures | None = None  # the link as the leader measured it at the greeting (LINK_REPORT)

    def greet(self, hello: WireMessage, welcome_type: type[WireMessage], what: str | None = None) -> WireMessage:
        """Post `hello` (whose `nonce` is fresh) and return the leader's `welcome_type` answer, refused unless it
        echoes that nonce (a replayed or foreign session); the leader's link probes before it are echoed
        (vfl/session/link_probe.py), and LinkCheckDone is raised when the leader ran the link check alone."""
        self.nonce = hello.nonce
        self.ch.post(hello)
        answer = ProbeAnswerer(self.ch)  # the leader's link probes come between hello and welcome
        while True:
            welcome = self.ch.expect(
                welcome_type,
                LinkProbe,
                LinkReport,
                Wait,  # the leader probes another follower meanwhile: a fresh deadline
                what=what or f"{welcome_type.TYPE} from the leader at {self.ch.endpoint} (is the leader running?)",
            )
            if isinstance(welcome, welcome_type):
                break
            if isinstance(welcome, Wait):
                continue
            if answer(welcome):
                raise LinkCheckDone(f"the leader measured the link ({answer.figures.describe()}) and ran nothing else")
        self.link = answer.figures
        if welcome.nonce != hello.nonce:
            raise WireError(
                f"{welcome_type.TYPE} from the leader does not echo this follower's HELLO nonce: a replayed or "
                "foreign session"
            )
        return welcome

    def join(self, run: str) -> None:
        """From now on every message carries (and must carry) the run id the leader chose, and the leader's requests
        name their rows by digests keyed by (run id, this follower's nonce) (vfl/session/cut_digest.py)."""
        self.ch.run = run
        self.digests = SessionDigests(run, self.nonce)

    def serve(self, handlers: dict[type[WireMessage], Callable], done: Callable[[], bool]) -> None:
        """Answer the leader's messages, each by the handler of its class, until done(); WAIT needs no handler."""
        table = dict(handlers)
        table.setdefault(Wait, lambda msg: None)  # a keepalive: the next receive has a fresh deadline
        while not done():
            t0 = time.perf_counter()
            msg = self.ch.expect(*table)
            self.waited = time.perf_counter() - t0
            table[type(msg)](msg)
