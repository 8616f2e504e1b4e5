"""Each built-in model's own options (`model.bottom.options`, `model.top.options`): pydantic models, no torch.

The config (vfl/config/schema.py) validates `options` against the model its `name` picks, so a typo in a DCN-v2
option is reported with the YAML's other problems, before torch is imported; the JSON Schema carries the same
models. A user's own module (`import: "pkg.mod:Class"`) takes `options` as a free mapping, given to its constructor.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from privacy.field_types import Choice, Flag, Number

# `package.module:Class` (the entry-point syntax); the class may be nested (`mod:Outer.Inner`)
IMPORT_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"
IMPORT_RX = re.compile(IMPORT_PATTERN)
# model.bottom.numeric_scaling, for every bottom (vfl/models/numeric_scaling.py)
NUMERIC_SCALINGS = ("none", "standard")


class Options(BaseModel):
    """A model's options: frozen, unknown names refused (with the config's did-you-mean)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class WideDeepOptions(Options):
    """wide_deep has no options of its own: embedding_dim, hidden, cut_dim and dropout are model.bottom's."""


class DeepFMOptions(Options):
    # numeric columns join the FM's second-order term as value-scaled vectors v_j x_j (Guo et al. 2017, Sec. 2.1:
    # "x is ... continuous fields"); false: they enter the first-order term and the deep tower only
    fm_numeric: Flag() = True


class DCNv2Options(Options):
    cross_layers: Number(1, 16, integer=True) = 3  # L cross layers x_{l+1} = x0 * (W_l x_l + b_l) + x_l
    # unset: full-rank W_l (d x d, Eq. 1); r: W_l = U_l V_l^T with U, V of d x r (the low-rank cross, Eq. 2)
    low_rank: Optional[Number(1, 4096, integer=True)] = None
    structure: Choice("parallel", "stacked") = "parallel"  # Fig. 2: the deep tower beside or after the cross net


class MLPOptions(Options):
    """mlp has no options of its own: embedding_dim, hidden, cut_dim and dropout are model.bottom's."""


class LinearTopOptions(Options):
    """linear has no options."""


class MLPTopOptions(Options):
    """mlp's layer sizes are model.top.hidden."""


class InteractionTopOptions(Options):
    # each party's cut is projected to `rank` values per output; the top adds <s_p, s_q> for every pair of parties
    rank: Number(1, 256, integer=True) = 8


BOTTOM_OPTIONS: dict[str, type[Options]] = {
    "wide_deep": WideDeepOptions,
    "deepfm": DeepFMOptions,
    "dcn_v2": DCNv2Options,
    "mlp": MLPOptions,
}
TOP_OPTIONS: dict[str, type[Options]] = {
    "linear": LinearTopOptions,
    "mlp": MLPTopOptions,
    "interaction": InteractionTopOptions,
}


def options_problems(model: type[Options], options: Any, where: str) -> list[str]:
    """Every problem of `options` for `model`, each naming where.options.<key>, the value and the domain."""
    import difflib

    from privacy.field_types import DOMAIN_ERROR

    try:
        model.model_validate(options)
    except ValidationError as e:
        out = []
        for err in e.errors(include_url=False):
            key = ".".join(map(str, err["loc"]))
            if err["type"] == DOMAIN_ERROR:
                out.append(f"{where}.options.{err['ctx']['message']}")
            elif err["type"] == "extra_forbidden":
                near = difflib.get_close_matches(key, list(model.model_fields), n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                allowed = ", ".join(model.model_fields) or "none"
                out.append(f"{where}.options: unknown key {key!r}{hint}; allowed: {allowed}")
            else:
                out.append(f"{where}.options.{key}: {err['msg']}, got {err['input']!r}")
        return out
    return []


def options_schema(choices: dict[str, type[Options]]) -> list[dict]:
    """JSON Schema `if name is X then options is X's model` clauses, one per built-in model."""
    return [
        {
            "if": {"properties": {"name": {"const": name}}, "required": ["name"]},
            "then": {"properties": {"options": model.model_json_schema()}},
        }
        for name, model in choices.items()
    ]
