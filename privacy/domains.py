"""Parameter domains: one check and one message format for every mechanism's numeric parameter."""
from __future__ import annotations

import math


def domain_error(name: str, value, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False,
                 integer: bool = False) -> str | None:
    """None when value is a (real or integer) number inside the domain, else a sentence quoting both."""
    kind_ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    ok = kind_ok and not isinstance(value, bool) and not (isinstance(value, float) and math.isnan(value))
    if ok:
        ok = (lo is None or (value > lo if lo_open else value >= lo)) and (hi is None or (value < hi if hi_open else value <= hi))
    if ok:
        return None
    what = "an integer " if integer else ""
    if hi is None and lo is not None:
        return f"{name} must be {what}{'>' if lo_open else '>='} {lo}, got {value!r}"
    domain = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    return f"{name} must be {what}in {domain}, got {value!r}"


def check_fields(obj, **domains: dict) -> None:
    """Raise ValueError listing every field of obj outside its domain (kwargs of domain_error)."""
    errors = [e for name, d in domains.items() if (e := domain_error(name, getattr(obj, name), **d))]
    if errors:
        raise ValueError("; ".join(errors))
