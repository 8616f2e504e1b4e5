"""The domains of wire fields and tensors: a meta key's test, its words in an error, and its conversions.

messages.py declares each message type's FIELDS and TENSORS with these; `Field.read` and `check_tensor` raise the
one form of error, `TYPE from SENDER: field 'key' must be DOMAIN, got VALUE`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from vfl.wire.frames import Message, WireError, short_repr

MAX_INT = 2**62  # the default upper bound of a counter (epoch, step, bytes)
SPLITS = ("train", "valid", "test")  # the splits of a shard (the same names as vfl.data.shards.SPLITS)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # a meta key that is absent (which is not JSON null)


def is_int(value: Any, lo: int, hi: int) -> bool:
    """An integer in [lo, hi]; a bool is not an integer on the wire."""
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def is_text(value: Any, max_len: int) -> bool:
    """A string of 1..max_len characters."""
    return isinstance(value, str) and 0 < len(value) <= max_len


def field_error(msg: Message, key: str, domain: str, value: Any = MISSING) -> WireError:
    """The one form of a field's error: `TYPE from SENDER: field 'key' must be DOMAIN, got VALUE`."""
    got = "nothing (the field is missing)" if value is MISSING else short_repr(value)
    return WireError(f"{msg.type} from {msg.sender}: field {key!r} must be {domain}, got {got}")


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Field:
    """One meta key: its domain in words, the test of a received value, and its conversions."""

    name: str
    domain: str
    accepts: Callable[[Any], bool]
    optional: bool = False  # absent (never null) on the wire when the attribute is None
    decode: Callable[[Any], Any] = _same  # received JSON value -> attribute
    encode: Callable[[Any], Any] = _same  # attribute -> JSON value

    def read(self, msg: Message) -> Any:
        value = msg.meta.get(self.name, MISSING)
        if value is MISSING and self.optional:
            return None
        if not self.accepts(value):
            raise field_error(msg, self.name, self.domain, value)
        return self.decode(value)


def Int(name: str, lo: int = 0, hi: int = MAX_INT, optional: bool = False) -> Field:
    """An integer in [lo, hi]; never a bool."""
    return Field(name, f"an integer in [{lo}, {hi}]", lambda v: is_int(v, lo, hi), optional)


def Text(
    name: str, max_len: int = 256, optional: bool = False, pattern: re.Pattern | None = None, domain: str | None = None
) -> Field:
    """A string of 1..max_len characters, matching `pattern` if given."""
    return Field(
        name,
        domain or f"a string of 1..{max_len} characters",
        lambda v: is_text(v, max_len) and (pattern is None or bool(pattern.match(v))),
        optional,
    )


def Choice(name: str, values: tuple[str, ...], optional: bool = False) -> Field:
    """One of a few strings."""
    return Field(
        name, "one of " + ", ".join(repr(v) for v in values), lambda v: isinstance(v, str) and v in values, optional
    )


def Real(name: str, lo: float = -math.inf, hi: float = math.inf, optional: bool = False) -> Field:
    """A finite number in (lo, hi] (an integer is a number; a bool is not). Kept as received: 60 stays 60."""

    def accepts(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        try:
            f = float(v)  # an integer beyond float's range (JSON allows 4300 digits) is no finite number
        except OverflowError:
            return False
        return math.isfinite(f) and lo < f <= hi

    bounds = "" if (lo, hi) == (-math.inf, math.inf) else f" in ({lo:g}, {hi:g}]"
    return Field(name, f"a finite number{bounds}", accepts, optional)


def PerSplit(name: str, inner: Field) -> Field:
    """An object with exactly the keys train, valid, test, each value in `inner`'s domain."""

    def accepts(v: Any) -> bool:
        return isinstance(v, dict) and sorted(v) == sorted(SPLITS) and all(inner.accepts(v[s]) for s in SPLITS)

    return Field(
        name,
        f"an object mapping each of {', '.join(SPLITS)} to {inner.domain}",
        accepts,
        decode=lambda v: {s: v[s] for s in SPLITS},
    )


def EvalRange(name: str, optional: bool = False) -> Field:
    """[split, start, stop]: a split's name and two row indices (a tuple in Python, a list on the wire)."""

    def accepts(v: Any) -> bool:
        return (
            isinstance(v, list)
            and len(v) == 3
            and v[0] in SPLITS
            and is_int(v[1], 0, MAX_INT)
            and is_int(v[2], 0, MAX_INT)
        )

    return Field(
        name,
        f"a list [split, start, stop] of a split ({', '.join(SPLITS)}) and two integers in [0, {MAX_INT}]",
        accepts,
        optional,
        decode=tuple,
        encode=list,
    )


@dataclass(frozen=True)
class Tensor:
    """One tensor: the attribute it fills, its dtype and number of dimensions (None: any allowed one)."""

    name: str
    dtype: str | None = None
    ndim: int | None = None
    optional: bool = False  # only at the end of TENSORS


def check_tensor(msg: Message, spec: Tensor, arr: np.ndarray) -> np.ndarray:
    if (spec.dtype is not None and arr.dtype != np.dtype(spec.dtype)) or (
        spec.ndim is not None and arr.ndim != spec.ndim
    ):
        want = " ".join(x for x in (spec.dtype, f"with {spec.ndim} dimension(s)" if spec.ndim is not None else "") if x)
        raise WireError(
            f"{msg.type} from {msg.sender}: tensor {spec.name!r} must be {want}, got {arr.dtype} {tuple(arr.shape)}"
        )
    return arr


def fail(msg: Message, text: str) -> WireError:
    return WireError(f"{msg.type} from {msg.sender}: {text}")
