"""docs/configuration.md's reference block quotes the schema: every default it shows is the schema's, every key exists."""

from __future__ import annotations

import re
import typing

import yaml

from tests.support.paths import REPO
from vfl.config.schema import PartyConfig

# Keys whose value in the reference block illustrates a setting rather than quoting a default, and why.
ILLUSTRATIVE = {
    "role": "required: leader | follower",
    "party": "required: the party's own name",
    "network.bind": "an address to bind (leader) or connect to (follower)",
    "network.followers": "the leader's followers, by name",
    "network.secret_key_file": "a key file path",
    "network.follower_keys": "a map of key file paths",
    "data.path": "required: the party's shard directory",
    "privacy.label_dp.eps": "required when label DP is on",
    "privacy.label_dp.debias": "unset resolves per mechanism (true for rr), as the block's comment says",
    "debug.record_gradients": "a path; absent by default",
    "debug.record_cuts": "a path; absent by default",
}


def _reference_block() -> dict:
    text = (REPO / "docs" / "configuration.md").read_text()
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))


def _section(annotation):
    """The pydantic model inside a field's annotation (Optional[Model] included), or None for a leaf."""
    candidates = [annotation, *typing.get_args(annotation)]
    return next((a for a in candidates if hasattr(a, "model_fields")), None)


def _leaves(model, doc: dict, prefix: str = ""):
    """(dotted key, value in the doc, the schema's field or None when the schema has no such key)."""
    for key, value in doc.items():
        field = model.model_fields.get(key)
        section = _section(field.annotation) if field is not None else None
        if isinstance(value, dict) and section is not None:
            yield from _leaves(section, value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value, field


def _default(field):
    """The field's default as YAML would show it (a default_factory called; tuples as lists)."""
    value = field.get_default(call_default_factory=True)
    return list(value) if isinstance(value, tuple) else value


def _drift(doc: dict) -> tuple[list[str], list[str], int]:
    """(keys the schema lacks, defaults quoted wrong, how many leaves were read)."""
    leaves = list(_leaves(PartyConfig, doc))
    unknown = [key for key, _, field in leaves if field is None]
    drifted = [
        f"{key}: docs {value!r}, schema {_default(field)!r}"
        for key, value, field in leaves
        if field is not None and key not in ILLUSTRATIVE and (field.is_required() or value != _default(field))
    ]
    return unknown, drifted, len(leaves)


def test_every_key_of_the_reference_block_exists_and_quotes_its_default():
    # Prepare / Execute
    unknown, drifted, read = _drift(_reference_block())
    # Assert
    assert not unknown, f"docs/configuration.md names keys the schema does not have: {unknown}"
    assert not drifted, "docs/configuration.md quotes defaults the schema does not have:\n" + "\n".join(drifted)
    assert read > 40  # the block was read, not skipped


def test_the_drift_check_catches_a_wrong_default():
    # Prepare: the block with one default changed by hand (as the old `debias: false` was) and one key misspelt
    doc = _reference_block()
    doc["train"]["lr"] = 0.01
    doc["train"]["batch_szie"] = doc["train"].pop("batch_size")
    # Execute
    unknown, drifted, _ = _drift(doc)
    # Assert
    assert unknown == ["train.batch_szie"] and drifted == ["train.lr: docs 0.01, schema 0.001"]
