"""The batch-prediction messages (vfl/inference/predict/): the fingerprint handshake, row requests and cuts.

A prediction session, in order:

| type | dir | one line |
|---|---|---|
| PREDICT_HELLO | F>L | nonce, party, protocol, the checkpoint's training run and model step, their fingerprint, cut_dim, rows of new ids, timeout_s |
| PREDICT_WELCOME | L>F | the session's run id, the nonce echoed, the largest request (rows) |
| PSI | both | the private set intersection of the new ids, as in training |
| PREDICT_ROWS | L>F | the cut of rows [start, stop) of the intersection (ascending ids), whose ids hash to `digest` |
| PREDICT_CUT | F>L | that cut, float32 (stop - start, cut_dim) |
| PREDICT_DONE | L>F | prediction over after `rows` rows; the follower answers BYE |

A follower receives nothing computed from the scores or the labels: the requests walk the intersection in ascending
id order in fixed-size ranges, whatever the model or the labels are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vfl.wire.fields import Field, Int, Real, Tensor, Text, WireMessage, fail, wire_message
from vfl.wire.frames import MAX_DIM, Message

HEX32 = "32 hex digits"


def _hex(name: str) -> Text:
    import re

    return Text(name, 32, pattern=re.compile(r"^[0-9a-f]{32}$"), domain=HEX32)


@wire_message
class TrainedHello(WireMessage):
    """The fields that open a follower's hello to a trained leader (PREDICT_HELLO here, SERVE_HELLO in
    serve_messages.py): its nonce, party and protocol, its checkpoint's training run, model step and pair fingerprint
    (vfl/runs/record.py), and its cut width."""

    nonce: str
    party: str
    protocol: int
    run: str
    step: int
    fingerprint: str
    cut_dim: int

    @staticmethod
    def trained_fields(nonce: Field, fingerprint: Field) -> tuple[Field, ...]:
        """These seven fields' domains in wire order, with the hello's own nonce and fingerprint domains."""
        return (
            nonce,
            Text("party", 64),
            Int("protocol", 0, 255),
            Text("run", 64),
            Int("step"),
            fingerprint,
            Int("cut_dim", 2, 4096),
        )


@wire_message
class PredictHello(TrainedHello):
    """PREDICT_HELLO (follower -> leader): what the follower's checkpoint was trained in, and its fingerprint
    (vfl/runs/record.pair_fingerprint), compared with the leader's own."""

    TYPE = "PREDICT_HELLO"
    rows: int
    timeout_s: float
    FIELDS = (
        *TrainedHello.trained_fields(_hex("nonce"), _hex("fingerprint")),
        Int("rows"),
        Real("timeout_s", 0, 86400),
    )


@wire_message
class TrainedWelcome(WireMessage):
    """The fields that open a trained leader's welcome (PREDICT_WELCOME here, SERVE_WELCOME in serve_messages.py):
    the session's run id and the follower's nonce echoed."""

    run: str
    nonce: str
    FIELDS = (Text("run", 64), Text("nonce", 64))


@wire_message
class PredictWelcome(TrainedWelcome):
    """PREDICT_WELCOME (leader -> follower): the session's run id, the follower's nonce, the largest request."""

    TYPE = "PREDICT_WELCOME"
    batch_rows: int
    FIELDS = (*TrainedWelcome.FIELDS, Int("batch_rows", 1, MAX_DIM))


@wire_message
class PredictRows(WireMessage):
    """PREDICT_ROWS (leader -> follower): the cut of rows [start, stop) of the intersection, ids hashing to digest."""

    TYPE = "PREDICT_ROWS"
    start: int
    stop: int
    digest: str
    FIELDS = (Int("start"), Int("stop"), Text("digest", 64))

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> PredictRows:
        if not values["start"] < values["stop"]:
            raise fail(msg, f"range {values['start']}..{values['stop']} is empty")
        return cls(**values)


@wire_message
class PredictCut(WireMessage):
    """PREDICT_CUT (follower -> leader): the float32 (stop - start, cut_dim) cut of the rows asked for."""

    TYPE = "PREDICT_CUT"
    cut: np.ndarray
    start: int
    stop: int
    FIELDS = (Int("start"), Int("stop"))
    TENSORS = (Tensor("cut", "float32", 2),)


@wire_message
class PredictDone(WireMessage):
    """PREDICT_DONE (leader -> follower): prediction is over after `rows` rows; the follower answers BYE."""

    TYPE = "PREDICT_DONE"
    rows: int
    FIELDS = (Int("rows"),)


PREDICT_MESSAGES = (PredictHello, PredictWelcome, PredictRows, PredictCut, PredictDone)
