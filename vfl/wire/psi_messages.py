"""The PSI message: one class for every step of the ECDH-PSI (vfl/align/psi/protocol.py), its fields by op.

Which fields and which payload an op carries is checked here, with each chunk's range and its points' or positions'
dtype and shape; whether a range is the one the receiver asked for is checked by the receiver.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from vfl.wire.fields import Choice, Int, Tensor, Text, WireMessage, wire_message
from vfl.wire.frames import Message, WireError

PSI_CHUNK_POINTS = 8192  # points per PSI mask / double / leader message
PSI_RESULT_CHUNK = 4 * PSI_CHUNK_POINTS  # positions per PSI result message
PSI_MAX_IDS = 1 << 27  # ids per party
_MAX_RANKS = 1 << 16  # vfl/wire/messages.MAX_RANKS (which imports this module)
PSI_OPS = ("hello", "mask", "double", "leader", "result", "ticket", "done")
_PSI_FIELDS = {
    "hello": ("suite", "n"),
    "mask": ("start", "stop"),
    "double": ("start", "stop"),
    "leader": ("start", "stop"),
    "result": ("start", "stop", "total"),
    "ticket": (),
    "done": ("size",),
}
_PSI_PAYLOAD = {
    "hello": "reuse",
    "mask": "optional",
    "double": "points",
    "leader": "points",
    "result": "positions",
    "ticket": "ticket",
    "done": "none",
}  # mask: the leader's request has none, the follower's answer has its points; hello: a reuse offer or none
_FIXED_SHAPES = {"reuse": (2, 4), "ticket": (1, 4)}  # reuse: id(T) and a proof; ticket: T (vfl/align/psi/reuse.py)
# Verified PSI (vfl/align/psi/dleq.py): a hello may ask the peer for proofs (verify) and commit to this party's key; a
# double (the leader's) and a leader reply (the follower's) may carry the batched DLEQ proof of their points, and the
# follower's first leader reply its key. Absent: today's unverified messages, byte for byte.
_PSI_OPTIONAL = {"hello": ("verify", "key"), "double": ("proof",), "leader": ("key", "proof")}
_HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")
_HEX128 = re.compile(r"\A[0-9a-f]{128}\Z")


@wire_message
class Psi(WireMessage):
    """PSI: one step of the ECDH-PSI (vfl/align/psi/protocol.py); `payload` holds int64 (k, 4) points for mask,
    double and leader, or int64 (k,) positions for result, k = stop - start; int64 (2, 4) for a hello offering reuse
    (id(T), proof) and int64 (1, 4) for a ticket T (vfl/align/psi/reuse.py)."""

    TYPE = "PSI"
    op: str
    suite: str | None = None
    n: int | None = None
    start: int | None = None
    stop: int | None = None
    total: int | None = None
    size: int | None = None
    rank: int | None = None  # hello under N ranks: the bucket this rank intersects (vfl/align/psi/buckets.py)
    ranks: int | None = None
    verify: int | None = None  # hello: 1 when this party checks the peer's DLEQ proofs (data.psi_verify)
    key: str | None = None  # hello (leader) or first leader reply (follower): the prover's k * G, 64 hex digits
    proof: str | None = None  # double (leader) or leader reply (follower): RFC 9497 proof c || s, 128 hex digits
    payload: np.ndarray | None = None
    FIELDS = (
        Choice("op", PSI_OPS),
        Text("suite", 128, optional=True),
        Int("n", 1, PSI_MAX_IDS, optional=True),
        Int("start", 0, PSI_MAX_IDS, optional=True),
        Int("stop", 0, PSI_MAX_IDS, optional=True),
        Int("total", 0, PSI_MAX_IDS, optional=True),
        Int("size", 0, PSI_MAX_IDS, optional=True),
        Int("rank", 0, _MAX_RANKS - 1, optional=True),
        Int("ranks", 1, _MAX_RANKS, optional=True),
        Int("verify", 1, 1, optional=True),
        Text("key", 64, optional=True, pattern=_HEX64, domain="64 lowercase hex digits (a ristretto255 element)"),
        Text("proof", 128, optional=True, pattern=_HEX128, domain="128 lowercase hex digits (a DLEQ proof c || s)"),
    )
    TENSORS = (Tensor("payload", optional=True),)

    @classmethod
    def hello(
        cls,
        suite: str,
        n: int,
        reuse: np.ndarray | None = None,
        rank: int = 0,
        ranks: int = 1,
        verify: bool = False,
        key: bytes | None = None,
    ) -> Psi:
        more = {"rank": int(rank), "ranks": int(ranks)} if ranks > 1 else {}  # none for one rank
        if verify:
            more["verify"] = 1
        if key is not None:
            more["key"] = key.hex()
        return cls("hello", suite=suite, n=int(n), payload=reuse, **more)

    @classmethod
    def ticket(cls, ticket: np.ndarray) -> Psi:
        return cls("ticket", payload=ticket)

    @classmethod
    def chunk(
        cls,
        op: str,
        start: int,
        stop: int,
        points: np.ndarray | None = None,
        proof: bytes | None = None,
        key: bytes | None = None,
    ) -> Psi:
        return cls(
            op,
            start=int(start),
            stop=int(stop),
            payload=points,
            proof=None if proof is None else proof.hex(),
            key=None if key is None else key.hex(),
        )

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
            if (f.name in ("rank", "ranks") and op == "hello") or f.name in _PSI_OPTIONAL.get(op, ()):
                continue
            if f.name in _PSI_FIELDS[op] and values[f.name] is None:
                raise WireError(f"{where}: field {f.name!r} must be {f.domain}, got nothing (the field is missing)")
            if f.name not in _PSI_FIELDS[op] and values[f.name] is not None:
                raise WireError(f"{where}: field {f.name!r} does not belong to a PSI {op}")
        if (values["rank"] is None) != (values["ranks"] is None) or (values["rank"] or 0) >= (values["ranks"] or 1):
            raise WireError(
                f"{where}: fields 'rank' and 'ranks' come together, rank below ranks (neither for one rank)"
            )
        kind, payload = _PSI_PAYLOAD[op], values["payload"]
        if kind == "none" and payload is not None:
            raise WireError(f"{where}: expected no tensor, got 1")
        if kind in ("points", "positions", "ticket") and payload is None:
            raise WireError(f"{where}: expected 1 tensor, got 0")
        if kind in _FIXED_SHAPES and payload is not None:
            want = _FIXED_SHAPES[kind]
            if payload.dtype != np.dtype("<i8") or tuple(payload.shape) != want:
                raise WireError(f"{where}: expected int64 {want}, got {payload.dtype} {tuple(payload.shape)}")
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
