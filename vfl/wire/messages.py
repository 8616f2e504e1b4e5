"""Typed wire messages: one frozen class per message type, with its fields' domains, encoded and decoded here only.

A class's FIELDS list its meta keys in wire order, each with its domain; TENSORS list its tensors with their dtype
and rank. `to_wire()` gives (meta, tensors) for frames.encode, leaving out the optional fields that are None, so the
bytes are those the protocol always sent. `from_wire(msg)` checks every field and tensor of a decoded frames.Message
and raises WireError naming the type, the sender and the field: a missing required field, an unknown one, a bool
where an integer belongs, a string over its cap, a tensor of the wrong count, dtype or rank. What depends on the
step or on the receiver's data (shapes against the batch, a range against a split's size, a digest against the
receiver's ids, agreement with the receiver's own settings) is checked by the receiver, after parse().
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from vfl.wire.fields import (
    SPLITS,
    Choice,
    EvalRange,
    Field,
    Int,
    PerSplit,
    Real,
    Tensor,
    Text,
    check_tensor,
    fail,
    is_text,
)
from vfl.wire.frames import MAX_DIM, MAX_HEADER_BYTES, Message, WireError

PHASES = ("prior",)  # FORWARD / GRADIENT / EVAL of LP-2ST's stage one carry phase "prior"
MAX_CUT_DIM = 4096  # the widest cut a party may announce
MAX_RANKS = 1 << 16
MAX_REASON = 2000  # characters of an ABORT's reason that travel (and that a receiver keeps)
MAX_PRIOR_EPOCHS = 1000  # privacy.label_dp.prior_epochs' domain
PSI_CHUNK_POINTS = 8192  # points per PSI mask / double / leader message
PSI_RESULT_CHUNK = 4 * PSI_CHUNK_POINTS  # positions per PSI result message
PSI_MAX_IDS = 1 << 27  # ids per party
NONCE_PATTERN = re.compile(r"^[0-9a-f]{32}$")


class WireMessage:
    """A message type: TYPE (the wire string), FIELDS (meta keys in wire order) and TENSORS."""

    TYPE: ClassVar[str] = ""
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    TENSORS: ClassVar[tuple[Tensor, ...]] = ()

    def to_wire(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        """(meta, tensors) for frames.encode; optional fields that are None are left out."""
        meta = {}
        for f in self.FIELDS:
            value = getattr(self, f.name)
            if value is not None:
                meta[f.name] = f.encode(value)
        return meta, [t for spec in self.TENSORS if (t := getattr(self, spec.name)) is not None]

    @classmethod
    def from_wire(cls, msg: Message):
        """The typed message of a decoded Message, every field and tensor checked; WireError names what is wrong."""
        if msg.type != cls.TYPE:
            raise WireError(f"expected {cls.TYPE} from {msg.sender}, got {msg.type}")
        names = [f.name for f in cls.FIELDS]
        unknown = [k for k in msg.meta if k not in names]
        if unknown:
            raise fail(
                msg, f"unknown field {unknown[0][:40]!r} (a {cls.TYPE} carries {', '.join(names) or 'no fields'})"
            )
        values = {f.name: f.read(msg) for f in cls.FIELDS}
        required = sum(not t.optional for t in cls.TENSORS)
        if not required <= len(msg.tensors) <= len(cls.TENSORS):
            count = str(required) if required == len(cls.TENSORS) else f"{required}..{len(cls.TENSORS)}"
            raise fail(
                msg,
                f"expected {count} tensor(s) ({', '.join(t.name for t in cls.TENSORS) or 'none'}), "
                f"got {len(msg.tensors)}",
            )
        for i, spec in enumerate(cls.TENSORS):
            values[spec.name] = check_tensor(msg, spec, msg.tensors[i]) if i < len(msg.tensors) else None
        return cls._make(values, msg)

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message):
        """Build from checked fields; a class checks what relates two of its fields here."""
        return cls(**values)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not (
                    isinstance(a, np.ndarray)
                    and isinstance(b, np.ndarray)
                    and a.dtype == b.dtype
                    and np.array_equal(a, b)
                ):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]


_message = dataclass(frozen=True, eq=False)  # equality compares tensors by value (WireMessage.__eq__)


def _ranks_together(msg: Message, rank: int | None, ranks: int | None) -> None:
    if (rank is None) != (ranks is None):
        raise fail(msg, "fields 'rank' and 'ranks' come together (both, or neither for one rank)")
    if rank is not None and rank >= ranks:
        raise fail(msg, f"field 'rank' must be below 'ranks', got rank {rank} of {ranks}")


PSI_OPS = ("hello", "mask", "double", "leader", "result", "done")
_PSI_FIELDS = {
    "hello": ("suite", "n"),
    "mask": ("start", "stop"),
    "double": ("start", "stop"),
    "leader": ("start", "stop"),
    "result": ("start", "stop", "total"),
    "done": ("size",),
}
_PSI_PAYLOAD = {
    "hello": "none",
    "mask": "optional",
    "double": "points",
    "leader": "points",
    "result": "positions",
    "done": "none",
}  # mask: the leader's request has none, the follower's answer has its points


@_message
class Psi(WireMessage):
    """PSI: one step of the ECDH-PSI (vfl/align/psi/protocol.py); `payload` holds int64 (k, 4) points for mask,
    double and leader, or int64 (k,) positions for result, k = stop - start."""

    TYPE = "PSI"
    op: str
    suite: str | None = None
    n: int | None = None
    start: int | None = None
    stop: int | None = None
    total: int | None = None
    size: int | None = None
    payload: np.ndarray | None = None
    FIELDS = (
        Choice("op", PSI_OPS),
        Text("suite", 128, optional=True),
        Int("n", 1, PSI_MAX_IDS, optional=True),
        Int("start", 0, PSI_MAX_IDS, optional=True),
        Int("stop", 0, PSI_MAX_IDS, optional=True),
        Int("total", 0, PSI_MAX_IDS, optional=True),
        Int("size", 0, PSI_MAX_IDS, optional=True),
    )
    TENSORS = (Tensor("payload", optional=True),)

    @classmethod
    def hello(cls, suite: str, n: int) -> Psi:
        return cls("hello", suite=suite, n=int(n))

    @classmethod
    def chunk(cls, op: str, start: int, stop: int, points: np.ndarray | None = None) -> Psi:
        return cls(op, start=int(start), stop=int(stop), payload=points)

    @classmethod
    def result(cls, start: int, stop: int, total: int, positions: np.ndarray) -> Psi:
        return cls("result", start=int(start), stop=int(stop), total=int(total), payload=positions)

    @classmethod
    def done(cls, size: int) -> Psi:
        return cls("done", size=int(size))

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> Psi:
        op = values["op"]
        where = f"PSI {op} from {msg.sender}"
        for f in cls.FIELDS[1:]:
            if f.name in _PSI_FIELDS[op] and values[f.name] is None:
                raise WireError(f"{where}: field {f.name!r} must be {f.domain}, got nothing (the field is missing)")
            if f.name not in _PSI_FIELDS[op] and values[f.name] is not None:
                raise WireError(f"{where}: field {f.name!r} does not belong to a PSI {op}")
        kind, payload = _PSI_PAYLOAD[op], values["payload"]
        if kind == "none" and payload is not None:
            raise WireError(f"{where}: expected no tensor, got 1")
        if kind in ("points", "positions") and payload is None:
            raise WireError(f"{where}: expected 1 tensor, got 0")
        if "start" in _PSI_FIELDS[op]:
            start, stop = values["start"], values["stop"]
            limit = PSI_RESULT_CHUNK if op == "result" else PSI_CHUNK_POINTS
            if not start < stop <= start + limit or (op == "result" and stop > values["total"]):
                raise WireError(
                    f"{where}: range {start}..{stop} is not a chunk of 1..{limit}"
                    + (f" within the total {values['total']}" if op == "result" else "")
                )
            want = (stop - start, 4) if kind != "positions" else (stop - start,)
            if payload is not None and (payload.dtype != np.dtype("<i8") or tuple(payload.shape) != want):
                what = "points" if kind != "positions" else "positions"
                raise WireError(f"{where}: expected int64 {want} {what}, got {payload.dtype} {tuple(payload.shape)}")
        return cls(**values)


@_message
class Hello(WireMessage):
    """HELLO (follower -> leader): what a follower announces about itself, compared with the leader's own view
    (vfl/align/handshake.hello_problems); rank and ranks only under N ranks per party."""

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
        Int("rank", 0, MAX_RANKS - 1, optional=True),
        Int("ranks", 1, MAX_RANKS, optional=True),
    )

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> Hello:
        _ranks_together(msg, values["rank"], values["ranks"])
        return cls(**values)


@_message
class Welcome(WireMessage):
    """WELCOME (leader -> follower): the run id, the follower's nonce echoed, the schedule; rank fields as HELLO's."""

    TYPE = "WELCOME"
    run: str
    nonce: str
    epochs: int
    steps_per_epoch: int
    rank: int | None = None
    ranks: int | None = None
    FIELDS = (
        Text("run", 64),
        Text("nonce", 64),
        Int("epochs", 1),
        Int("steps_per_epoch"),
        Int("rank", 0, MAX_RANKS - 1, optional=True),
        Int("ranks", 1, MAX_RANKS, optional=True),
    )

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> Welcome:
        _ranks_together(msg, values["rank"], values["ranks"])
        return cls(**values)


@_message
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


@_message
class Embedding(WireMessage):
    """EMBEDDING (follower -> leader): a float32 (rows, cut_dim) cut, of training batch (epoch, step) and
    micro-batch `micro` (none in stage one), or of the EVAL range `eval` = (split, start, stop)."""

    TYPE = "EMBEDDING"
    cut: np.ndarray
    epoch: int | None = None
    step: int | None = None
    micro: int | None = None
    eval: tuple[str, int, int] | None = None
    FIELDS = (
        Int("epoch", optional=True),
        Int("step", optional=True),
        Int("micro", optional=True),
        EvalRange("eval", optional=True),
    )
    TENSORS = (Tensor("cut", "float32", 2),)

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> Embedding:
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


@_message
class Gradient(WireMessage):
    """GRADIENT (leader -> follower): d loss / d cut, float32 (rows, cut_dim), for (epoch, step, micro); the batch
    loss (on the training labels, noisy under label DP) with the last micro-batch; phase "prior" in stage one."""

    TYPE = "GRADIENT"
    grad: np.ndarray
    epoch: int
    step: int
    micro: int | None = None
    loss: float | None = None
    phase: str | None = None
    FIELDS = (
        Choice("phase", PHASES, optional=True),
        Int("epoch"),
        Int("step"),
        Int("micro", optional=True),
        Real("loss", optional=True),
    )
    TENSORS = (Tensor("grad", "float32", 2),)


@_message
class Eval(WireMessage):
    """EVAL (leader -> follower): the cut of rows [start, stop) of a split (train only in stage one, phase prior)."""

    TYPE = "EVAL"
    split: str
    start: int
    stop: int
    phase: str | None = None
    FIELDS = (Choice("phase", PHASES, optional=True), Choice("split", SPLITS), Int("start"), Int("stop"))


@_message
class Save(WireMessage):
    """SAVE (leader -> follower): write checkpoint `tag` at (epoch, step)."""

    TYPE = "SAVE"
    tag: str
    epoch: int
    step: int
    FIELDS = (Text("tag", 64), Int("epoch"), Int("step"))


@_message
class Snapshot(WireMessage):
    """SNAPSHOT (leader -> follower): keep a copy of the weights and optimizer state of global step `step`."""

    TYPE = "SNAPSHOT"
    step: int
    FIELDS = (Int("step"),)


@_message
class Restore(WireMessage):
    """RESTORE (leader -> follower): return to the snapshot of global step `step`."""

    TYPE = "RESTORE"
    step: int
    FIELDS = (Int("step"),)


@_message
class Wait(WireMessage):
    """WAIT (leader -> follower): the leader is alive (preparing, or serving another follower)."""

    TYPE = "WAIT"


@_message
class Done(WireMessage):
    """DONE (leader -> follower): training is over at (epoch, step); write the final checkpoint, then BYE."""

    TYPE = "DONE"
    epoch: int
    step: int
    FIELDS = (Int("epoch", -1), Int("step"))


@_message
class Bye(WireMessage):
    """BYE (follower -> leader): the steps this follower trained and the bytes of its snapshot."""

    TYPE = "BYE"
    steps: int
    snapshot_bytes: int
    FIELDS = (Int("steps"), Int("snapshot_bytes"))


@_message
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


@_message
class Prior(WireMessage):
    """PRIOR (leader -> follower): K-class LP-2ST's stage one, on the training rows `indices` (strictly increasing
    int64; a draw of the leader's PRF independent of the labels), for `epochs` epochs. On the wire `rows` is
    their count."""

    TYPE = "PRIOR"
    indices: np.ndarray
    epochs: int
    FIELDS = (Int("rows", 1), Int("epochs", 1, MAX_PRIOR_EPOCHS))
    TENSORS = (Tensor("indices", "int64", 1),)

    @property
    def rows(self) -> int:
        return int(self.indices.size)

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message) -> Prior:
        rows, idx = values.pop("rows"), values["indices"]
        if idx.size != rows or idx[0] < 0 or (idx.size > 1 and np.any(np.diff(idx) <= 0)):
            raise fail(
                msg,
                f"tensor 'indices' must hold the {rows} stage-one rows as strictly increasing indices >= 0, "
                f"got {idx.size} values",
            )
        return cls(**values)


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
    "Restore",
    "Save",
    "Snapshot",
    "Wait",
    "Welcome",
    "WireMessage",
    "parse",
]
