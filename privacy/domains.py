"""Parameter domains as pydantic v2 types: one check, one message and one JSON Schema per number or choice.

Every numeric or enumerated setting (party YAML, FedAvg YAML, mechanism parameters) is declared with
`Number(...)`, `Choice(...)` or `IntList(...)`; a bad value raises a `PydanticCustomError` whose
message names the field, the allowed domain and the value. Numbers accept YAML 1.2 spellings that
PyYAML (YAML 1.1) leaves as strings: `1e-4`, `inf`, `-inf`, `1_000`.
"""

from __future__ import annotations

import difflib
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo
from pydantic_core import PydanticCustomError

DOMAIN_ERROR = "vfl_domain"  # the error type of every check here; vfl/config/schema.py formats it


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


def _fail(message: str):
    return PydanticCustomError(DOMAIN_ERROR, "{message}", {"message": message})


# the most eps any sample id of a labelled dataset may spend over every release of it (training's
# privacy.label_dp.budget and the standalone LabelDP / RegressionLabelDP's budget=): 8 is the top of the range label-DP
# papers report (Ghazi et al. 2021 go to 8), where binary RR flips 0.03% of labels
DEFAULT_LABEL_DP_BUDGET = 8.0


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


# Label-DP eps (randomized response, RRWithPrior): where the mechanisms are numerically sound. Below 1e-3 the
# flip probability is within 2.5e-4 of 1/2: the forward correction divides by 1 - 2 rho < 5e-4 and float32 keeps
# almost nothing of the label (eps = 1e-300 rounds to exactly 1/2 and the debiasing divides by zero). Above 50,
# e^eps leaves float range soon after (math.exp overflows at 710) and nothing changes below it anyway: the flip
# probability 1/(1 + e^eps) is under 2^-53, the resolution of the leader's PRF uniforms, from eps ~ 36.7, so such a
# release is already noise-free. inf is the explicit noise-free value.
LABEL_EPS_MIN = 1e-3
LABEL_EPS_MAX = 50.0
LABEL_EPS_DOMAIN = f"in [{LABEL_EPS_MIN:g}, {LABEL_EPS_MAX:g}], or inf for no noise"


def label_eps_error(name: str, value) -> str | None:
    """None when value is a label-DP eps (LABEL_EPS_DOMAIN), else the sentence quoting the value and the domain."""
    value = yaml12_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = " (write .inf for no noise)" if isinstance(value, str) and "inf" in value.lower() else ""
        return f"{name} must be a number, got {value!r}{hint} (allowed: {LABEL_EPS_DOMAIN})"
    if value == math.inf or LABEL_EPS_MIN <= value <= LABEL_EPS_MAX:
        return None
    return f"{name} must be {LABEL_EPS_DOMAIN}, got {name.rsplit('.', 1)[-1]}={value!r}"


PRIOR_EPS_FRACTION = 0.1  # privacy.label_dp.prior_eps_fraction's default: the DP-histogram prior's share of eps


def eps_split_problem(eps: Any, fraction: Any, name: str = "privacy.label_dp.") -> str | None:
    """None when eps x fraction (the DP histogram's share) and eps x (1 - fraction) (the randomizer's) are both
    label-DP eps values, else the one-line error naming both (`name`: the settings' prefix); None for values other
    rules refuse (not numbers)."""
    eps, fraction = yaml12_number(eps), yaml12_number(fraction)
    real = [isinstance(v, (int, float)) and not isinstance(v, bool) and v == v for v in (eps, fraction)]
    if not all(real) or label_eps_error("eps", eps) or not 0 < fraction < 1:
        return None
    prior, rest = eps * fraction, eps * (1.0 - fraction)
    if math.isinf(eps) or not (label_eps_error("eps", prior) or label_eps_error("eps", rest)):
        return None
    return (
        f"{name}eps {eps:g} with prior_eps_fraction {fraction:g} gives the DP-histogram prior eps "
        f"{prior:.4g} and the randomizer eps {rest:.4g}; each must be {LABEL_EPS_DOMAIN} (raise eps, or move "
        "prior_eps_fraction towards 0.5)"
    )


def LabelEps():
    """A label-DP eps: a float in [LABEL_EPS_MIN, LABEL_EPS_MAX], or inf (no noise)."""

    def check(value: Any, info: ValidationInfo):
        err = label_eps_error(info.field_name or "eps", value)
        if err:
            raise _fail(err)
        return float(yaml12_number(value))

    # JSON Schema has no infinity: the maximum is stated in words, so that .inf still validates in an editor
    schema = {"minimum": LABEL_EPS_MIN, "description": f"label-DP eps {LABEL_EPS_DOMAIN}"}
    return Annotated[float, BeforeValidator(check), Field(json_schema_extra=schema)]


def Number(lo=None, hi=None, *, lo_open: bool = False, hi_open: bool = False, integer: bool = False):
    """An int (integer=True) or float field inside [lo, hi] (open ends with lo_open / hi_open)."""

    def check(value: Any, info: ValidationInfo):
        err = domain_error(info.field_name or "value", value, lo, hi, lo_open, hi_open, integer)
        if err:
            raise _fail(err)
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
            raise _fail(f"{info.field_name} must be one of {list(options)}, got {value!r}{suggest(value, options)}")
        return value

    return Annotated[Literal[options], BeforeValidator(check)]


def IntList(lo: int = 1):
    """A list of integers >= lo (stored as a tuple)."""

    def check(value: Any, info: ValidationInfo):
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) or v < lo for v in value):
            raise _fail(f"{info.field_name} must be a list of integers >= {lo}, got {value!r}")
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
            raise _fail(f"{info.field_name} must {rule}, got {value!r}")
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
            raise _fail(f"{info.field_name} must be true or false, got {value!r}")
        return value

    return Annotated[bool, BeforeValidator(check)]


class Params(BaseModel):
    """A mechanism's parameters: frozen, keyword-only, unknown names refused, every field checked on construction
    (a bad value raises pydantic's ValidationError, a ValueError)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
