"""Typed messages of online scoring (`python -m leader serve` / `python -m follower serve`), in messages.py's pattern.

A follower greets a serving leader with SERVE_HELLO (its checkpoint's identity, its cut width, its limits) and gets
SERVE_WELCOME; then the leader sends SERVE_IDS (a request's sample ids and its deadline) and the follower answers
SERVE_CUT (its cut of each id, zeros for the ids its table lacks, listed in `unknown`) or SERVE_REFUSED (its rate
limit, with when to come back). Nothing the leader sends depends on scores or labels: a follower learns the ids it
is asked about, which it logs and rate-limits (docs/security.md, Serving).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from vfl.wire.fields import Int, Real, RowCounted, Tensor, Text, WireMessage, fail, wire_message
from vfl.wire.frames import MAGIC, MAX_HEADER_BYTES, Message
from vfl.wire.predict_messages import TrainedHello, TrainedWelcome

MAX_SERVE_ROWS = 8192  # ids in one request: a SERVE_IDS is 64 KiB at most
MAX_DEADLINE_MS = 600_000
NONCE_PATTERN = re.compile(r"^[0-9a-f]{32}$")


@wire_message
class ServeHello(TrainedHello):
    """SERVE_HELLO (follower -> leader): who it is, which trained model it serves (its checkpoint's training run,
    model step and pair fingerprint, vfl/runs/record.py), its cut width, its deadline, and the most rows
    and rows per second it will answer."""

    TYPE = "SERVE_HELLO"
    timeout_s: float
    max_rows: int
    rows_per_s: float
    FIELDS = (
        *TrainedHello.trained_fields(
            Text("nonce", 32, pattern=NONCE_PATTERN, domain="32 hex digits (a fresh nonce)"), Text("fingerprint", 128)
        ),
        Real("timeout_s", 0, 86400),
        Int("max_rows", 1, MAX_SERVE_ROWS),
        Real("rows_per_s", 0, 1e12),
    )


@wire_message
class ServeWelcome(TrainedWelcome):
    """SERVE_WELCOME (leader -> follower): the serving session's run id and the follower's nonce echoed."""

    TYPE = "SERVE_WELCOME"


@wire_message
class ServeIds(RowCounted):
    """SERVE_IDS (leader -> follower): request `request`'s sample ids (int64, 1..MAX_SERVE_ROWS of them); the
    leader stops waiting `deadline_ms` after sending it."""

    TYPE = "SERVE_IDS"
    request: int
    ids: np.ndarray
    deadline_ms: int
    FIELDS = (Int("request"), Int("rows", 1, MAX_SERVE_ROWS), Int("deadline_ms", 1, MAX_DEADLINE_MS))
    TENSORS = (Tensor("ids", "int64", 1),)
    COUNTED = "ids"

    @classmethod
    def _rows_problem(cls, counted: np.ndarray, rows: int) -> str | None:
        if counted.size != rows:
            return f"tensor 'ids' must hold the {rows} ids of field 'rows', got {counted.size}"
        return None


@wire_message
class ServeCut(WireMessage):
    """SERVE_CUT (follower -> leader): the float32 (rows, cut_dim) cut of request `request`'s ids in their order;
    `unknown` lists the positions of the ids the follower's table lacks (their rows are zeros)."""

    TYPE = "SERVE_CUT"
    request: int
    cut: np.ndarray
    unknown: np.ndarray
    FIELDS = (Int("request"),)
    TENSORS = (Tensor("cut", "float32", 2), Tensor("unknown", "int64", 1))

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> ServeCut:
        rows, unknown = values["cut"].shape[0], values["unknown"]
        if unknown.size and (unknown.min() < 0 or unknown.max() >= rows or np.any(np.diff(unknown) <= 0)):
            raise fail(msg, f"tensor 'unknown' must list strictly increasing positions below {rows}")
        return cls(**values)


@wire_message
class ServeRefused(WireMessage):
    """SERVE_REFUSED (follower -> leader): request `request` is not answered (its rate limit, or too many rows);
    `retry_ms` says when the follower will answer again."""

    TYPE = "SERVE_REFUSED"
    request: int
    reason: str
    retry_ms: int
    FIELDS = (Int("request"), Text("reason", 500), Int("retry_ms", 0, MAX_DEADLINE_MS))


SERVE_MESSAGES = (ServeHello, ServeWelcome, ServeIds, ServeCut, ServeRefused)


def follower_message_bytes(rows: int, cut_dims: dict[str, int]) -> int:
    """The largest message a serving leader accepts from a follower once greeted: a SERVE_CUT of `rows` ids at the
    widest follower's cut (float32) with every position unknown (int64), and its header. Before the handshake
    (rows 0) a SERVE_HELLO's header is all that may arrive."""
    widest = max(cut_dims.values(), default=0)
    return rows * (4 * widest + 8) + MAX_HEADER_BYTES + len(MAGIC)
