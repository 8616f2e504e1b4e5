"""Which party holds which raw columns: parsing and validation of the parties YAML."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from privacy.field_types import Flag, Number, suggest
from vfl.config.report import problems
from vfl.config.yamlfile import read_yaml
from vfl.data.errors import DataError
from vfl.data.presets.criteo import ALL_FEATURES, CATEGORICAL_COLUMNS, DEFAULT_PARTIES, DENSE_COLUMNS

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class PartySpec(BaseModel):
    """One entry of the parties YAML: the schema of its keys (column names are checked against the data schema)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dense: list[str] = []
    categorical: list[str] = []
    label: Flag() = False  # the leader: the party holding the labels
    drop_fraction: Number(0.0, 1.0, hi_open=True) = 0.0  # simulate this party missing a share of rows


@dataclass(frozen=True)
class PartyColumns:
    """The raw columns of one party; `label` marks the leader; `drop_fraction` simulates missing rows."""

    name: str
    dense: tuple[str, ...]
    categorical: tuple[str, ...]
    label: bool = False
    drop_fraction: float = 0.0


def parse_parties(doc: dict, source: str = "parties") -> list[PartyColumns]:
    """Validate a {name: {dense, categorical, label, drop_fraction}} mapping; report all errors."""
    if isinstance(doc, dict) and set(doc) == {"parties"}:
        doc = doc["parties"]
    errors: list[str] = []
    if not isinstance(doc, dict) or not doc:
        raise DataError(f"{source}: expected a mapping of party name -> columns, got {doc!r}")
    parties: list[PartyColumns] = []
    seen: dict[str, str] = {}
    for name, raw in doc.items():
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append(f"party name {name!r} must match {_NAME.pattern}")
            continue
        try:
            spec = PartySpec.model_validate({} if raw is None else raw)
        except ValidationError as e:
            errors += [
                f"{name}: {p.replace('allowed in top level', f'allowed in {name}')}" for p in problems(PartySpec, e)
            ]
            continue
        cols: dict[str, list[str]] = {}
        for kind, allowed in (("dense", DENSE_COLUMNS), ("categorical", CATEGORICAL_COLUMNS)):
            values = getattr(spec, kind)
            for col in values:
                if col not in allowed:
                    errors.append(
                        f"{name}.{kind}: unknown column {col!r}{suggest(col, allowed)}; allowed: {allowed[0]}..{allowed[-1]}"
                    )
                elif col in seen:
                    errors.append(f"{name}.{kind}: column {col} is already held by party {seen[col]}")
                else:
                    seen[col] = name
            cols[kind] = [c for c in values if c in allowed]
        if not cols["dense"] and not cols["categorical"] and not spec.label:
            errors.append(f"{name}: holds no columns")
        parties.append(
            PartyColumns(name, tuple(cols["dense"]), tuple(cols["categorical"]), spec.label, float(spec.drop_fraction))
        )
    labelled = [p.name for p in parties if p.label]
    if len(labelled) != 1 and len(parties) == len(doc):  # (a party whose keys are wrong may be the labelled one)
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
