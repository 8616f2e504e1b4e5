"""Checkpoints of one party's model and optimizer: written atomically, read with weights_only=True."""
from __future__ import annotations

import os

import torch


def save_checkpoint(path: str, party: str, state: dict, epoch: int, step: int, extra: dict | None = None) -> None:
    """Write {party, epoch, step, state, extra} to path via a temporary file and a rename."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save({"party": party, "epoch": epoch, "step": step, "state": state, "extra": extra or {}}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str) -> dict:
    """Read a checkpoint; weights_only=True never unpickles arbitrary objects."""
    return torch.load(path, map_location="cpu", weights_only=True)
