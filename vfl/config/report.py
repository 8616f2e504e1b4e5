"""Schema problems in words: a pydantic ValidationError as one sentence per problem, and `key.path=value` overrides."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from privacy.field_types import DOMAIN_ERROR


def _model_of(annotation) -> type[BaseModel] | None:
    """The BaseModel inside `X`, `X | None` or `Optional[X]`, else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def section_model(root: type[BaseModel], path: tuple) -> type[BaseModel] | None:
    """The model class of the section at path (a tuple of keys), or None when path leaves the schema."""
    model = root
    for key in path:
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            return None
        model = _model_of(field.annotation)
        if model is None:
            return None
    return model


def section_keys(root: type[BaseModel], path: tuple) -> list[str]:
    model = section_model(root, path)
    return list(model.model_fields) if model is not None else []


def off_switch(schema: dict) -> None:
    """json_schema_extra of an optional section that `false` switches off (fill_empty_sections): editors accept it."""
    schema.setdefault("anyOf", []).append({"const": False})


def fill_empty_sections(root: type[BaseModel], doc: Any) -> Any:
    """`train:` with nothing under it means the section's defaults, as in a mapping with no keys; a section that is off
    by default and declares off_switch (early_stopping, label_dp, linear_optimizer) given `false` is off, so that
    `train.early_stopping=false` on the command line switches off what the YAML switched on."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    for key, value in doc.items():
        field = root.model_fields.get(key) if isinstance(key, str) else None
        sub = _model_of(field.annotation) if field is not None else None
        if sub is None:
            continue
        if value is False and field.json_schema_extra is off_switch:
            out[key] = None
            continue
        out[key] = {} if value is None else fill_empty_sections(sub, value)
    return out


def unknown_key_message(root: type[BaseModel], loc: tuple, hint_for=None) -> str:
    parent, key = loc[:-1], str(loc[-1])
    allowed = section_keys(root, parent)
    where = ".".join(map(str, parent))
    full = f"{where}.{key}" if where else key
    near = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {(where + '.' if where else '') + near[0]!r}?" if near else ""
    extra = hint_for(key) if hint_for else ""
    return f"unknown key {full!r}{hint}{extra}; allowed in {where or 'top level'}: {', '.join(allowed)}"


def problems(root: type[BaseModel], error: ValidationError, hint_for=None) -> list[str]:
    """One sentence per error of validating a document against root: path, value and domain."""
    out: list[str] = []
    for e in error.errors(include_url=False):
        loc = tuple(e["loc"])
        path = ".".join(map(str, loc))
        parent = ".".join(map(str, loc[:-1]))
        if e["type"] == DOMAIN_ERROR:
            out.append(f"{parent + '.' if parent else ''}{e['ctx']['message']}")
        elif e["type"] == "extra_forbidden":
            out.append(unknown_key_message(root, loc, hint_for))
        elif e["type"] == "missing":
            out.append(f"{path} is required")
        elif e["type"] in ("model_type", "model_attributes_type", "dict_type", "dataclass_type"):
            out.append(f"{path or 'top level'}: expected a mapping, got {e['input']!r}")
        else:
            out.append(f"{path or 'top level'}: {e['msg']}, got {e['input']!r}")
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """`train.lr=1e-4` -> ("train.lr", 0.0001): the value is read as YAML (lists, null, true work too)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ValueError(f"override {text!r} must look like key.path=value (e.g. train.lr=1e-4)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(doc: dict, overrides: dict[str, Any]) -> dict:
    """doc with each dotted key set (sections created as needed, and a section the file switched off with `false` is
    switched on by a key set inside it); a malformed section is left for validation."""
    for dotted, value in overrides.items():
        node = doc
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.get(key)
            if child is None or child is False:
                child = node[key] = {}
            if not isinstance(child, dict):
                break  # the section itself is malformed; validation reports it
            node = child
        else:
            node[leaf] = value
    return doc
