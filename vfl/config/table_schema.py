"""`data.schema` of a party's YAML: its table's id column, each feature column's kind and transform, and the label.

```yaml
data:
  schema:
    id: customer_id                 # the id column (integer or text): the PSI join key
    columns:                        # name -> kind, or name -> {kind, transform}
      age: numeric                  # default transform: standardize
      income: {kind: numeric, transform: log1p}           # log1p | standardize | none | {quantile_bins: N}
      tenure: {kind: numeric, transform: {embedding: piecewise_linear, bins: 32}}   # or {embedding: periodic}
      city: categorical             # default transform: {vocabulary: {min_count: 2}}
      device: {kind: categorical, transform: {hash: {buckets: 1000}}}
    label: {column: churned}        # leader only; classes: [no, yes] for named classes; clip: [lo, hi] for regression
    delimiter: ";"                  # a text file's delimiter: , tab ; | (or comma, tab, semicolon, pipe); unset: sniffed
    keys: text                      # how a categorical value becomes a key: text (default) or hex (Criteo's values)
```

`data.schema` may also name a YAML file holding the mapping under `schema:` (or at its top level). These are the
declarations only; vfl/data/table.py fits them on the party's own file and saves what it fitted with the shard.
The errors follow the config's rules: each names the key, the value and the allowed domain (privacy/field_types.py).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from privacy.field_types import Choice, Text, field_error, suggest

KINDS = ("numeric", "categorical")
NUMERIC_TRANSFORMS = ("log1p", "standardize", "none", "quantile_bins", "piecewise_linear", "periodic")
EMBEDDINGS = ("piecewise_linear", "periodic")  # numeric embeddings (vfl/models/numeric_embeddings.py)
CATEGORICAL_TRANSFORMS = ("vocabulary", "hash")
DEFAULT_TRANSFORM = {"numeric": {"standardize": {}}, "categorical": {"vocabulary": {"min_count": 2}}}
PARAMS = {  # transform -> parameter -> (lo, hi, default); an integer, or a float where the default is one
    "quantile_bins": {"bins": (2, 65_536, 16)},
    # Gorishniy, Rubachev, Babenko, NeurIPS 2022: sec. 3.2 (piecewise-linear encoding over quantile bins, eq. 1) and
    # sec. 3.3 (periodic: k frequencies, initialised from N(0, sigma^2)); dim: each column's embedding width
    "piecewise_linear": {"bins": (2, 1024, 32), "dim": (1, 256, 8)},
    "periodic": {"frequencies": (1, 256, 16), "dim": (1, 256, 8), "sigma": (1e-4, 100.0, 0.1)},
    "vocabulary": {"min_count": (1, 2**31 - 1, 2)},
    "hash": {"buckets": (3, 2**31 - 1, 1000)},
}
MAX_COLUMNS = 4096
DELIMITERS = {"comma": ",", "tab": "\t", "semicolon": ";", "pipe": "|"}  # a text table's delimiters, by name
KEY_SCHEMES = ("text", "hex")  # vfl/data/readers/category_keys.py: any text hashed; 8 hex digits as their value


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def normalize_transform(kind: str, value: Any, where: str) -> tuple[str, dict]:
    """A transform as (name, {param: int}) from its YAML forms: `standardize`, `{quantile_bins: 16}`,
    `{vocabulary: {min_count: 5}}`, `vocabulary`; ValueError naming the value and the domain."""
    allowed = NUMERIC_TRANSFORMS if kind == "numeric" else CATEGORICAL_TRANSFORMS
    if value is None:
        name, params = next(iter(DEFAULT_TRANSFORM[kind].items()))
        return name, _params(name, params, where)
    if isinstance(value, dict) and "embedding" in value and kind == "numeric":  # {embedding: NAME, bins: N, ...}
        name, params = value["embedding"], {k: v for k, v in value.items() if k != "embedding"}
        if name not in EMBEDDINGS:
            raise field_error(
                f"{where}.embedding must be one of {list(EMBEDDINGS)}, got {name!r}{suggest(str(name), EMBEDDINGS)}"
            )
    elif isinstance(value, str):
        name, params = value, {}
    elif isinstance(value, dict) and len(value) == 1:
        name, params = next(iter(value.items()))
    else:
        raise field_error(
            f"{where} must be one of {list(allowed)} (a name, or a mapping of one name to its options), got {value!r}"
        )
    if name not in allowed:
        other = "categorical" if kind == "numeric" else "numeric"
        also = f" ({name!r} is a {other} transform)" if name in (CATEGORICAL_TRANSFORMS + NUMERIC_TRANSFORMS) else ""
        raise field_error(
            f"{where} of a {kind} column must be one of {list(allowed)}, got {name!r}{also}{suggest(name, allowed)}"
        )
    if name == "quantile_bins" and not isinstance(params, dict):
        params = {"bins": params}  # {quantile_bins: 16}
    return name, _params(name, params, where)


def _params(name: str, params: Any, where: str) -> dict:
    spec = PARAMS.get(name, {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise field_error(f"{where}.{name} must be a mapping of options {sorted(spec)}, got {params!r}")
    if name in EMBEDDINGS and params.get("bins_from", "quantile") != "quantile":
        raise field_error(
            f"{where}.{name}.bins_from must be 'quantile' (bins fitted on the party's own feature values, never its "
            f"labels), got {params['bins_from']!r}: target-aware (tree) bins are not offered (docs/own-table.md)"
        )
    params = {k: v for k, v in params.items() if k != "bins_from"} if name in EMBEDDINGS else params
    unknown = [k for k in params if k not in spec]
    if unknown:
        raise field_error(
            f"{where}.{name} has unknown option {unknown[0]!r}{suggest(unknown[0], list(spec))}; allowed: {sorted(spec) or 'none'}"
        )
    out = {}
    for key, (lo, hi, default) in spec.items():
        v = params.get(key, default)
        if isinstance(default, float):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise field_error(f"{where}.{name}.{key} must be a number in [{lo}, {hi}], got {v!r}")
            v = float(v)
        elif isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise field_error(f"{where}.{name}.{key} must be an integer in [{lo}, {hi}], got {v!r}")
        out[key] = v
    return out


class ColumnSpec(_Spec):
    """One feature column: its kind and its transform (normalized to {name: {options}})."""

    kind: Choice(*KINDS)
    transform: Optional[dict[str, dict[str, int | float]]] = None

    @classmethod
    def parse(cls, name: str, value: Any) -> ColumnSpec:
        where = f"columns.{name}"
        if isinstance(value, str):
            value = {"kind": value}
        if not isinstance(value, dict):
            raise field_error(f"{where} must be a kind ({' or '.join(KINDS)}) or {{kind, transform}}, got {value!r}")
        unknown = [k for k in value if k not in ("kind", "transform")]
        if unknown:
            raise field_error(
                f"{where} has unknown key {unknown[0]!r}{suggest(unknown[0], ['kind', 'transform'])}; allowed: kind, transform"
            )
        kind = value.get("kind")
        if kind not in KINDS:
            raise field_error(f"{where}.kind must be one of {list(KINDS)}, got {kind!r}{suggest(kind, KINDS)}")
        t_name, t_params = normalize_transform(kind, value.get("transform"), f"{where}.transform")
        return cls(kind=kind, transform={t_name: t_params})

    @property
    def transform_name(self) -> str:
        return next(iter(self.transform))

    @property
    def transform_params(self) -> dict[str, int | float]:
        return next(iter(self.transform.values()))


class LabelSpec(_Spec):
    """The leader's label column; `classes` names the classes in id order (binary: [negative, positive]);
    `clip` bounds a regression label."""

    column: Text()
    classes: Optional[tuple[str, ...]] = None
    clip: Optional[tuple[float, float]] = None

    @field_validator("classes", mode="before")
    @classmethod
    def _classes(cls, v):
        if v is None:
            return v
        if not isinstance(v, (list, tuple)) or not 2 <= len(v) <= 127:
            raise field_error(f"classes must be a list of 2 to 127 class names, got {v!r}")
        names = [str(x) for x in v]
        if len(set(names)) != len(names):
            raise field_error(f"classes names a class twice: {names}")
        return tuple(names)

    @field_validator("clip", mode="before")
    @classmethod
    def _clip(cls, v):
        if v is None:
            return v
        ok = (
            isinstance(v, (list, tuple))
            and len(v) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
        )
        if not ok or not v[0] < v[1]:
            raise field_error(f"clip must be [lo, hi] with finite numbers lo < hi, got {v!r}")
        return (float(v[0]), float(v[1]))


class SchemaConfig(_Spec):
    """A party's table: the id column, its feature columns in file-independent order, and (leader) the label."""

    id: Text()
    columns: dict[str, ColumnSpec] = Field(default_factory=dict)
    label: Optional[LabelSpec] = None
    delimiter: Optional[str] = None  # a text file's field delimiter (one of DELIMITERS); None: sniffed from the header
    keys: str = "text"  # the categorical key scheme (one of KEY_SCHEMES)

    @field_validator("keys", mode="before")
    @classmethod
    def _keys(cls, v):
        if v is None:
            return "text"
        if v not in KEY_SCHEMES:
            raise field_error(f"keys must be one of {list(KEY_SCHEMES)}, got {v!r}{suggest(v, KEY_SCHEMES)}")
        return v

    @field_validator("delimiter", mode="before")
    @classmethod
    def _delimiter(cls, v):
        if v is None or v in DELIMITERS.values():
            return v
        if isinstance(v, str) and v.lower() in DELIMITERS:
            return DELIMITERS[v.lower()]
        raise field_error(
            f"delimiter must be one of {list(DELIMITERS.values())} or their names {list(DELIMITERS)}, got {v!r}"
        )

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, v):
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise field_error(f"columns must be a mapping of column name -> kind or {{kind, transform}}, got {v!r}")
        if len(v) > MAX_COLUMNS:
            raise field_error(f"columns declares {len(v)} columns; at most {MAX_COLUMNS}")
        out, errors = {}, []
        for name, spec in v.items():
            if not isinstance(name, str) or not name:
                errors.append(f"columns: a column name must be a non-empty string, got {name!r}")
                continue
            try:
                out[name] = spec if isinstance(spec, ColumnSpec) else ColumnSpec.parse(name, spec)
            except PydanticCustomError as e:
                errors.append(e.message())
        if errors:  # every column's problem at once
            raise field_error("; data.schema.".join(errors))
        return out

    @model_validator(mode="after")
    def _roles(self):
        used = {self.id: "the id column"}
        if self.label is not None:
            if self.label.column in used:
                raise field_error(f"schema.label.column {self.label.column!r} is also the id column")
            used[self.label.column] = "the label"
        for name in self.columns:
            if name in used:
                raise field_error(f"schema.columns.{name} is {used[name]}; a column is a feature, the id or the label")
        return self

    def names(self, kind: str) -> tuple[str, ...]:
        return tuple(n for n, c in self.columns.items() if c.kind == kind)


def load_schema_file(path: str) -> dict:
    """The schema mapping of a YAML file named by `data.schema` (under `schema:`, or at its top level)."""
    import yaml

    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise field_error(f"schema names the file {path!r}, which cannot be read ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise field_error(f"schema file {path!r} is not valid YAML: {' '.join(str(e).split())[:200]}") from None
    if isinstance(doc, dict) and isinstance(doc.get("schema"), dict):
        doc = doc["schema"]
    if not isinstance(doc, dict):
        raise field_error(f"schema file {path!r} must hold a mapping with id, columns and (leader) label")
    return doc
