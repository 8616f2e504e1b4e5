"""The model a party trained, stored with its checkpoint, so that prediction, serving, export and resume build it.

A table party whose YAML leaves model.bottom unset gets the tuned recipe's model (and the leader its top), and a
bottom with some keys set gets its unset sizes, both chosen from the rows of its shard (vfl/training/table_defaults.py).
Those choices depend on the shard a command is given and on the recipe's constants, so training writes what it built
into every checkpoint (`extra[MODEL_CONFIG_KEY]`) and its sidecar (read before torch): {"bottom": the bottom config
as BottomParty built it, every key; "top": the leader's top config, None on a follower}.

A reader validates it with the config's own schema (ModelConfig: the domains a YAML gets; JSON, never eval or
pickle) and refuses, in one line, a record that does not validate, a key the party's YAML sets to another value, or
a record that differs from the config outside the keys a table run sizes (SIZED_KEYS; an import path, options or
dropout the YAML does not name are refused: a record never chooses code) or sizes out of bounds (`with_trained_model`). Where the YAML leaves model.bottom or model.top unset, the record's goes there: the config
then hashes to the model digest of the run record (vfl/runs/record.py) and says the cut width the handshakes
compare; BottomParty builds the recorded bottom itself, sizes included. A checkpoint written before the record
existed is read as before: the model resolved from the shard's rows (`table_model_of_shard`).
"""

from __future__ import annotations

import os

from pydantic import ValidationError

from vfl.config.model_sections import BottomConfig, ModelConfig, TopConfig
from vfl.config.report import problems
from vfl.config.schema import ConfigError, PartyConfig
from vfl.training.checkpoint_format import MODEL_CONFIG_KEY, checkpoint_meta
from vfl.training.table_defaults import (
    SMALL_MODEL,
    TUNED_BOTTOM,
    TUNED_TOP,
    is_table_party,
    table_model,
    table_model_of_shard,
)

# The keys a table run fills where its YAML leaves them unset (vfl/training/table_defaults.py): the only keys in which
# a record may differ from the config it is read with. Everything else (an import path, options, dropout, scaling)
# must be the config's own, so a record can never name code or a model the YAML does not.
SIZED_KEYS = {"bottom": frozenset(TUNED_BOTTOM) | frozenset(SMALL_MODEL), "top": frozenset(TUNED_TOP)}
MAX_RECORDED_LAYERS = 16  # a recorded `hidden` longer than this, or wider than the schema's 4096, is refused
MAX_RECORDED_WIDTH = 4096


def _choice_doc(choice: BottomConfig | TopConfig) -> dict:
    """Every key of a model choice as JSON, its name or its import path (the schema refuses both)."""
    doc = choice.model_dump(mode="json", by_alias=True)
    doc.pop("name" if choice.import_ is not None else "import")
    return doc


def model_record(cfg: PartyConfig, bottom: BottomConfig) -> dict:
    """What a checkpoint stores under MODEL_CONFIG_KEY: the bottom as built, and the leader's top (None on a
    follower)."""
    top = cfg.model.top if cfg.is_leader else None
    return {"bottom": _choice_doc(bottom), "top": _choice_doc(top) if top is not None else None}


def parse_model_record(doc, where: str) -> ModelConfig | None:
    """A stored model record validated by the config schema (None where there is none: an older checkpoint); a
    ConfigError in one line, naming `where` and each problem, where it does not validate."""
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where} records its model ({MODEL_CONFIG_KEY}) as {type(doc).__name__}, not a mapping")
    try:
        return ModelConfig.model_validate(doc)
    except ValidationError as e:
        found = " ".join("; ".join(problems(ModelConfig, e)).split())
        raise ConfigError(
            f"{where} records a model ({MODEL_CONFIG_KEY}) that does not validate: {found}; the checkpoint was "
            "altered or written by another program: use the training run's own checkpoint"
        ) from None


def _contradictions(now: BottomConfig | TopConfig, stored: BottomConfig | TopConfig, section: str) -> list[str]:
    """Each key the YAML sets in `section` to a value other than the stored one, as 'KEY STORED (the config: NOW)'."""
    out = []
    for field in sorted(now.model_fields_set):
        was, is_ = getattr(stored, field), getattr(now, field)
        if was != is_:
            key = f"model.{section}.{field.rstrip('_')}"
            out.append(f"{key} {_shown(was)} (the config sets {_shown(is_)})")
    return out


def _unsized(now: BottomConfig | TopConfig, stored: BottomConfig | TopConfig, section: str) -> list[str]:
    """Each key the YAML leaves unset in which the record differs from the config, outside the keys a table run
    sizes (SIZED_KEYS), and each recorded size out of bounds: what no training run of this config could have built."""
    sized = {k: getattr(stored, k) for k in SIZED_KEYS[section] if k not in now.model_fields_set}
    # what this config trains with the record's sizes, normalised as a stored record is (options by the model's name)
    try:
        could = type(now).model_validate(_choice_doc(now.model_copy(update=sized)))
    except ValidationError:  # e.g. options the YAML sets for another model than the recorded name
        return [f"model.{section} {_choice_doc(stored)} (the config's keys do not fit it)"]
    out = []
    for field in sorted(type(now).model_fields):
        was, is_ = getattr(stored, field), getattr(could, field)
        if was != is_:
            key = field.rstrip("_")
            sizes = ", ".join(sorted(SIZED_KEYS[section]))
            out.append(f"model.{section}.{key} {_shown(was)} (the config: {_shown(is_)}; a run sizes only {sizes})")
    hidden = tuple(getattr(stored, "hidden", ()))
    if len(hidden) > MAX_RECORDED_LAYERS or any(w > MAX_RECORDED_WIDTH for w in hidden):
        out.append(
            f"model.{section}.hidden {_shown(hidden)} (a table run builds at most {MAX_RECORDED_LAYERS} "
            f"layers of at most {MAX_RECORDED_WIDTH})"
        )
    return out


def _shown(value) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def _keys_as(model, yaml_choice):
    """The stored choice with the YAML's set keys (none): the recipe's readers see the section as the YAML left it."""
    object.__setattr__(model, "__pydantic_fields_set__", set(yaml_choice.model_fields_set))
    return model


def with_trained_model(cfg: PartyConfig, model: ModelConfig, where: str) -> PartyConfig:
    """cfg with the stored model where its YAML leaves model.bottom (or the leader's model.top) unset, the rest of cfg
    as it is; a ConfigError naming every key the YAML sets to another value than the training run's."""
    bottom, top = cfg.model.bottom, cfg.model.top
    found = _contradictions(bottom, model.bottom, "bottom")
    if cfg.is_leader and top is not None:
        found += _contradictions(top, model.top or TopConfig(), "top")
    if not cfg.is_leader and model.top is not None:
        found.append(f"a top model {_choice_doc(model.top)} (a follower trains none)")
    if found:
        raise ConfigError(
            f"{where} was trained with {'; '.join(found)}: use the config of the training run, or train again"
        )
    unsized = _unsized(bottom, model.bottom, "bottom")
    if cfg.is_leader and model.top is not None:
        unsized += _unsized(top or TopConfig(), model.top, "top")
    if unsized:
        raise ConfigError(
            f"{where} records a model this config never trains: {'; '.join(unsized)}; the checkpoint or its sidecar "
            "was altered: use the training run's own checkpoint"
        )
    update = {}
    if not bottom.model_fields_set:
        update["bottom"] = _keys_as(model.bottom.model_copy(), bottom)
    if cfg.is_leader and model.top is not None and (top is None or not top.model_fields_set):
        update["top"] = _keys_as(model.top.model_copy(), top or TopConfig())
    if all(getattr(cfg.model, k) == v for k, v in update.items()):
        return cfg
    return cfg.model_copy(update={"model": cfg.model.model_copy(update=update)})


def stored_model(checkpoint: str) -> ModelConfig | None:
    """The model the checkpoint at `checkpoint` records: from its sidecar where that is this file's, else from the
    checkpoint itself (weights_only=True); None for one written before the record existed, or a file that cannot
    be read (its load says why, in one line)."""
    where = f"checkpoint {checkpoint}"
    meta = checkpoint_meta(checkpoint)
    if meta is not None:
        return parse_model_record(meta.get(MODEL_CONFIG_KEY), where)
    if not os.path.isfile(checkpoint):
        return None
    from vfl.training.checkpoint import load_checkpoint

    try:
        ckpt = load_checkpoint(checkpoint)
    except Exception:  # noqa: BLE001 - a truncated or foreign file: the load that follows names it
        return None
    extra = ckpt.get("extra") if isinstance(ckpt, dict) else None
    return parse_model_record(extra.get(MODEL_CONFIG_KEY) if isinstance(extra, dict) else None, where)


def trained_config(cfg: PartyConfig, checkpoint: str) -> PartyConfig:
    """The config that predict, serve and export run a table party with: its checkpoint's model where it records
    one, else (an older checkpoint) the model resolved from the shard at data.path. Other parties: cfg as it is (the
    load checks their record against it)."""
    if not is_table_party(cfg):
        return cfg
    model = stored_model(checkpoint)
    if model is None:
        return table_model_of_shard(cfg)
    return with_trained_model(cfg, model, f"checkpoint {checkpoint}")


def training_model(cfg: PartyConfig, rows: int) -> tuple[PartyConfig, BottomConfig | None]:
    """(the config a training run trains with, the bottom BottomParty builds or None to size it from the shard): a
    run resuming a checkpoint that records its model trains that model; any other, the table recipe's for `rows`."""
    resume = cfg.train.resume_from
    model = stored_model(resume) if resume else None
    if model is None:
        return table_model(cfg, rows), None
    return with_trained_model(cfg, model, f"train.resume_from {resume!r}"), model.bottom
