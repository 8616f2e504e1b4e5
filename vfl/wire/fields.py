"""How a typed wire message is declared and checked: field and tensor domains, and the WireMessage base class.

A field's domain is its test, its words in an error and its conversions. messages.py and psi_messages.py declare each
message type's FIELDS and TENSORS with these; `WireMessage.from_wire` checks them all and raises the one form of
error, `TYPE from SENDER: field 'key' must be DOMAIN, got VALUE`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar

import numpy as np

from vfl.splits import SPLITS
from vfl.wire.frames import Message, WireError, short_repr

MAX_INT = 2**62  # the default upper bound of a counter (epoch, step, bytes)


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


# -- the base of every message class ----------------------------------------------------------------------
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
        specs = cls._tensors_of(values)
        required = sum(not t.optional for t in specs)
        if not required <= len(msg.tensors) <= len(specs):
            count = str(required) if required == len(specs) else f"{required}..{len(specs)}"
            raise fail(
                msg,
                f"expected {count} tensor(s) ({', '.join(t.name for t in specs) or 'none'}), got {len(msg.tensors)}",
            )
        for i, spec in enumerate(specs):
            values[spec.name] = check_tensor(msg, spec, msg.tensors[i]) if i < len(msg.tensors) else None
        return cls._make(values, msg)

    @classmethod
    def _tensors_of(cls, values: dict[str, Any]) -> tuple[Tensor, ...]:
        """The tensors a message with these (checked) fields carries; a class whose tensors depend on a field (a
        coded cut, messages.py) narrows TENSORS here."""
        return cls.TENSORS

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


class RowCounted(WireMessage):
    """A message whose field `rows` on the wire is the length of its tensor COUNTED (an attribute, not a field, of
    the typed message); _rows_problem words what the tensor must hold besides that count."""

    COUNTED: ClassVar[str] = ""

    @property
    def rows(self) -> int:
        return int(getattr(self, self.COUNTED).size)

    @classmethod
    def _rows_problem(cls, counted: np.ndarray, rows: int) -> str | None:
        """The error text when `counted` is not what a message with field rows=`rows` carries (None: it is)."""
        raise NotImplementedError

    @classmethod
    def _make(cls, values: dict[str, Any], msg: Message):
        rows = values.pop("rows")
        problem = cls._rows_problem(values[cls.COUNTED], rows)
        if problem is not None:
            raise fail(msg, problem)
        return cls(**values)


wire_message = dataclass(frozen=True, eq=False)  # equality compares tensors by value (WireMessage.__eq__)
