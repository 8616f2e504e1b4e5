"""Generic field types as pydantic v2 types: one check, one message and one JSON Schema per number or choice.

Every numeric or enumerated setting (party YAML, FedAvg YAML, model options, mechanism parameters) is declared with
`Number(...)`, `Choice(...)`, `IntList(...)`, `Text(...)` or `Flag()`; a bad value raises `field_error`'s
`PydanticCustomError` whose message names the field, the allowed domain and the value. Numbers accept YAML 1.2
spellings that PyYAML (YAML 1.1) leaves as strings: `1e-4`, `inf`, `-inf`, `1_000`. Only pydantic: the label-DP
domains (privacy/domains.py), the config and the mechanisms all build on it.
"""

from __future__ import annotations

import difflib
import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo
from pydantic_core import PydanticCustomError

DOMAIN_ERROR = "vfl_domain"  # the error type of every check here; vfl/config/report.py formats it


def suggest(value: Any, options) -> str:
    """` (did you mean 'x'?)` for the nearest option (case-insensitive first), or ''."""
    options = [str(o) for o in options]
    same_case = [o for o in options if o.lower() == str(value).lower()]
    near = same_case or difflib.get_close_matches(str(value), options, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def domain_text(lo=None, hi=None, lo_open: bool = False, hi_open: bool = False) -> str:
    """`in [lo, hi)`, `> lo`, `<= hi`: the allowed interval in words."""
    if hi is None and lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if lo is None and hi is not None:
        return f"{'<' if hi_open else '<='} {hi}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def yaml12_number(value: Any) -> Any:
    """A YAML 1.2 / JSON number written as a string (`1e-4`, `inf`, `.inf`, `-1_000`) as a float; else unchanged."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower().replace("_", "")
    if text.lstrip("+-") in (".inf", "inf", "infinity"):
        return -math.inf if text.startswith("-") else math.inf
    if not text or text.lstrip("+-")[:1] not in set("0123456789."):
        return value
    try:
        return float(text)
    except ValueError:
        return value


def field_error(message: str) -> PydanticCustomError:
    """The error every field type here raises: DOMAIN_ERROR with `message` (the field, its domain and the value)."""
    return PydanticCustomError(DOMAIN_ERROR, "{message}", {"message": message})


def domain_error(
    name: str, value, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False, integer: bool = False
) -> str | None:
    """None when value is a number inside the domain, else the sentence quoting both (the one message format)."""
    leaf = name.rsplit(".", 1)[-1]
    value = yaml12_number(value)
    if integer and isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    kind_ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not kind_ok:
        hint = " (write .inf or 1e308 for infinity)" if isinstance(value, str) and "inf" in value.lower() else ""
        kind = "an integer" if integer else "a number"
        allowed = (
            f" (allowed: {kind} {domain_text(lo, hi, lo_open, hi_open)})" if lo is not None or hi is not None else ""
        )
        return f"{name} must be {kind}, got {value!r}{hint}{allowed}"
    if isinstance(value, float) and math.isnan(value):
        return f"{name} must not be NaN"
    if (lo is not None and (value <= lo if lo_open else value < lo)) or (
        hi is not None and (value >= hi if hi_open else value > hi)
    ):
        return f"{name} must be {'an integer ' if integer else ''}{domain_text(lo, hi, lo_open, hi_open)}, got {leaf}={value!r}"
    return None


def Number(lo=None, hi=None, *, lo_open: bool = False, hi_open: bool = False, integer: bool = False):
    """An int (integer=True) or float field inside [lo, hi] (open ends with lo_open / hi_open)."""

    def check(value: Any, info: ValidationInfo):
        err = domain_error(info.field_name or "value", value, lo, hi, lo_open, hi_open, integer)
        if err:
            raise field_error(err)
        value = yaml12_number(value)
        return int(value) if integer else float(value)

    bounds = {}  # for the JSON Schema only: check() enforces them with the project's messages
    if lo is not None:
        bounds["exclusiveMinimum" if lo_open else "minimum"] = lo
    if hi is not None and not (isinstance(hi, float) and math.isinf(hi)):
        bounds["exclusiveMaximum" if hi_open else "maximum"] = hi
    return Annotated[int if integer else float, BeforeValidator(check), Field(json_schema_extra=bounds)]


def Choice(*options: str):
    """One of the given strings; a near miss is suggested."""

    def check(value: Any, info: ValidationInfo):
        if value not in options:
            raise field_error(
                f"{info.field_name} must be one of {list(options)}, got {value!r}{suggest(value, options)}"
            )
        return value

    return Annotated[Literal[options], BeforeValidator(check)]


def IntList(lo: int = 1):
    """A list of integers >= lo (stored as a tuple)."""

    def check(value: Any, info: ValidationInfo):
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) or v < lo for v in value):
            raise field_error(f"{info.field_name} must be a list of integers >= {lo}, got {value!r}")
        return tuple(value)

    return Annotated[
        tuple[int, ...], BeforeValidator(check), Field(json_schema_extra={"items": {"type": "integer", "minimum": lo}})
    ]


def Text(pattern: str | None = None, rule: str = "be a non-empty string"):
    """A non-empty string (matching pattern when given)."""
    import re

    rx = re.compile(pattern) if pattern else None

    def check(value: Any, info: ValidationInfo):
        if not isinstance(value, str) or not value or (rx is not None and not rx.match(value)):
            raise field_error(f"{info.field_name} must {rule}, got {value!r}")
        return value

    return Annotated[
        str,
        BeforeValidator(check),
        Field(json_schema_extra={"minLength": 1, **({"pattern": pattern} if pattern else {})}),
    ]


def Flag():
    """true or false (no 0/1, no 'yes')."""

    def check(value: Any, info: ValidationInfo):
        if not isinstance(value, bool):
            raise field_error(f"{info.field_name} must be true or false, got {value!r}")
        return value

    return Annotated[bool, BeforeValidator(check)]
