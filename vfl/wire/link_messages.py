"""Typed messages of the link probe (vfl/session/link_probe.py), in messages.py's pattern.

Between a follower's hello and the leader's welcome (training, batch prediction and serving alike) the leader may
send LINK_PROBE: a probe number, a pad of bytes (its bandwidth towards the follower) and how many bytes the follower's
LINK_ECHO carries back (its bandwidth towards the leader); the follower echoes at once. LINK_REPORT tells the follower
what the leader measured, and with `final` 1 that the leader asked for the link check alone (no run follows). Nothing
here depends on data or labels: the pads are zeros.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from vfl.wire.fields import Int, Real, Tensor, Text, WireMessage, fail, wire_message
from vfl.wire.frames import Message

MAX_PROBE_BYTES = 8 << 20  # a pad on the wire, either way (what a follower echoes is capped lower: link_probe.py)
MAX_PROBES = 64  # a probe's number is below it
EMPTY_PAD = np.zeros(0, np.uint8)
NONCE_PATTERN = re.compile(r"^[0-9a-f]{32}$")
_NONCE = Text("nonce", 32, pattern=NONCE_PATTERN, domain="32 hex digits (the probe's fresh nonce)")


class PaddedProbe(WireMessage):
    """A probe or its echo: a pad of zeros (uint8, at most MAX_PROBE_BYTES) whose travel times one direction."""

    TENSORS = (Tensor("pad", "uint8", 1),)

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message):
        if values["pad"].size > MAX_PROBE_BYTES:
            raise fail(msg, f"tensor 'pad' must hold at most {MAX_PROBE_BYTES} bytes, got {values['pad'].size}")
        return cls(**values)


@wire_message
class LinkProbe(PaddedProbe):
    """LINK_PROBE (leader -> follower): probe number `probe`, a fresh nonce the echo returns (no echo can be sent
    before its probe arrives), a pad of zeros, and the bytes the echo must carry."""

    TYPE = "LINK_PROBE"
    probe: int
    nonce: str
    echo_bytes: int
    pad: np.ndarray
    FIELDS = (Int("probe", 0, MAX_PROBES - 1), _NONCE, Int("echo_bytes", 0, MAX_PROBE_BYTES))


@wire_message
class LinkEcho(PaddedProbe):
    """LINK_ECHO (follower -> leader): probe `probe` answered with its nonce and the pad of `echo_bytes` zeros it
    asked for."""

    TYPE = "LINK_ECHO"
    probe: int
    nonce: str
    pad: np.ndarray
    FIELDS = (Int("probe", 0, MAX_PROBES - 1), _NONCE)


@wire_message
class LinkReport(WireMessage):
    """LINK_REPORT (leader -> follower): the round trip and each direction's bandwidth (None: not measured) the
    leader measured; `final` 1: the leader ran the link check alone and ends the session."""

    TYPE = "LINK_REPORT"
    rtt_ms: float
    final: int
    down_mbit: float | None = None
    up_mbit: float | None = None
    FIELDS = (
        Real("rtt_ms", 0, 1e7),
        Int("final", 0, 1),
        Real("down_mbit", 0, 1e7, optional=True),
        Real("up_mbit", 0, 1e7, optional=True),
    )


LINK_MESSAGES = (LinkProbe, LinkEcho, LinkReport)
