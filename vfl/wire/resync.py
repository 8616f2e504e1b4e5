"""Surviving a lost connection: keep what the peer has not acknowledged, wait for its key, agree again, re-send.

With `network.reconnect_s` > 0, once a run is joined (its run id set), a dropped connection does not end it. Each side
keeps every numbered message the other has not acknowledged (every header's `ack` is the last sequence number its
sender received; keepalives included, so the numbering has no gap to forgive; ABORT ends the run and RESYNC is
outside the numbering), waits up to reconnect_s for the same authenticated key to come back
(ZeroMQ reconnects by itself, CurveZMQ handshakes again, ZAP admits only the configured keys), and then:

1. the follower sends `RESYNC{hello, nonce_f}` on its new connection;
2. the leader answers `RESYNC{state, nonce_l, echo=nonce_f, received, step}`;
3. the follower checks the echo, answers `RESYNC{state, nonce_f, echo=nonce_l, received, step}` and sends again every
   kept message after the leader's `received`; the leader checks the echo and does the same.

Each `state` is fresh for its receiver (it echoes the receiver's nonce of this resynchronisation) and bound to the run
(its run id is checked like any message's); a `state` that echoes another nonce is dropped. A side refuses a peer that
claims to have received a message never sent, or to have started a step ahead of the leader. After a resynchronisation
a message numbered below the next expected one, but above what this side announced, is a duplicate of one already
applied and is dropped; any other number but the next is refused (nothing is ever skipped). A message a peer
acknowledged is never sent again; a peer that keeps sending while it acknowledges less than ACK_LAG_MAX messages
behind is refused, and what is kept for a lost or silent one is capped at OUTBOX_MAX_MESSAGES and OUTBOX_MAX_BYTES
(memory stays bounded). One RESYNC hello a connection: a second on a connection already resynchronised is refused.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from vfl.wire.frames import WireError

OUTBOX_MAX_MESSAGES = 4096  # unacknowledged messages kept for one peer (a keepalive a second for reconnect_s fits)
OUTBOX_MAX_BYTES = 256 << 20  # and their bytes (an honest window: (staleness + 1) x micro-batches messages)
ACK_LAG_MAX = 256  # a peer that sends while more of this side's messages than this wait for its acknowledgement
NOT_KEPT = ("ABORT", "RESYNC")  # the end of a run, the resynchronisation itself (outside the numbering)
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
    stated: int | None = None  # the `received` this side put in its RESYNC state under way (what `agreed` records)
    acked: int = -1  # the highest acknowledgement the peer sent (a resynchronisation may not claim less)
    hello_from: object = None  # the connection (routing id) whose RESYNC hello the leader answered last
    back_at: float = 0.0
    last_notice: float = 0.0
    resyncs: int = 0
    duplicates: int = 0


class Reconnection:
    """A channel end's lost connections (off when reconnect_s is 0: the first loss ends the run, as before)."""

    def __init__(self, me: str, reconnect_s: float):
        self.me = me
        self.reconnect_s = float(reconnect_s)
        self.timeout_s = 0.0  # network.timeout_s, set by the channel end
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
        if link is None:
            return
        link.acked = max(link.acked, ack)
        while link.outbox and link.outbox[0].seq <= ack:
            link.outbox_bytes -= link.outbox.popleft().nbytes
        if len(link.outbox) > ACK_LAG_MAX:  # it sends, so it is not lost: it leaves this side's messages unacknowledged
            raise WireError(
                f"{peer} sent a message acknowledging {ack}, {len(link.outbox)} messages behind what was sent to it; "
                f"a party may leave at most {ACK_LAG_MAX} unacknowledged while it sends"
            )

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
            if link.back_at:  # a receive that was due during the loss is due a whole timeout after the peer came back
                deadline = max(deadline, link.back_at + self.timeout_s)
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

    def ran_out(self, peer: str | None) -> None:
        """A receive from `peer` reached its deadline: PeerGone when that deadline was `peer`'s wait for its lost (or
        silent) link (deadline() gave it), so the wait ends in its own line naming the step and the checkpoint, never
        as a generic timeout (the clock read here is past the one deadline() read)."""
        link = self.links.get(peer) if peer is not None else None
        if link is not None and (link.lost_since is not None or link.silent_since is not None):
            self._gone(peer, link)

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
            return seq
        if link is not None and link.announced is not None and link.announced < seq < want:
            link.duplicates += 1  # sent again after the resynchronisation, already applied: dropped
            return None
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
        if received < link.acked:
            raise PeerGone(
                f"RESYNC from {peer}: it claims to have received up to message {received}, but it acknowledged "
                f"{link.acked} before"
            )
        self.acknowledged(peer, received, sent)
        link.announced = link.stated if link.stated is not None else received_here
        link.stated = None
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
