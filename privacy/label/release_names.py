"""The public names of the label-DP ledger: a labelled dataset's id, a key's fingerprint, a release's id, and where
the leader's store lives by default. Each is a digest of public inputs (a source file's sha256, a key's bytes through
a one-way hash, a mechanism and its parameters): naming a release never reveals the key or a label."""

from __future__ import annotations

import hashlib
import json
import os

from privacy.label.ledger_math import jsonable
from privacy.label.secret_files import LabelDPStoreError

STORE_ENV = "VFL_LABEL_DP_STORE"


def default_store_dir() -> str:
    """$VFL_LABEL_DP_STORE, else $XDG_DATA_HOME/vfl/label_dp, else ~/.local/share/vfl/label_dp."""
    if os.environ.get(STORE_ENV):
        return os.environ[STORE_ENV]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "vfl", "label_dp")


def dataset_id(source_sha256: str) -> str:
    """The name of a labelled dataset: a digest of its labelled source file's sha256."""
    if not isinstance(source_sha256, str) or len(source_sha256) != 64:
        raise LabelDPStoreError(
            f"the labelled source's sha256 must be 64 hex digits, got {source_sha256!r} "
            "(re-run `python -m vfl.data prepare`: older manifests lack source.sha256)"
        )
    return hashlib.sha256(b"vfl/labelled-dataset/v1|" + source_sha256.encode()).hexdigest()[:32]


def named_dataset_id(name: str) -> str:
    """The dataset id of a user-named label set (the standalone LabelDP API)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"dataset must name the label set (e.g. 'clicks-2026-11'), got {name!r}")
    return hashlib.sha256(b"vfl/named-dataset/v1|" + name.encode()).hexdigest()[:32]


def key_fingerprint(key: bytes) -> str:
    """A public name of a key (it reveals nothing about the key's bits)."""
    return hashlib.sha256(b"vfl/label-dp/key-fingerprint/v1|" + key).hexdigest()[:16]


def release_id(dataset: str, fingerprint: str, mechanism: str, params: dict) -> str:
    """Digest of everything that defines a release: dataset, key, mechanism and its parameters."""
    doc = {
        "dataset": dataset,
        "key": fingerprint,
        "mechanism": mechanism,
        "params": {k: jsonable(v) for k, v in sorted(params.items())},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
