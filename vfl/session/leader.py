"""The leader's session with its followers: the handshake, the keepalive, and the cuts it fetches from them.

Training (leader/trainer.py), batch prediction and online serving all drive their followers through one
`LeaderSession`; what each asks for (a training batch, an evaluation range, rows to score) is theirs, the session only
knows who is connected, what cut width each follower announced, and how to keep every follower's deadline from
passing.

API (everything a new mode needs):

    session = LeaderSession(cfg, channel, device)
    hellos = session.greet(Hello, check, what)  # one hello per follower (identity = its key), problems -> one error;
                                                # then each follower's round trip: session.links[f] (link_probe.py)
    session.check_links()                       # `--check-link`: bandwidth too, and the followers told to stop
    session.start_run(nonces, welcome)          # run id bound to every nonce; welcome(f) posted to each follower
    session.digests[f].batch(ids)               # FORWARD's digest for f, .range(...) EVAL's and PREDICT_ROWS'
    session.post_all(Msg(...))                  # the same message to every follower, in `followers` order
    session.keepalive()                         # WAIT to every follower when its deadline is a quarter gone
    cut = session.remote_cut(peer, "eval", (split, start, stop), rows)  # the next EMBEDDING, checked, as a tensor
    session.expect_cut(peer, cls, check, rows)  # the next message of `cls` with a float32 (rows, cut_dim) `cut`

`greet` reads `cut_dim` and `timeout_s` from each hello when it has them; `session.cut_dims[f]` is then the width a
follower's cuts are checked against, and the keepalive period is a quarter of the shortest deadline (at least 1 s a
follower, so none can make the leader send WAIT non-stop).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from vfl.config.schema import PartyConfig
from vfl.session.cut_digest import SessionDigests
from vfl.session.handshake import new_nonce, run_id
from vfl.session.link_probe import CHECK_BULK_BYTES, CHECK_ROUNDS, LinkFigures, measure
from vfl.training.microbatch import check_micro
from vfl.wire import LeaderChannel, WireError
from vfl.wire.codecs import NONE, decode
from vfl.wire.messages import Embedding, Wait, WireMessage


class HandshakeError(WireError):
    """A follower disagrees with the leader on something training (or prediction) depends on."""


class LeaderSession:
    """The leader's side of one run: its followers, their cut widths, the keepalive, the cuts it fetches."""

    def __init__(self, cfg: PartyConfig, channel: LeaderChannel, device: torch.device | str = "cpu"):
        self.cfg = cfg
        self.ch = channel
        self.device = torch.device(device)
        self.followers: list[str] = list(cfg.network.followers)
        self.cut_dims: dict[str, int] = {}
        self.digests: dict[str, SessionDigests] = {}  # per follower, keyed by (run id, its nonce), from start_run
        self.embedding_codec = NONE  # training sets the agreed network.compression.embedding (EMBEDDING's `codec`)
        self.keepalive_every = cfg.network.timeout_s / 4
        self.links: dict[str, LinkFigures] = {}  # each follower's link, timed at the greeting (link_probe.py)
        self.last_sent = time.monotonic()

    # -- handshake ---------------------------------------------------------------------------
    def greet(
        self,
        hello_type: type[WireMessage],
        check: Callable[[str, WireMessage], list[str]],
        what: Callable[[str], str],
        error: str = "handshake failed",
    ) -> dict[str, WireMessage]:
        """One `hello_type` from every follower (in `followers` order), each checked to come from the party whose
        key sent it; check(f, hello) lists its disagreements with the leader, all raised at once as one
        HandshakeError "<error>: a; b". Returns {follower: hello}."""
        hellos, problems = {}, []
        for f in self.followers:
            hello = self.ch.expect(f, hello_type, what=what(f))
            if hello.party != f:  # the key decides who it is, never the name it gives
                raise HandshakeError(
                    f"handshake refused: the party holding {f}'s key introduced itself as {hello.party!r}"
                )
            problems += check(f, hello)
            hellos[f] = hello
            if getattr(hello, "cut_dim", None) is not None:
                self.cut_dims[f] = hello.cut_dim
            if getattr(hello, "timeout_s", None) is not None:
                # a follower chooses its deadline; at least 1 s, so it cannot make the leader send WAIT non-stop
                self.keepalive_every = min(self.keepalive_every, max(float(hello.timeout_s), 1.0) / 4)
        if problems:
            raise HandshakeError(f"{error}: " + "; ".join(problems))
        for i, f in enumerate(self.followers):  # every follower now waits for its welcome: time the link to each
            self._wait_others(i)
            self.links[f] = measure(self.ch, f)
            self.ch.post(f, self.links[f].report(final=False))
        return hellos

    def check_links(self, bulk_bytes: int = CHECK_BULK_BYTES) -> dict[str, LinkFigures]:
        """The link check (`--check-link`), after greet: each follower's round trip and bandwidth both ways, told
        to the follower in a final LINK_REPORT (it ends its session, exit 0). Returns {follower: figures}."""
        for i, f in enumerate(self.followers):
            self._wait_others(i)
            self.links[f] = measure(self.ch, f, CHECK_ROUNDS, bulk_bytes)
            self.ch.post(f, self.links[f].report(final=True))
        return dict(self.links)

    def _wait_others(self, probing: int) -> None:
        """WAIT to the followers after the `probing`-th, which wait for their turn (a fresh deadline each)."""
        for f in self.followers[probing + 1 :]:
            self.ch.post(f, Wait())

    def start_run(self, nonces: dict[str, str], welcome: Callable[[str], WireMessage], unbound: bool = False) -> str:
        """Set the run id (a hash of a fresh leader nonce and every follower's) and post welcome(f) to each follower
        (welcome may read the run id from the channel), and key each follower's id digests by (run id, its nonce);
        returns the run id. unbound: the welcomes travel outside the run, like the hellos (for a welcome type the
        channel does not exempt from its run check, as it does WELCOME)."""
        self.ch.run = run_id(new_nonce(), nonces)
        self.digests = {f: SessionDigests(self.ch.run, nonces[f]) for f in self.followers}
        messages = {f: welcome(f) for f in self.followers}
        run, self.ch.run = self.ch.run, "" if unbound else self.ch.run
        for f in self.followers:
            self.ch.post(f, messages[f])
        self.ch.run = run
        self.last_sent = time.monotonic()
        return run

    # -- while the leader works alone ------------------------------------------------------------
    def post_all(self, message: WireMessage) -> None:
        for f in self.followers:
            self.ch.post(f, message)

    def keepalive(self) -> None:
        """During long preparation, tell followers the leader is alive before their deadlines pass."""
        now = time.monotonic()
        if now - self.last_sent >= self.keepalive_every:
            self.post_all(Wait())
            self.last_sent = now

    # -- cuts ----------------------------------------------------------------------------------
    def remote_cut(
        self, peer: str, key: str, value, rows: int, micro: int | None = None, epoch: int | None = None
    ) -> torch.Tensor:
        """The next EMBEDDING from peer, checked to answer its `key` ("step", or "eval": (split, start, stop)) ==
        value (of `epoch`, and micro-batch `micro` of a training step) with a (rows, cut) cut (float32, by parse)."""
        msg: Embedding = self.ch.expect(peer, Embedding)
        got = msg.step if key == "step" else msg.eval
        if got != value or (epoch is not None and msg.epoch != epoch):
            raise WireError(
                f"EMBEDDING from {peer}: expected {key} {value!r}"
                + (f" of epoch {epoch}, got epoch {msg.epoch!r} " if epoch is not None else ", got ")
                + f"{key} {got!r}"
            )
        if micro is not None:
            check_micro(msg.micro, micro, f"EMBEDDING from {peer} for step {value}", WireError)
        return self._cut_tensor(peer, msg, rows)

    def expect_cut(
        self, peer: str, cls: type[WireMessage], check: Callable[[WireMessage], str | None], rows: int
    ) -> torch.Tensor:
        """The next `cls` message from peer (one with a float32 `cut` tensor); check(msg) returns what is wrong with
        it (None: nothing), raised as a WireError; its cut must be (rows, cut_dims[peer])."""
        msg = self.ch.expect(peer, cls)
        wrong = check(msg)
        if wrong:
            raise WireError(f"{cls.TYPE} from {peer}: {wrong}")
        return self._cut_tensor(peer, msg, rows)

    def _cut_tensor(self, peer: str, msg, rows: int) -> torch.Tensor:
        want = (rows, self.cut_dims[peer])
        if getattr(msg, "codec", None) is not None or not self.embedding_codec.is_none:  # a coded cut, checked
            cut = decode(self.embedding_codec, msg.codec, (msg.cut, msg.aux), want, f"{msg.TYPE} from {peer}")
            return torch.from_numpy(cut).to(self.device)
        if tuple(msg.cut.shape) != want:
            raise WireError(
                f"{msg.TYPE} from {peer}: expected float32 {want}, got {msg.cut.dtype} {tuple(msg.cut.shape)}"
            )
        return torch.from_numpy(msg.cut.copy()).to(self.device)
