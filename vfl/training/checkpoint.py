"""Checkpoints of one party's model and optimizer: checksummed, written atomically, read with weights_only=True.

File layout: b"VFLCKPT1" + SHA-256 of the rest + a torch.save archive; a file whose digest does not
match (a flipped byte, a truncated copy) is refused before torch reads it.

A checkpoint records the global step it was taken after, so every party of a run can resume from
the same point (the handshake compares the steps; `<path>.json` repeats party, epoch and step so
that a resume is checked before torch is imported); the torch RNG state travels with it so that
dropout continues as if the run had never stopped.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re

import torch

from privacy.durable_files import replacing_file, write_json
from vfl.training.checkpoint_format import CHECKPOINT_MAGIC, MODEL_CONFIG_KEY

_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def checkpoint_tag(tag: str) -> str:
    """A checkpoint tag as sent by the leader: a plain name (letters, digits, '_', '-'), never a path."""
    if not isinstance(tag, str) or not _TAG.match(tag):
        raise ValueError(f"checkpoint tag {str(tag)[:80]!r} is not a plain name (allowed: {_TAG.pattern}); refused")
    return tag


def save_checkpoint(
    path: str, party: str, state: dict, epoch: int, step: int, extra: dict | None = None, resume: dict | None = None
) -> None:
    """Write {party, epoch, step, state, torch_rng, extra} to path durably (privacy/durable_files.py), then the sidecar
    path.json {party, epoch, step, bytes, sha256, resume}: resume is vfl.preflight.resume_identity, checked before
    torch; sha256 (the header's) tells preflight that the sidecar belongs to this very file; the model the party
    trained (extra's MODEL_CONFIG_KEY, where given) is repeated there for the readers before torch."""
    directory = os.path.dirname(os.path.abspath(path))
    buf = io.BytesIO()
    torch.save(
        {
            "party": party,
            "epoch": epoch,
            "step": step,
            "state": state,
            "torch_rng": torch.get_rng_state(),
            "extra": extra or {},
        },
        buf,
    )
    payload = buf.getbuffer()
    digest = hashlib.sha256(payload).digest()
    try:
        os.makedirs(directory, exist_ok=True)
        with replacing_file(path) as f:
            f.write(CHECKPOINT_MAGIC + digest)
            f.write(payload)
        sidecar = {"party": party, "epoch": epoch, "step": step, "bytes": len(payload) + 40}
        if extra and MODEL_CONFIG_KEY in extra:
            sidecar[MODEL_CONFIG_KEY] = extra[MODEL_CONFIG_KEY]
        write_json(f"{path}.json", {**sidecar, "sha256": digest.hex(), "resume": resume}, indent=None)  # for preflight
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise OSError(f"no space left on {directory}: checkpoint {path} not written") from None
        raise OSError(f"cannot write checkpoint {path}: {e.strerror or e}") from None


def load_checkpoint(path: str) -> dict:
    """Read a checkpoint after checking its checksum; weights_only=True never unpickles arbitrary objects."""
    with open(path, "rb") as f:
        data = f.read()
    head, digest, payload = (
        data[: len(CHECKPOINT_MAGIC)],
        data[len(CHECKPOINT_MAGIC) : len(CHECKPOINT_MAGIC) + 32],
        memoryview(data)[len(CHECKPOINT_MAGIC) + 32 :],
    )
    if head != CHECKPOINT_MAGIC:
        raise ValueError("not a checkpoint of this project (no VFLCKPT1 header)")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch: the file is corrupted or truncated")
    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def load_party_checkpoint(
    path: str,
    party: str,
    required: tuple[str, ...],
    name: str,
    unreadable: str = "is not readable",
    absent_hint: str = "",
    need_step: bool = False,
) -> dict:
    """The checkpoint of `party` at `path` holding the state `required` (and an int step where `need_step`), else a
    one-line error naming it as `name` ("train.resume_from", "checkpoint"); training resume and prediction read it."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name} {path!r} does not exist{absent_hint}")
    try:
        ckpt = load_checkpoint(path)
    except Exception as e:  # a truncated or foreign file
        raise ValueError(f"{name} {path!r} {unreadable}: {e}") from None
    if not isinstance(ckpt, dict) or ckpt.get("party") != party:
        owner = ckpt.get("party") if isinstance(ckpt, dict) else None
        raise ValueError(f"{name} {path!r} belongs to party {owner!r}, not {party!r}")
    missing = [k for k in required if k not in (ckpt.get("state") or {})]
    if missing or (need_step and not isinstance(ckpt.get("step"), int)):
        raise ValueError(f"{name} {path!r} lacks {missing or ['step']}")
    return ckpt


def load_resume_checkpoint(path: str, party: str, required: tuple[str, ...]) -> dict:
    """A checkpoint to resume `party` from, checked for owner and content; restores the torch RNG."""
    ckpt = load_party_checkpoint(
        path, party, required, "train.resume_from", unreadable="is not a readable checkpoint", need_step=True
    )
    if "torch_rng" in ckpt:
        torch.set_rng_state(ckpt["torch_rng"])
    return ckpt
