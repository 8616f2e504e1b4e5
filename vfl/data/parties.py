"""Which party holds which raw columns: parsing and validation of the parties YAML."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from vfl.config import read_yaml
from vfl.data.reader import DataError
from vfl.data.schema import ALL_FEATURES, CATEGORICAL_COLUMNS, DEFAULT_PARTIES, DENSE_COLUMNS

_PARTY_KEYS = ("dense", "categorical", "label", "drop_fraction")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class PartyColumns:
    """The raw columns of one party; `label` marks the leader; `drop_fraction` simulates missing rows."""

    name: str
    dense: tuple[str, ...]
    categorical: tuple[str, ...]
    label: bool = False
    drop_fraction: float = 0.0


def _suggest(value: str, options) -> str:
    options = list(options)
    same_case = [o for o in options if o.lower() == str(value).lower()]
    near = same_case or difflib.get_close_matches(str(value), options, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def parse_parties(doc: dict, source: str = "parties") -> list[PartyColumns]:
    """Validate a {name: {dense, categorical, label, drop_fraction}} mapping; report all errors."""
    if isinstance(doc, dict) and set(doc) == {"parties"}:
        doc = doc["parties"]
    errors: list[str] = []
    if not isinstance(doc, dict) or not doc:
        raise DataError(f"{source}: expected a mapping of party name -> columns, got {doc!r}")
    parties: list[PartyColumns] = []
    seen: dict[str, str] = {}
    for name, spec in doc.items():
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append(f"party name {name!r} must match {_NAME.pattern}")
            continue
        if not isinstance(spec, dict):
            errors.append(f"{name}: expected a mapping with keys {list(_PARTY_KEYS)}, got {spec!r}")
            continue
        for key in spec:
            if key not in _PARTY_KEYS:
                errors.append(f"{name}.{key}: unknown key{_suggest(key, _PARTY_KEYS)}; allowed: {list(_PARTY_KEYS)}")
        cols: dict[str, list[str]] = {}
        for kind, allowed in (("dense", DENSE_COLUMNS), ("categorical", CATEGORICAL_COLUMNS)):
            values = spec.get(kind, [])
            if not isinstance(values, list):
                errors.append(f"{name}.{kind}: expected a list of column names, got {values!r}")
                values = []
            for col in values:
                if col not in allowed:
                    errors.append(f"{name}.{kind}: unknown column {col!r}{_suggest(col, allowed)}; allowed: {allowed[0]}..{allowed[-1]}")
                elif col in seen:
                    errors.append(f"{name}.{kind}: column {col} is already held by party {seen[col]}")
                else:
                    seen[col] = name
            cols[kind] = [c for c in values if c in allowed]
        label = spec.get("label", False)
        if not isinstance(label, bool):
            errors.append(f"{name}.label: expected true or false, got {label!r}")
            label = False
        drop = spec.get("drop_fraction", 0.0)
        if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not 0.0 <= drop < 1.0:
            errors.append(f"{name}.drop_fraction: must be a number in [0, 1), got {drop!r}")
            drop = 0.0
        if not cols["dense"] and not cols["categorical"] and not label:
            errors.append(f"{name}: holds no columns")
        parties.append(PartyColumns(name, tuple(cols["dense"]), tuple(cols["categorical"]), label, float(drop)))
    labelled = [p.name for p in parties if p.label]
    if len(labelled) != 1:
        errors.append(f"exactly one party must have label: true (the leader), got {labelled}")
    if errors:
        raise DataError(f"{source}: " + "; ".join(errors))
    return parties


def load_parties(path: str | None) -> list[PartyColumns]:
    """Parties from a YAML file, or MindSpore splitnn_criteo's default split when path is None."""
    if path is None:
        return parse_parties(DEFAULT_PARTIES, "default parties")
    return parse_parties(read_yaml(path, DataError, "parties file"), path)


def unassigned_columns(parties: list[PartyColumns]) -> list[str]:
    """Feature columns that no party holds (allowed, reported in the manifest)."""
    held = {c for p in parties for c in p.dense + p.categorical}
    return [c for c in ALL_FEATURES if c not in held]
