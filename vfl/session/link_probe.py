"""The link between the leader and each follower, measured over their own authenticated channel before the run.

Between the followers' hellos and the leader's welcome, the leader sends each follower LINK_PROBEs and times their
LINK_ECHOs (vfl/wire/link_messages.py): the round trip is the least of `rounds` empty probes (the least is the
propagation and the parties' scheduling, free of the queueing the other samples met), and with `bulk_bytes` > 0 each
direction's bandwidth is that many bytes, streamed in pads, over their time beyond that round trip. Each probe
carries a fresh nonce its echo must return, so no echo can leave before its probe arrives. Every run measures the
round trip (3 probes, a few round trips of time) and logs it; the link check (`--check-link` on the leader and on
each follower) measures bandwidth too, prints what the link calls for (vfl/netlink/bounds.py) and ends the session
with a final LINK_REPORT. The followers not being probed are sent WAIT meanwhile, and the leader gives a follower's
whole probe at most PROBE_DEADLINES of its channel's deadlines.

A follower echoes at most MAX_ECHOES probes a greeting, each echo at most PAD_BYTES and ECHO_BUDGET in all (what the
link check needs), and takes at most two LINK_REPORTs: a leader cannot use it as a traffic source. A follower exits
0 on a final report only when it was itself started with `--check-link`; otherwise the session ended without the run
it was started for, an error. The figures are the leader's; the follower is told them (LINK_REPORT).
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass

import numpy as np

from vfl.wire import WireError
from vfl.wire.endpoint import PeerAbort
from vfl.wire.link_messages import EMPTY_PAD, MAX_PROBES, LinkEcho, LinkProbe, LinkReport

RTT_ROUNDS = 3  # empty probes a run's greeting sends each follower
CHECK_ROUNDS = 5  # and the link check
CHECK_BULK_BYTES = 4 << 20  # the link check's bytes each way
PAD_BYTES = 256 << 10  # a probe's pad: what any training party's channel accepts (a PSI chunk's size)
ECHO_BUDGET = CHECK_BULK_BYTES  # the bytes a follower echoes in one greeting, at most
MAX_ECHOES = 40  # the probes a follower answers in one greeting (the link check sends 3 + 5 + 2 x 16 = 40)
MAX_REPORTS = 2  # the greeting's report, then the link check's final one
PROBE_DEADLINES = 4  # a follower's whole probe may take this many of the channel's deadlines
LATENCY_WARN_SPS = 100_000  # the front door's loopback rate on 2 cores (README): a schedule latency bound below it
# is told at HELLO, with the number


@dataclass(frozen=True)
class LinkFigures:
    """A measured link: round trip (s) and each direction's bandwidth in bytes/s (None: not measured)."""

    rtt_s: float
    down: float | None = None  # leader -> follower
    up: float | None = None  # follower -> leader

    def describe(self) -> str:
        def mbit(x: float | None) -> str:
            return "not measured" if x is None else f"{x * 8 / 1e6:,.1f} Mbit/s"

        text = f"RTT {self.rtt_s * 1000:.2f} ms"
        if self.down is not None or self.up is not None:
            text += f", leader->follower {mbit(self.down)}, follower->leader {mbit(self.up)}"
        return text

    def report(self, final: bool) -> LinkReport:
        def mbit(x: float | None) -> float | None:
            return None if x is None else min(max(x * 8 / 1e6, 1e-6), 1e7)

        return LinkReport(min(max(self.rtt_s * 1000, 1e-6), 1e7), int(final), mbit(self.down), mbit(self.up))


def measure(channel, peer: str, rounds: int = RTT_ROUNDS, bulk_bytes: int = 0) -> LinkFigures:
    """Probe `peer` over the leader's channel: the least round trip of `rounds` empty probes, then (bulk_bytes > 0)
    each direction's bandwidth from `bulk_bytes` streamed in pads of PAD_BYTES (posted back to back, so the time is
    one round trip plus the bytes' time). The follower must be between its hello and the welcome. A follower whose
    probe takes more than PROBE_DEADLINES x the channel's deadline is refused (WireError)."""
    pads = math.ceil(bulk_bytes / PAD_BYTES)
    if not 1 <= rounds or rounds + 2 * pads > MAX_PROBES:
        raise ValueError(f"rounds + 2 x pads must be at most {MAX_PROBES}, got rounds {rounds}, bulk {bulk_bytes} B")
    probes = iter(range(MAX_PROBES))
    deadline = time.monotonic() + PROBE_DEADLINES * channel.timeout_s
    rtt = min(_stream(channel, peer, probes, 1, EMPTY_PAD, 0, deadline) for _ in range(rounds))
    if not pads:
        return LinkFigures(rtt)
    sent = pads * PAD_BYTES
    down = _stream(channel, peer, probes, pads, np.zeros(PAD_BYTES, np.uint8), 0, deadline)
    up = _stream(channel, peer, probes, pads, EMPTY_PAD, PAD_BYTES, deadline)
    return LinkFigures(rtt, _rate(sent, down, rtt), _rate(sent, up, rtt))


def _stream(channel, peer: str, probes, count: int, pad: np.ndarray, echo_bytes: int, deadline: float) -> float:
    """Seconds from posting `count` probes back to back to their last echo, each echo checked."""
    sent = [(next(probes), secrets.token_hex(16)) for _ in range(count)]
    t0 = time.perf_counter()
    for n, nonce in sent:
        channel.post(peer, LinkProbe(n, nonce, echo_bytes, pad))
    for n, nonce in sent:
        echo: LinkEcho = channel.expect(peer, LinkEcho, what=f"LINK_ECHO {n} from {peer}")
        if echo.probe != n or echo.nonce != nonce or echo.pad.size != echo_bytes:
            raise WireError(
                f"LINK_ECHO from {peer}: expected probe {n} with its nonce and {echo_bytes} bytes, "
                f"got probe {echo.probe} with {'its' if echo.nonce == nonce else 'another'} nonce and {echo.pad.size}"
            )
    if time.monotonic() > deadline:
        raise WireError(f"LINK_ECHO from {peer}: its link probe took over {PROBE_DEADLINES} deadlines of the channel")
    return time.perf_counter() - t0


def _rate(size: int, seconds: float, rtt_s: float) -> float:
    """Bytes/s of `size` bytes that took `seconds` on a link of `rtt_s`; floored at a microsecond beyond the RTT."""
    return size / max(seconds - rtt_s, 1e-6)


class ProbeAnswerer:
    """The follower's side: echo each LINK_PROBE within the greeting's caps (MAX_ECHOES probes, PAD_BYTES an echo,
    ECHO_BUDGET in all) and keep a LINK_REPORT's figures (MAX_REPORTS at most)."""

    def __init__(self, channel):
        self.ch = channel
        self.answered = self.echoed = self.reports = 0
        self.figures: LinkFigures | None = None

    def __call__(self, msg) -> bool:
        """Handle one probe-phase message; True when it was a final LINK_REPORT (the leader ends the session)."""
        if isinstance(msg, LinkProbe):
            self.answered += 1
            self.echoed += msg.echo_bytes
            if self.answered > MAX_ECHOES:
                raise WireError(f"LINK_PROBE from the leader: more than {MAX_ECHOES} probes before the welcome")
            if msg.echo_bytes > PAD_BYTES or self.echoed > ECHO_BUDGET:
                raise WireError(
                    f"LINK_PROBE from the leader: asks for an echo of {msg.echo_bytes} bytes ({self.echoed} in all); "
                    f"a follower echoes at most {PAD_BYTES} a probe and {ECHO_BUDGET} a greeting"
                )
            pad = EMPTY_PAD if not msg.echo_bytes else np.zeros(msg.echo_bytes, np.uint8)
            self.ch.post(LinkEcho(msg.probe, msg.nonce, pad))
            return False
        self.reports += 1
        if self.reports > MAX_REPORTS:
            raise WireError(f"LINK_REPORT from the leader: more than {MAX_REPORTS} before the welcome")
        down = None if msg.down_mbit is None else msg.down_mbit * 1e6 / 8
        up = None if msg.up_mbit is None else msg.up_mbit * 1e6 / 8
        self.figures = LinkFigures(msg.rtt_ms / 1000, down, up)
        return bool(msg.final)


class LinkCheckDone(PeerAbort):
    """The leader ran the link check alone (`--check-link`): the session ends here, without a run."""


def follower_link_check(done: LinkCheckDone | None, asked: bool, party: str) -> str:
    """A follower's outcome of the greeting: the line to log when it was started with `--check-link` (`asked`) and
    the leader ran the check (exit 0); a PeerAbort when only one of them did (a run it did not start for, or none)."""
    if done is not None and asked:
        return f"follower {party}: {done}"
    if done is not None:
        raise PeerAbort(f"{done}; follower {party} was started to train, so nothing it was started for ran")
    if asked:
        raise PeerAbort(f"follower {party} was started with --check-link, but the leader started a run")
    return ""


def latency_note(link: LinkFigures, batch_size: int, staleness: int) -> str | None:
    """A warning when the round trip alone bounds a training schedule below LATENCY_WARN_SPS samples/s (each step
    waits a round trip, hidden only across `staleness` + 1 batches in flight), with the number and the staleness
    that lifts it; None when it does not."""
    bound = batch_size * (staleness + 1) / max(link.rtt_s, 1e-9)
    if bound >= LATENCY_WARN_SPS:
        return None
    lifts = next(
        (k for k in (1, 2, 4, 8, 16) if k > staleness and batch_size * (k + 1) / link.rtt_s >= LATENCY_WARN_SPS), None
    )
    advice = (
        f"train.staleness={lifts} lifts that bound to {batch_size * (lifts + 1) / link.rtt_s:,.0f}"
        if lifts is not None
        else "a larger train.batch_size or train.staleness raises it"
    )
    return (
        f"this run is latency bound: at RTT {link.rtt_s * 1000:.1f} ms, batch {batch_size} and train.staleness="
        f"{staleness}, training runs at most {bound:,.0f} samples/s whatever the parties' compute; {advice} "
        "(docs/deploy-wan.md; `--check-link` measures bandwidth too)"
    )


def check_report(follower: str, link: LinkFigures, cut_dim: int, batch_size: int, staleness: int) -> str:
    """The link check's lines for one follower: its figures, the run's bounds over that link, what it calls for
    (vfl/netlink/bounds.py), assuming the parties compute LATENCY_WARN_SPS samples/s on loopback."""
    from vfl.netlink.bounds import Link, report

    bandwidth = min(x for x in (link.down, link.up, math.inf) if x is not None)
    traffic = Link(link.rtt_s, bandwidth, 4.0 * cut_dim, 4.0 * cut_dim, float(LATENCY_WARN_SPS), batch_size)
    return "\n".join(
        [
            f"link to {follower}: {link.describe()}",
            report(traffic, cut_dim, staleness),
            f"(assumed: the parties compute {LATENCY_WARN_SPS:,} samples/s on loopback, the front door's rate on 2 "
            "cores; `python -m vfl.netlink bounds --compute-sps N ...` recomputes with yours)",
        ]
    )


def announce(links: dict[str, LinkFigures], batch_size: int, staleness: int, log) -> None:
    """Log each follower's link as the greeting timed it, and warn where its round trip bounds training."""
    for f, link in links.items():
        log(f"link to {f}: {link.describe()} (timed at its HELLO)")
        note = latency_note(link, batch_size, staleness)
        if note:
            log.warning(f"warning: link to {f}: {note}")
