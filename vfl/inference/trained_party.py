"""A trained party's checkpoint as its models (the bottom; on the leader, the top too), for predict, serve and export.

Loading is two steps, so that each caller keeps its own order and errors: `read_party_checkpoint` reads the checkpoint
and checks it against the party's config and keys now (vfl/runs/record.py: one-line FileNotFoundError or
ValueError), then `trained_models` builds the party's BottomParty and, on the leader, its TopTrainer from it, exactly
as the training run built them (the model the checkpoint records, vfl/training/trained_model.py; its cut widths,
task and regression target), with the checkpoint's weights. The config passed in is the one `trained_config`
resolved for this checkpoint (the cut width the handshakes say comes from it): another is refused in one line.
"""

from __future__ import annotations

import torch

from vfl.config.schema import PartyConfig
from vfl.runs.record import check_own, key_fingerprints
from vfl.training.checkpoint import load_party_checkpoint
from vfl.training.checkpoint_format import MODEL_CONFIG_KEY
from vfl.training.party import BottomParty
from vfl.training.top import TopTrainer
from vfl.training.trained_model import parse_model_record, with_trained_model


def load_predict_checkpoint(
    cfg: PartyConfig, path: str, required: tuple[str, ...], need_run: bool = True
) -> tuple[dict, dict | None]:
    """(checkpoint, its training run's record) of this party for prediction, checked for owner and content and
    against its config and keys now (one-line errors). need_run: the checkpoint must record its training run (batch
    prediction and serving compare it across parties; export does not: None where it records none)."""
    ckpt = load_party_checkpoint(
        path, cfg.party, required, "checkpoint", absent_hint=" (train first, or pass --checkpoint / --run)"
    )
    model = _recorded_model(ckpt, path)
    if model is not None and with_trained_model(cfg, model, f"checkpoint {path}").model != cfg.model:
        raise ValueError(
            f"checkpoint {path} records another model than {cfg.party}'s config resolves to (its model.bottom or "
            "model.top unset): resolve the config for this checkpoint (vfl.training.trained_model.trained_config)"
        )
    saved = (ckpt.get("extra") or {}).get("run")
    record = check_own(saved, cfg, path, key_fingerprints(cfg)) if need_run or saved else None
    return ckpt, record


def _recorded_model(ckpt: dict, path: str):
    """The model the checkpoint records (vfl/training/trained_model.py), validated; None for an older one."""
    extra = ckpt.get("extra")
    return parse_model_record(extra.get(MODEL_CONFIG_KEY) if isinstance(extra, dict) else None, f"checkpoint {path}")


def read_party_checkpoint(cfg: PartyConfig, checkpoint: str, need_run: bool = True) -> tuple[dict, dict | None]:
    """(checkpoint, its training run's record) of this party: the leader's holds its bottom and top, a follower's its
    bottom; checked for owner and content and against the party's config and keys now. need_run: the checkpoint must
    record its training run (prediction and serving compare it across parties; export does not: None where it
    records none)."""
    required = ("bottom", "top") if cfg.is_leader else ("bottom",)
    return load_predict_checkpoint(cfg, checkpoint, required, need_run)


def top_cut_dims(cfg: PartyConfig, top_state: dict, record: dict | None) -> int | tuple[int, ...]:
    """The cut widths the leader's top reads: each party's, leader first, from the run record. A checkpoint that
    records no run (an older one, which export reads): with one follower, the leader's own cut and the rest of the
    top's input width; with several, the total (linear and mlp tops read the sum)."""
    if record is not None:
        return tuple(int(record["cut_dims"][p]) for p in record["parties"])
    width = next(v for v in top_state["model"].values() if getattr(v, "ndim", 0) == 2).shape[1]
    own = cfg.model.bottom.cut_dim
    return (own, int(width) - own) if len(cfg.network.followers) == 1 else int(width)


def trained_models(
    cfg: PartyConfig, shard, ckpt: dict, record: dict | None, device: torch.device
) -> tuple[BottomParty, TopTrainer | None]:
    """(the party's bottom, the leader's top or None on a follower) of `shard`'s party with the weights of `ckpt`
    (read_party_checkpoint), on `device`."""
    model = _recorded_model(ckpt, f"of {cfg.party}")
    party = BottomParty(cfg, shard, device, model.bottom if model is not None else None)
    party.load_state(ckpt["state"]["bottom"])
    if not cfg.is_leader:
        return party, None
    state = ckpt["state"]["top"]
    target = state.get("target")
    top = TopTrainer(
        cfg.train,
        cfg.model.top,
        top_cut_dims(cfg, state, record),
        device,
        task=shard.task,
        target=tuple(target) if target is not None else None,
    )
    top.load_state(state)
    return party, top
