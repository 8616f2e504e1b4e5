"""The typed RESYNC and REJOIN messages (vfl/wire/resync.py): parties agree again after a lost link or a restart.

In messages.py's pattern: RESYNC after a lost link, REJOIN after a party's process restarted.

A follower whose connection to the leader dropped sends `RESYNC{op: hello, nonce}` on each new connection; the leader
answers `RESYNC{op: state, nonce, echo, received, step}` (echo: the hello's nonce) and the follower closes with its own
`state` (echo: the leader's nonce). `received` is the sequence number of the last message the sender applied from the
other (-1: none), `step` the newest global training step it has started. RESYNC travels inside the run (its run id is
checked like any other message's) but outside the sequence numbers it re-establishes.

`REJOIN{step}` (leader -> follower) tells a follower under `--resume auto` that the run starts again from every party's
latest checkpoint at or below `step` (vfl/session/rejoin.py): the leader sends it when a follower's new process greets
a run that waits for it, when a follower of an earlier run reaches a restarted leader, and when the parties' HELLOs
name different resume steps. It travels outside any run and outside the sequence numbers (a restarted party has
neither); only the leader's authenticated key can send it.
"""

from __future__ import annotations

import re
from typing import Any

from vfl.wire.fields import MAX_INT, Choice, Int, Text, WireMessage, fail, wire_message
from vfl.wire.frames import Message

OPS = ("hello", "state")
NONCE_PATTERN = re.compile(r"^[0-9a-f]{32}$")


@wire_message
class Resync(WireMessage):
    """RESYNC (both ways): a resynchronisation after a lost connection, bound to the run and to fresh nonces."""

    TYPE = "RESYNC"
    op: str
    nonce: str
    echo: str | None = None
    received: int | None = None
    step: int | None = None
    FIELDS = (
        Choice("op", OPS),
        Text("nonce", 32, pattern=NONCE_PATTERN, domain="32 hex digits (the sender's fresh nonce)"),
        Text("echo", 32, optional=True, pattern=NONCE_PATTERN, domain="32 hex digits (the nonce answered)"),
        Int("received", -1, MAX_INT, optional=True),
        Int("step", 0, MAX_INT, optional=True),
    )

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> Resync:
        state = [values[k] is not None for k in ("echo", "received", "step")]
        if values["op"] == "state" and not all(state):
            raise fail(msg, "a RESYNC state carries 'echo', 'received' and 'step'")
        if values["op"] == "hello" and any(state):
            raise fail(msg, "a RESYNC hello carries its nonce only")
        return cls(**values)


@wire_message
class Rejoin(WireMessage):
    """REJOIN (leader -> follower): restart from this party's latest checkpoint at or below `step`, and greet again."""

    TYPE = "REJOIN"
    step: int
    FIELDS = (Int("step", 0, MAX_INT),)
