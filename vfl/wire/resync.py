"""Surviving a lost connection: keep what the peer has not acknowledged, wait for its key, agree again, re-send.

With `network.reconnect_s` > 0, once a run is joined (its run id set), a dropped connection does not end it. Each side
keeps every message the other has not acknowledged (every header's `ack` is the last sequence number its sender
received; WAIT, ABORT and RESYNC are not kept), waits up to reconnect_s for the same authenticated key to come back
(ZeroMQ reconnects by itself, CurveZMQ handshakes again, ZAP admits only the configured keys), and then:

1. the follower sends `RESYNC{hello, nonce_f}` on its new connection;
2. the leader answers `RESYNC{state, nonce_l, echo=nonce_f, received, step}`;
3. the follower checks the echo, answers `RESYNC{state, nonce_f, echo=nonce_l, received, step}` and sends again every
   kept message after the leader's `received`; the leader checks the echo and does the same.

Each `state` is fresh for its receiver (it echoes the receiver's nonce of this resynchronisation) and bound to the run
(its run id is checked like any message's); a `state` that echoes another nonce is dropped. A side refuses a peer that
claims to have received a message never sent, or to have started a step ahead of the leader. After a resynchronisation
a message numbered below the next expected one, but above what this side announced, is a duplicate of one already
applied and is dropped; the first message after it may skip sequence numbers the sender did not keep (keepalives).
A message a peer acknowledged is never sent again, and a peer that acknowledges nothing while the run goes on is
stopped once it holds OUTBOX_MAX_MESSAGES or OUTBOX_MAX_BYTES here (memory stays bounded).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from vfl.wire.frames import WireError

OUTBOX_MAX_MESSAGES = 4096  # unacknowledged messages kept for one peer
OUTBOX_MAX_BYTES = 2 << 30  # and their bytes
NOT_KEPT = ("WAIT", "ABORT", "RESYNC")  # keepalives, the end of a run, the resynchronisation itself
NOTICE_EVERY_S = 30.0  # a waiting party says how long it has waited this often


class PeerGone(WireError):
    """A lost peer did not come back within network.reconnect_s (or a resynchronisation was refused)."""


class PeerRestarted(WireError):
    """A new process of a lost follower greeted a run that waits for it (it restarted): under `--resume auto` every
    party starts again from a common checkpoint (vfl/session/rejoin.py); otherwise the run stops with this line."""

    def __init__(self, peer: str, step: int):
        super().__init__(
            f"{peer} restarted (a new process of it greeted this run, which waited for it at step {step}); restart "
            "every party with --resume auto to rejoin the run from their latest common checkpoint"
        )
        self.peer, self.step = peer, step


class RejoinRequested(WireError):
    """The leader's REJOIN: this party starts again from its latest checkpoint at or below `step`."""

    def __init__(self, step: int, why: str = ""):
        super().__init__(
            why
            or f"the leader restarts the run from every party's latest checkpoint at or below step {step}; "
            "restart this party with --resume auto to rejoin it"
        )
        self.step = step


@dataclass
class Kept:
    """A message sent and not yet acknowledged: its number, type, step and frames (bytes, as sent)."""

    seq: int
    type: str
    step: int | None
    frames: list[bytes]
    nbytes: int


@dataclass
class PeerLink:
    """One peer's side of the resynchronisation."""

    outbox: deque[Kept] = field(default_factory=deque)
    outbox_bytes: int = 0
    lost_since: float | None = None  # the connection dropped then; messages are kept, not sent, until resynchronised
    lost_step: int = 0
    silent_since: float | None = None  # no message within network.timeout_s (its connection still open)
    nonce: str = ""  # this side's nonce of the resynchronisation under way
    announced: int | None = None  # the `received` this side announced at the last resynchronisation
    gap_ok: bool = False  # the next message may skip numbers the sender did not keep
    back_at: float = 0.0
    last_notice: float = 0.0
    resyncs: int = 0
    duplicates: int = 0


class Reconnection:
    """A channel end's lost connections (off when reconnect_s is 0: the first loss ends the run, as before)."""

    def __init__(self, me: str, reconnect_s: float):
        self.me = me
        self.reconnect_s = float(reconnect_s)
        self.links: dict[str, PeerLink] = {}
        self.progress = 0  # the newest global training step this side has started (set by the step exchange)
        self.notice: Callable[[str], None] | None = None
        self.resume_hint: Callable[[], str] = lambda: ""

    def link(self, peer: str) -> PeerLink:
        return self.links.setdefault(peer, PeerLink())

    def lost(self, peer: str) -> bool:
        link = self.links.get(peer)
        return link is not None and link.lost_since is not None

    def _say(self, text: str) -> None:
        if self.notice is not None:
            self.notice(text)

    # -- what is kept ----------------------------------------------------------------------------
    def keep(self, peer: str, seq: int, type_: str, meta: dict | None, frames: list) -> None:
        """Keep a message just numbered for `peer` until the peer acknowledges it."""
        if type_ in NOT_KEPT:
            return
        link = self.link(peer)
        copied = [bytes(f) for f in frames]
        nbytes = sum(len(f) for f in copied)
        if len(link.outbox) >= OUTBOX_MAX_MESSAGES or link.outbox_bytes + nbytes > OUTBOX_MAX_BYTES:
            raise PeerGone(
                f"{peer} acknowledged none of the last {len(link.outbox)} messages ({link.outbox_bytes} bytes) sent "
                f"to it; a party may leave at most {OUTBOX_MAX_MESSAGES} messages or {OUTBOX_MAX_BYTES} bytes "
                "unacknowledged"
            )
        step = (meta or {}).get("step")
        link.outbox.append(Kept(seq, type_, step if isinstance(step, int) else None, copied, nbytes))
        link.outbox_bytes += nbytes

    def acknowledged(self, peer: str, ack: int, sent: int) -> None:
        """The peer received every message up to `ack`; `sent`: how many this side numbered for it."""
        if ack >= sent:
            raise WireError(f"{peer} acknowledges message {ack}, but only {sent} were sent to it")
        link = self.links.get(peer)
        while link is not None and link.outbox and link.outbox[0].seq <= ack:
            link.outbox_bytes -= link.outbox.popleft().nbytes

    # -- a loss and the wait -----------------------------------------------------------------------
    def on_loss(self, peer: str, enabled: bool) -> bool:
        """The connection to `peer` dropped: True when this side waits for it (else the caller raises)."""
        if not enabled:
            return False
        link = self.link(peer)
        if link.lost_since is None:
            link.lost_since = link.last_notice = time.monotonic()
            link.lost_step = self.progress
            link.silent_since = None
            self._say(
                f"link to {peer} lost at step {self.progress}; waiting for it to come back "
                f"(0 s of {self.reconnect_s:g})"
            )
        return True

    def deadline(self, peer: str | None, deadline: float, enabled: bool) -> float:
        """The deadline of a receive awaited from `peer` (None: anyone) that was due at `deadline`; raises PeerGone
        for any peer lost (or silent) longer than reconnect_s, and says how long each has been waited for."""
        now = time.monotonic()
        for p, link in self.links.items():
            since = link.lost_since if link.lost_since is not None else link.silent_since
            if since is None:
                continue
            if now - since > self.reconnect_s:
                self._gone(p, link)
            if now - link.last_notice >= NOTICE_EVERY_S:
                link.last_notice = now
                self._say(
                    f"link to {p} lost at step {link.lost_step}; waiting for it to come back "
                    f"({now - since:.0f} s of {self.reconnect_s:g})"
                )
        link = self.links.get(peer) if peer is not None else None
        if link is not None:
            if link.lost_since is not None:
                return link.lost_since + self.reconnect_s
            deadline = max(deadline, link.back_at)
            if link.silent_since is not None:
                return link.silent_since + self.reconnect_s
            if now >= deadline and enabled and peer is not None:
                link.silent_since = link.last_notice = now
                link.lost_step = self.progress
                self._say(
                    f"link to {peer} lost at step {self.progress} (no message within network.timeout_s); waiting "
                    f"for it to come back (0 s of {self.reconnect_s:g})"
                )
                return now + self.reconnect_s
        return deadline

    def heard(self, peer: str) -> None:
        """A message from `peer` was applied: a silent peer is back on its own connection."""
        link = self.links.get(peer)
        if link is not None and link.silent_since is not None and link.lost_since is None:
            self._say(f"link to {peer} back after {time.monotonic() - link.silent_since:.1f} s; nothing to resend")
            link.silent_since = None

    def _gone(self, peer: str, link: PeerLink) -> None:
        hint = self.resume_hint()
        raise PeerGone(
            f"link to {peer} lost at step {link.lost_step} and not back within network.reconnect_s="
            f"{self.reconnect_s:g} s" + (f"; {hint}" if hint else "")
        )

    # -- the exchange ------------------------------------------------------------------------------
    def sequence(self, peer: str, seq: int, want: int) -> int | None:
        """The number the message `seq` from `peer` takes when `want` was expected, or None: a duplicate, dropped.
        WireError for a replayed, reordered or lost message outside a resynchronisation's window."""
        link = self.links.get(peer)
        if seq == want:
            if link is not None:
                link.gap_ok = False
            return seq
        if link is not None and link.announced is not None and link.announced < seq < want:
            link.duplicates += 1  # sent again after the resynchronisation, already applied: dropped
            return None
        if link is not None and link.gap_ok and seq > want:
            link.gap_ok = False  # the sender kept no keepalive: the numbers it skipped carried nothing to apply
            return seq
        raise WireError(f"message from {peer} has sequence number {seq}, expected {want} (replayed or lost message)")

    def agreed(self, peer: str, received: int, step: int, sent: int, received_here: int, leader: bool) -> list[Kept]:
        """The peer's fresh state: it applied every message up to `received` and started `step`. Returns the kept
        messages to send again (after `received`); WireError when the claims cannot hold."""
        if received >= sent:
            raise PeerGone(
                f"RESYNC from {peer}: it claims to have received message {received}, but only {sent} were sent to it"
            )
        link = self.link(peer)
        if leader and step > self.progress:
            raise PeerGone(
                f"RESYNC from {peer}: it claims to have started step {step}, but the leader is at step {self.progress}"
            )
        if not leader and step < self.progress:
            raise PeerGone(
                f"RESYNC from {peer}: the leader claims to be at step {step}, but this party started step "
                f"{self.progress}"
            )
        self.acknowledged(peer, received, sent)
        link.announced, link.gap_ok = received_here, True
        again = list(link.outbox)
        waited = time.monotonic() - (link.lost_since or time.monotonic())
        what = (
            f"resending step {self.progress} ({len(again)} message(s): {', '.join(k.type for k in again[:4])}"
            + (", ..." if len(again) > 4 else "")
            + ")"
            if again
            else "nothing was in flight"
        )
        self._say(f"link to {peer} back after {waited:.1f} s; {what}")
        link.lost_since, link.silent_since, link.nonce = None, None, ""
        link.back_at = time.monotonic()
        link.resyncs += 1
        return again
