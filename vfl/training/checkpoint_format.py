"""A checkpoint file's format without torch: its magic, its header and its JSON sidecar, for checks before torch loads.

A checkpoint file starts with CHECKPOINT_MAGIC and the SHA-256 of the rest (vfl/training/checkpoint.py writes and
reads it with torch); `<checkpoint>.json` beside it repeats party, epoch, step, size and digest, so that preflight and
--resume auto read them in well under a second, and the model the party trained (MODEL_CONFIG_KEY, also in the
checkpoint's `extra`: vfl/training/trained_model.py), so that prediction, serving, export and resume build it
without loading the weights first.
"""

from __future__ import annotations

import json

CHECKPOINT_MAGIC = b"VFLCKPT1"
CHECKPOINT_HEADER_BYTES = len(CHECKPOINT_MAGIC) + 32
MODEL_CONFIG_KEY = "model_config"  # {"bottom": ..., "top": ...}: the model as trained, in `extra` and the sidecar


def checkpoint_meta(path: str) -> dict | None:
    """The JSON sidecar `<checkpoint>.json` ({party, epoch, step, bytes, sha256, resume, model_config}) beside each
    checkpoint, when present and written with this checkpoint: one whose sha256 is not the checkpoint's own (a .pt
    copied over another without its sidecar) is stale and read as absent (the load checks everything again)."""
    try:
        with open(path + ".json") as f:
            doc = json.load(f)
        if not isinstance(doc, dict):
            return None
        if "sha256" in doc:
            with open(path, "rb") as f:
                header = f.read(CHECKPOINT_HEADER_BYTES)
            if header[len(CHECKPOINT_MAGIC) :].hex() != doc["sha256"]:
                return None
        return doc
    except (OSError, ValueError):
        return None
