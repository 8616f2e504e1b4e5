"""Label-DP parameter domains: the eps of a label release, the prior's share of it, the default budget.

Params, the base of a mechanism's parameters, is here too.

The generic field types (Number, Choice, IntList, Text, Flag) and the one message format are privacy/field_types.py's;
the eps domains here build on them.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

from privacy.field_types import field_error, yaml12_number

__all__ = [
    "DEFAULT_LABEL_DP_BUDGET",
    "LABEL_EPS_DOMAIN",
    "LABEL_EPS_MAX",
    "LABEL_EPS_MIN",
    "PRIOR_EPS_FRACTION",
    "LabelEps",
    "Params",
    "eps_split_problem",
    "label_eps_error",
]

# the most eps any sample id of a labelled dataset may spend over every release of it (training's
# privacy.label_dp.budget and the standalone LabelDP / RegressionLabelDP's budget=): 8 is the top of the range label-DP
# papers report (Ghazi et al. 2021 go to 8), where binary RR flips 0.03% of labels
DEFAULT_LABEL_DP_BUDGET = 8.0


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
            raise field_error(err)
        return float(yaml12_number(value))

    # JSON Schema has no infinity: the maximum is stated in words, so that .inf still validates in an editor
    schema = {"minimum": LABEL_EPS_MIN, "description": f"label-DP eps {LABEL_EPS_DOMAIN}"}
    return Annotated[float, BeforeValidator(check), Field(json_schema_extra=schema)]


class Params(BaseModel):
    """A mechanism's parameters: frozen, keyword-only, unknown names refused, every field checked on construction
    (a bad value raises pydantic's ValidationError, a ValueError)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
