"""Checks that need no peer and no torch, run before the heavy imports: data path and shard, resume step, sizes.

Each returns quickly (JSON and file headers only) so that a wrong `--data`, a checkpoint that cannot
be resumed with these epochs, or a model whose checkpoints would fill the disk is reported in well
under a second, before the party imports torch, binds a socket or waits for its peers.
"""

from __future__ import annotations

import json
import os

from vfl.config.schema import ConfigError, PartyConfig
from vfl.training.checkpoint_format import MODEL_CONFIG_KEY, checkpoint_meta
from vfl.training.table_defaults import shard_rows, table_model
from vfl.training.trained_model import parse_model_record, with_trained_model

CHECKPOINT_WARN_BYTES = 1 << 30  # warn above 1 GiB per checkpoint
RAW_SUFFIXES = (".tsv", ".txt", ".csv", ".gz")


def _looks_like_raw_data(path: str) -> bool:
    if path.endswith(RAW_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b"\t" in head


def _party_dirs(path: str) -> list[str]:
    try:
        return sorted(d for d in os.listdir(path) if os.path.isfile(os.path.join(path, d, "manifest.json")))
    except OSError:
        return []


def resolve_data_path(path: str, party: str) -> tuple[str, str | None]:
    """(this party's shard directory, a note when it was found inside the given path); DataError otherwise.

    Accepts the party's own directory OUT/<party>, or OUT itself (the path `python -m vfl.data prepare`
    prints), which resolves to OUT/<party>.
    """
    from vfl.data.errors import DataError  # (exit status 1, as when the shard itself is unreadable)

    prepare = "python -m vfl.data prepare --input RAW.tsv --out DIR"
    if not os.path.exists(path):
        raise DataError(
            f"data.path {path!r} does not exist: give this party's shard directory DIR/{party} written by `{prepare}`"
        )
    if os.path.isfile(path):
        if _looks_like_raw_data(path):
            raise DataError(
                f"data.path {path!r} is a raw data file, not a party shard: prepare it first with "
                f"`python -m vfl.data prepare --input {path} --out DIR`, then pass --data DIR/{party} "
                f"(or DIR)"
            )
        raise DataError(
            f"data.path {path!r} is a file; it must be this party's shard directory DIR/{party} written by `{prepare}`"
        )
    manifest = os.path.join(path, "manifest.json")
    if os.path.isfile(manifest):
        try:
            with open(manifest) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise DataError(f"data.path {path!r}: manifest.json cannot be read: {e}") from None
        if isinstance(doc, dict) and isinstance(doc.get("party"), dict):
            return path, None
        parties = _party_dirs(path)
        if party in parties:  # the dataset directory of prepare: pick this party's part
            return os.path.join(
                path, party
            ), f"data.path {path} holds the shards of {parties}; using {os.path.join(path, party)}"
        raise DataError(
            f"data.path {path!r} is a prepared dataset with the shards of {parties}, none of them "
            f"{party!r}: pass --data {os.path.join(path, parties[0]) if parties else 'DIR/' + party} "
            f"for the party it was prepared for, or prepare with a parties file naming {party!r}"
        )
    parties = _party_dirs(path)
    if party in parties:
        return os.path.join(path, party), f"using {os.path.join(path, party)} inside data.path {path}"
    raise DataError(
        f"data.path {path!r} has no manifest.json: it is not a party shard written by `{prepare}`"
        + (f" (it holds the shards of {parties})" if parties else "")
    )


def read_manifest(shard_dir: str) -> dict:
    with open(os.path.join(shard_dir, "manifest.json")) as f:
        return json.load(f)


def resume_identity(cfg: PartyConfig) -> dict:
    """What a run must keep to be resumed: its models (name or import path, options, sizes) and its optimizers.

    Written into each checkpoint's sidecar, so that check_resume refuses another one here, before torch is imported
    and before any peer is contacted; loading the checkpoint checks the same again (check_model_spec, OptimizerSet).
    """
    identity = {
        "model.bottom": cfg.model.bottom.spec,
        "train.optimizer": cfg.train.optimizer,
        "train.linear_optimizer": cfg.train.linear_optimizer.name if cfg.train.linear_optimizer else None,
    }
    if cfg.is_leader:
        identity["model.top"] = cfg.model.top.spec
    return json.loads(json.dumps(identity))  # as the sidecar reads it back (tuples as lists)


def _check_identity(cfg: PartyConfig, path: str, saved: dict) -> None:
    """Each setting the sidecar recorded must be this config's (keys it lacks are from an older checkpoint)."""
    for key, now in resume_identity(cfg).items():
        if key in saved and saved[key] != now:
            was, has = (json.dumps(v, sort_keys=True, separators=(",", ":")) for v in (saved[key], now))
            raise ConfigError(
                f"train.resume_from {path!r} was trained with {key} {was}, but this config has {has}; "
                "resume with the settings it was trained with, or start a new run"
            )


def check_resume(cfg: PartyConfig, manifest: dict) -> None:
    """A resume checkpoint must exist, belong to this party, have been trained with this config's models and
    optimizers, and leave steps to train under train.epochs."""
    path = cfg.train.resume_from
    if not path:
        return
    if not os.path.isfile(path):
        raise ConfigError(
            f"train.resume_from {path!r} does not exist (a checkpoints/<party>_<tag>.pt of an earlier run)"
        )
    meta = checkpoint_meta(path)
    if meta is None:
        return  # an older checkpoint without a sidecar: checked when loaded
    if meta.get("party") not in (None, cfg.party):
        raise ConfigError(f"train.resume_from {path!r} belongs to party {meta.get('party')!r}, not {cfg.party!r}")
    # the model it trained (the table recipe's where the YAML leaves it unset); an older checkpoint's, resolved from
    # the shard's rows as its training run resolved it
    model = parse_model_record(meta.get(MODEL_CONFIG_KEY), f"train.resume_from {path!r}")
    cfg = (
        with_trained_model(cfg, model, f"train.resume_from {path!r}")
        if model
        else table_model(cfg, shard_rows(manifest))
    )
    if isinstance(meta.get("resume"), dict):
        _check_identity(cfg, path, meta["resume"])
    rows = (manifest.get("rows") or {}).get("train")
    step = meta.get("step")
    if isinstance(rows, int) and isinstance(step, int):
        spe = -(-rows // cfg.train.batch_size)
        total = cfg.train.epochs * spe
        if step >= total:
            need = step // spe + 1
            raise ConfigError(
                f"train.resume_from {path!r} is at global step {step}, but train.epochs={cfg.train.epochs} "
                f"x {spe} steps ends at step {total}: pass --epochs {need} (or more) to train further"
            )


def check_shard(cfg: PartyConfig, shard_dir: str, manifest: dict) -> None:
    """The shard must be this party's, labelled for the leader only, with the columns the config names."""
    from vfl.data.errors import DataError

    party = manifest.get("party") or {}
    name, has_labels = party.get("name"), bool(party.get("has_labels"))
    if cfg.is_leader and not has_labels:
        raise DataError(
            f"data.path {shard_dir} is the shard of {name!r}, which holds no labels; the leader needs the labelled shard"
        )
    if not cfg.is_leader and has_labels:
        raise DataError(
            f"data.path {shard_dir} holds labels (it is the leader's shard {name!r}); a follower must never read labels"
        )
    if name != cfg.party:
        raise DataError(
            f"data.path {shard_dir} is the shard of party {name!r}, not of {cfg.party!r}; "
            f"give each party its own directory OUT/<party> of `python -m vfl.data prepare`"
        )
    for want, key in ((cfg.data.dense, "dense"), (cfg.data.categorical, "categorical")):
        have = party.get(key)
        if want is not None and list(want) != list(have or []):
            raise DataError(f"data.{key} {list(want)} does not match the shard's columns {have} in {shard_dir}")


def projected_checkpoint_bytes(cfg: PartyConfig, manifest: dict) -> int:
    """Float32 bytes of this party's bottom (embeddings dominate) times 3 with Adam's two moment buffers; 0 for a
    user's own module (its size is not known before it is built)."""
    from vfl.models.param_count import bottom_parameters

    party = manifest.get("party") or {}
    sizes = [int(v) for v in (party.get("field_sizes") or {}).values()]
    counts = bottom_parameters(cfg.model.bottom, sizes, len(party.get("dense") or ()))
    if counts is None:
        return 0
    moments = 2 if cfg.train.optimizer == "adam" else 1 if cfg.train.optimizer == "adagrad" else 0
    return 4 * sum(counts) * (1 + moments)


def size_warning(cfg: PartyConfig, manifest: dict) -> str | None:
    """A warning when each checkpoint would exceed CHECKPOINT_WARN_BYTES (with how to shrink it)."""
    nbytes = projected_checkpoint_bytes(cfg, manifest)
    if nbytes < CHECKPOINT_WARN_BYTES:
        return None
    ids = sum(int(v) for v in ((manifest.get("party") or {}).get("field_sizes") or {}).values())
    count = 1 + (cfg.train.checkpoint_every > 0)
    return (
        f"each checkpoint of {cfg.party} will take about {nbytes / 2**30:.1f} GiB ({ids:,} embedding rows of "
        f"{cfg.model.bottom.name}, with optimizer state){' and more every checkpoint_every steps' if count > 1 else ''}; "
        f"prepare with fewer --hash-buckets or with --vocab-min-count N, or lower model.bottom.embedding_dim"
    )


def preflight(cfg: PartyConfig, log=None) -> PartyConfig:
    """Run every peer-free check; return cfg with data.path resolved to this party's shard directory."""
    run_shard = os.path.join(str(cfg.output.dir), "shards", cfg.party)
    if not os.path.exists(str(cfg.data.path)) and os.path.isdir(run_shard):  # the fix is --data, not a prepare
        from vfl.data.errors import DataError
        from vfl.runs.layout import shard_hint

        raise DataError(f"data.path {str(cfg.data.path)!r} does not exist: {shard_hint(cfg, f'python -m {cfg.role}')}")
    path, note = resolve_data_path(cfg.data.path, cfg.party)
    if note and log is not None:
        log(note)
    if path != cfg.data.path:
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"path": path})})
    manifest = read_manifest(path)
    check_shard(cfg, path, manifest)
    check_resume(cfg, manifest)
    warning = size_warning(cfg, manifest)
    if warning and log is not None:
        log.warning(f"warning: {warning}")
    return cfg
