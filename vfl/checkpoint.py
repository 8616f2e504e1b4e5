"""Checkpoints of one party's model and optimizer: written atomically, read with weights_only=True.

A checkpoint records the global step it was taken after, so every party of a run can resume from
the same point (the handshake compares the steps); the torch RNG state travels with it so that
dropout continues as if the run had never stopped.
"""
from __future__ import annotations

import os

import torch


def save_checkpoint(path: str, party: str, state: dict, epoch: int, step: int, extra: dict | None = None) -> None:
    """Write {party, epoch, step, state, torch_rng, extra} to path via a temporary file and a rename."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save({"party": party, "epoch": epoch, "step": step, "state": state, "torch_rng": torch.get_rng_state(),
                "extra": extra or {}}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str) -> dict:
    """Read a checkpoint; weights_only=True never unpickles arbitrary objects."""
    return torch.load(path, map_location="cpu", weights_only=True)


def load_resume_checkpoint(path: str, party: str, required: tuple[str, ...]) -> dict:
    """A checkpoint to resume `party` from, checked for owner and content; restores the torch RNG."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"train.resume_from {path!r} does not exist")
    try:
        ckpt = load_checkpoint(path)
    except Exception as e:  # a truncated or foreign file
        raise ValueError(f"train.resume_from {path!r} is not a readable checkpoint: {e}") from None
    if not isinstance(ckpt, dict) or ckpt.get("party") != party:
        owner = ckpt.get("party") if isinstance(ckpt, dict) else None
        raise ValueError(f"train.resume_from {path!r} belongs to party {owner!r}, not {party!r}")
    missing = [k for k in required if k not in ckpt.get("state", {})]
    if missing or not isinstance(ckpt.get("step"), int):
        raise ValueError(f"train.resume_from {path!r} lacks {missing or ['step']}")
    if "torch_rng" in ckpt:
        torch.set_rng_state(ckpt["torch_rng"])
    return ckpt
