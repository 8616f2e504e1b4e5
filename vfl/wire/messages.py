"""Typed wire messages: one frozen class per message type, with its fields' domains, encoded and decoded here only.

The PSI message is in psi_messages.py, the base class and the field domains in fields.py; MESSAGE_CLASSES here
holds every type.

A class's FIELDS list its meta keys in wire order, each with its domain; TENSORS list its tensors with their dtype
and rank. `to_wire()` gives (meta, tensors) for frames.encode, leaving out the optional fields that are None, so the
bytes are those the protocol always sent. `from_wire(msg)` checks every field and tensor of a decoded frames.Message
and raises WireError naming the type, the sender and the field: a missing required field, an unknown one, a bool
where an integer belongs, a string over its cap, a tensor of the wrong count, dtype or rank. What depends on the
step or on the receiver's data (shapes against the batch, a range against a split's size, a digest against the
receiver's ids, agreement with the receiver's own settings) is checked by the receiver, after parse().
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from vfl.wire.codecs import WIRE_NAMES, layout
from vfl.wire.fields import (
    SPLITS,
    Choice,
    EvalRange,
    Field,
    Int,
    PerSplit,
    Real,
    RowCounted,
    Tensor,
    Text,
    WireMessage,
    fail,
    is_text,
    wire_message,
)
from vfl.wire.frames import MAX_DIM, MAX_HEADER_BYTES, Message, WireError
from vfl.wire.link_messages import LINK_MESSAGES
from vfl.wire.predict_messages import PREDICT_MESSAGES
from vfl.wire.psi_messages import Psi
from vfl.wire.resync_messages import Rejoin, Resync
from vfl.wire.serve_messages import SERVE_MESSAGES

PHASES = ("prior",)  # FORWARD / GRADIENT / EVAL of LP-2ST's stage one carry phase "prior"
MAX_CUT_DIM = 4096  # the widest cut a party may announce
MAX_RANKS = 1 << 16
MAX_REASON = 2000  # characters of an ABORT's reason that travel (and that a receiver keeps)
MAX_PRIOR_EPOCHS = 1000  # privacy.label_dp.prior_epochs' domain
MAX_STALENESS = 16  # train.staleness' domain (vfl/training/staleness.py; 0 travels as an absent field)
NONCE_PATTERN = re.compile(r"^[0-9a-f]{32}$")
CODEC_PATTERN = re.compile(r"^(fp16|bf16|int8:[2-8]|topk:[0-9.e-]{1,24})$")  # vfl/wire/codecs.Codec.agreement
HEX32_PATTERN = re.compile(r"^[0-9a-f]{32}$")  # a range digest (EVAL)


class RankedHandshake(WireMessage):
    """A handshake message (HELLO, WELCOME) that names its sender's rank of `ranks` under N ranks per party: both
    fields, or neither for one rank."""

    RANK_FIELDS = (Int("rank", 0, MAX_RANKS - 1, optional=True), Int("ranks", 1, MAX_RANKS, optional=True))

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message):
        rank, ranks = values["rank"], values["ranks"]
        if (rank is None) != (ranks is None):
            raise fail(msg, "fields 'rank' and 'ranks' come together (both, or neither for one rank)")
        if rank is not None and rank >= ranks:
            raise fail(msg, f"field 'rank' must be below 'ranks', got rank {rank} of {ranks}")
        return cls(**values)


def _below_one(field: Field) -> Field:
    """A Real field in (lo, 1], narrowed to (lo, 1): a moving average's decay (train.ema_decay) is below 1."""
    return dataclasses.replace(
        field,
        domain=field.domain.replace("1]", "1)") + " (absent: off)",
        accepts=lambda v: field.accepts(v) and v < 1,
    )


_CODEC_DOMAIN = "a codec: fp16, bf16, int8:BITS (2..8) or topk:FRACTION (absent: none)"


class CodedPayload(WireMessage):
    """A message whose first tensor (a cut or a gradient) travels coded under network.compression: `codec` names the
    codec and the tensor (with `aux`) is its payload; the receiver decodes it against the agreed codec and the
    expected shape (vfl/wire/codecs.decode)."""

    CODEC = Choice("codec", WIRE_NAMES, optional=True)  # absent: none

    @staticmethod
    def payload(tensor: str) -> tuple[Tensor, ...]:
        """TENSORS of a message whose `tensor` is a float32 (rows, cols) payload, uncoded; coded, with `aux`."""
        return (Tensor(tensor, "float32", 2), Tensor("aux", optional=True))

    @classmethod
    def _tensors_of(cls, values: dict[str, Any]) -> tuple[Tensor, ...]:
        """Uncoded: the one float32 (rows, cols) tensor, as always; coded: the payload's one or two tensors, any
        dtype."""
        first = cls.TENSORS[0]
        return cls.TENSORS[:1] if values["codec"] is None else (Tensor(first.name, None, 2), cls.TENSORS[1])

    @classmethod
    def _check_coded(cls, values: dict[str, Any], msg: Message) -> None:
        """A coded payload fits its `codec` field. Uncoded (none), TENSORS' first entry alone was checked."""
        if values["codec"] is None:
            return
        tensor = cls.TENSORS[0].name
        wrong = layout(values["codec"], values[tensor], values["aux"])
        if wrong:
            raise fail(msg, f"tensor {tensor!r}: {wrong}")

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message):
        cls._check_coded(values, msg)
        return cls(**values)


@wire_message
class Hello(RankedHandshake):
    """HELLO (follower -> leader): what a follower announces about itself, compared with the leader's own view
    (vfl/session/handshake.hello_problems); rank and ranks only under N ranks per party, ema_decay only when
    train.ema_decay is on (absent: off, so a follower that predates the field reads as off)."""

    TYPE = "HELLO"
    nonce: str
    party: str
    protocol: int
    id_digest: dict[str, str]
    rows: dict[str, int]
    batch_size: int
    seed: int
    cut_dim: int
    microbatches: int
    resume_step: int
    timeout_s: float
    rank: int | None = None
    ranks: int | None = None
    ema_decay: float | None = None  # train.ema_decay; None (absent, as from a follower before it was sent) = off
    staleness: int | None = None  # train.staleness K; None (absent) = 0, the synchronous schedule
    staleness_auto: int | None = None  # 1: train.staleness auto (the leader chooses K, WELCOME names it)
    embedding_codec: str | None = None  # network.compression per direction (Codec.agreement); None (absent) = none
    gradient_codec: str | None = None
    FIELDS = (
        Text("nonce", 32, pattern=NONCE_PATTERN, domain="32 hex digits (a fresh nonce)"),
        Text("party", 64),
        Int("protocol", 0, 255),
        PerSplit("id_digest", Text("digest", 128)),
        PerSplit("rows", Int("rows")),
        Int("batch_size", 1),
        Int("seed", 0, 2**63 - 1),
        Int("cut_dim", 2, MAX_CUT_DIM),
        Int("microbatches", 1),
        Int("resume_step"),
        Real("timeout_s", 0, 86400),
        *RankedHandshake.RANK_FIELDS,
        _below_one(Real("ema_decay", 0, 1, optional=True)),
        Int("staleness", 1, MAX_STALENESS, optional=True),
        Int("staleness_auto", 1, 1, optional=True),
        Text("embedding_codec", 32, optional=True, pattern=CODEC_PATTERN, domain=_CODEC_DOMAIN),
        Text("gradient_codec", 32, optional=True, pattern=CODEC_PATTERN, domain=_CODEC_DOMAIN),
    )


@wire_message
class Welcome(RankedHandshake):
    """WELCOME (leader -> follower): the run id, the follower's nonce echoed, the schedule and the sends per row of each
    split it makes; rank fields as HELLO's."""

    TYPE = "WELCOME"
    run: str
    nonce: str
    epochs: int
    steps_per_epoch: int
    sends_train: int = 0  # the most sends of one row of each split from here to the run's end (embedding DP's plan)
    sends_valid: int = 0
    sends_test: int = 0
    rank: int | None = None
    ranks: int | None = None
    staleness: int | None = None  # the run's train.staleness K (the leader's choice under auto); None (absent) = 0
    FIELDS = (
        Text("run", 64),
        Text("nonce", 64),
        Int("epochs", 1),
        Int("steps_per_epoch"),
        Int("sends_train"),
        Int("sends_valid"),
        Int("sends_test"),
        *RankedHandshake.RANK_FIELDS,
        Int("staleness", 1, MAX_STALENESS, optional=True),
    )


@wire_message
class Forward(WireMessage):
    """FORWARD (leader -> follower): compute the cut of batch (epoch, step) of `rows` rows whose ids hash to
    `digest`; phase "prior" in LP-2ST's stage one."""

    TYPE = "FORWARD"
    epoch: int
    step: int
    rows: int
    digest: str
    phase: str | None = None
    FIELDS = (
        Choice("phase", PHASES, optional=True),
        Int("epoch"),
        Int("step"),
        Int("rows", 1, MAX_DIM),
        Text("digest", 64),
    )


@wire_message
class Embedding(CodedPayload):
    """EMBEDDING (follower -> leader): a float32 (rows, cut_dim) cut, of training batch (epoch, step) and
    micro-batch `micro` (none in stage one), or of the EVAL range `eval` = (split, start, stop). Under
    network.compression the cut travels coded: `codec` names it and `cut` (with `aux`) is its payload."""

    TYPE = "EMBEDDING"
    cut: np.ndarray
    epoch: int | None = None
    step: int | None = None
    micro: int | None = None
    eval: tuple[str, int, int] | None = None
    codec: str | None = None  # absent: none (cut is the float32 tensor)
    aux: np.ndarray | None = None  # a coded payload's second tensor
    FIELDS = (
        Int("epoch", optional=True),
        Int("step", optional=True),
        Int("micro", optional=True),
        EvalRange("eval", optional=True),
        CodedPayload.CODEC,
    )
    TENSORS = CodedPayload.payload("cut")

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> Embedding:
        cls._check_coded(values, msg)
        training = values["step"] is not None
        if training == (values["eval"] is not None):
            raise fail(
                msg,
                "carries "
                + (
                    "both a training 'step' and an 'eval' range"
                    if training
                    else "neither a training 'step' nor an 'eval' range"
                ),
            )
        if training != (values["epoch"] is not None) or (values["micro"] is not None and not training):
            raise fail(msg, "fields 'epoch', 'step' (and 'micro') come together, without 'eval'")
        return cls(**values)


@wire_message
class Gradient(CodedPayload):
    """GRADIENT (leader -> follower): d loss / d cut, float32 (rows, cut_dim), for (epoch, step, micro); phase
    "prior" in stage one. No loss: without label DP it is a function of the true labels, and no follower needs it.
    Under network.compression the gradient travels coded: `codec` names it and `grad` (with `aux`) is its payload."""

    TYPE = "GRADIENT"
    grad: np.ndarray
    epoch: int
    step: int
    micro: int | None = None
    phase: str | None = None
    codec: str | None = None  # absent: none (grad is the float32 tensor)
    aux: np.ndarray | None = None  # a coded payload's second tensor
    FIELDS = (
        Choice("phase", PHASES, optional=True),
        Int("epoch"),
        Int("step"),
        Int("micro", optional=True),
        CodedPayload.CODEC,
    )
    TENSORS = CodedPayload.payload("grad")


@wire_message
class Eval(WireMessage):
    """EVAL (leader -> follower): the cut of rows [start, stop) of a split (train only in stage one, phase prior),
    whose ids the leader names by `digest` (vfl/session/cut_digest.range_digest; the follower checks it against its
    own ids before it computes anything)."""

    TYPE = "EVAL"
    split: str
    start: int
    stop: int
    digest: str
    phase: str | None = None
    FIELDS = (
        Choice("phase", PHASES, optional=True),
        Choice("split", SPLITS),
        Int("start"),
        Int("stop"),
        Text("digest", 32, pattern=HEX32_PATTERN, domain="32 hex digits (the range's id digest)"),
    )


@wire_message
class Save(WireMessage):
    """SAVE (leader -> follower): write checkpoint `tag` at (epoch, step)."""

    TYPE = "SAVE"
    tag: str
    epoch: int
    step: int
    FIELDS = (Text("tag", 64), Int("epoch"), Int("step"))


@wire_message
class Snapshot(WireMessage):
    """SNAPSHOT (leader -> follower): keep a copy of the weights and optimizer state of global step `step`."""

    TYPE = "SNAPSHOT"
    step: int
    FIELDS = (Int("step"),)


@wire_message
class Restore(WireMessage):
    """RESTORE (leader -> follower): return to the snapshot of global step `step`."""

    TYPE = "RESTORE"
    step: int
    FIELDS = (Int("step"),)


@wire_message
class Wait(WireMessage):
    """WAIT (leader -> follower): the leader is alive (preparing, or serving another follower)."""

    TYPE = "WAIT"


@wire_message
class Done(WireMessage):
    """DONE (leader -> follower): training is over at (epoch, step); write the final checkpoint, then BYE."""

    TYPE = "DONE"
    epoch: int
    step: int
    FIELDS = (Int("epoch", -1), Int("step"))


@wire_message
class Bye(WireMessage):
    """BYE (follower -> leader): the steps this follower trained and the bytes of its snapshot."""

    TYPE = "BYE"
    steps: int
    snapshot_bytes: int
    FIELDS = (Int("steps"), Int("snapshot_bytes"))


@wire_message
class Abort(WireMessage):
    """ABORT (either way): a fatal error's one-line reason, at most MAX_REASON characters."""

    TYPE = "ABORT"
    reason: str
    FIELDS = (
        Field(
            "reason",
            "a string of 1..65536 characters",
            lambda v: is_text(v, MAX_HEADER_BYTES),
            decode=lambda v: v[:MAX_REASON],
            encode=lambda v: v[:MAX_REASON],
        ),
    )


@wire_message
class Prior(RowCounted):
    """PRIOR (leader -> follower): K-class LP-2ST's stage one, on the training rows `indices` (strictly increasing
    int64; a draw of the leader's PRF independent of the labels), for `epochs` epochs. On the wire `rows` is
    their count."""

    TYPE = "PRIOR"
    indices: np.ndarray
    epochs: int
    FIELDS = (Int("rows", 1), Int("epochs", 1, MAX_PRIOR_EPOCHS))
    TENSORS = (Tensor("indices", "int64", 1),)
    COUNTED = "indices"

    @classmethod
    def _rows_problem(cls, counted: np.ndarray, rows: int) -> str | None:
        if counted.size != rows or counted[0] < 0 or (counted.size > 1 and np.any(np.diff(counted) <= 0)):
            return (
                f"tensor 'indices' must hold the {rows} stage-one rows as strictly increasing indices >= 0, "
                f"got {counted.size} values"
            )
        return None


MESSAGE_CLASSES: dict[str, type[WireMessage]] = {
    c.TYPE: c
    for c in (
        Psi,
        Hello,
        Welcome,
        Forward,
        Embedding,
        Gradient,
        Eval,
        Save,
        Snapshot,
        Restore,
        Wait,
        Done,
        Bye,
        Abort,
        Prior,
        *SERVE_MESSAGES,
        *PREDICT_MESSAGES,
        *LINK_MESSAGES,
        Resync,
        Rejoin,
    )
}


def parse(msg: Message) -> WireMessage:
    """The typed message of any decoded Message (its class from the type); WireError names what is wrong."""
    cls = MESSAGE_CLASSES.get(msg.type)
    if cls is None:
        raise WireError(f"unknown message type {str(msg.type)[:40]!r} from {msg.sender}")
    return cls.from_wire(msg)


__all__ = [
    "MESSAGE_CLASSES",
    "Abort",
    "Bye",
    "Done",
    "Embedding",
    "Eval",
    "Forward",
    "Gradient",
    "Hello",
    "Prior",
    "Psi",
    "Rejoin",
    "Restore",
    "Resync",
    "Save",
    "Snapshot",
    "Wait",
    "Welcome",
    "WireMessage",
    "parse",
]
