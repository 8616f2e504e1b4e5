"""The public names of the label-DP ledger, none of which reveals the key or a label.

A labelled dataset's id, its label set's keyed digest, a key's fingerprint, a release's id, and where the leader's
store lives by default. Each is a digest of the leader's own
inputs (a source file's sha256 and its label column's encoding, a key's bytes through a one-way hash, a mechanism and
its parameters) or, for the label set, an HMAC under the leader's key: naming a release never reveals the key or a
label.

A release names the labels it randomizes, not only the file they came from: one source file holds several label
columns (a claim's amount and its count), and one column may be prepared under another encoding (classes, clip). The
dataset id therefore digests the label's column and encoding beside the source file, and every release's parameters
carry `label_set_digest` of the labelled shard's ids and labels as prepared: other labels are another release, drawn
independently, never a free replay of the same keyed uniforms on different labels (which would give a follower
y1 - y2 under Laplace, or which rows share a bin under RR-on-Bins).

Format note: dataset ids before this (v1) digested the source file only. A store written then names its datasets by
v1 ids, so the next run of such a dataset is a new dataset and a new release, charged with the old one's releases
through its overlapping sample ids (over-counts, never under-counts)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable

from privacy.label.ledger.ledger_math import jsonable
from privacy.label.ledger.secret_files import LabelDPStoreError

STORE_ENV = "VFL_LABEL_DP_STORE"


def default_store_dir() -> str:
    """$VFL_LABEL_DP_STORE, else $XDG_DATA_HOME/vfl/label_dp, else ~/.local/share/vfl/label_dp."""
    if os.environ.get(STORE_ENV):
        return os.environ[STORE_ENV]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "vfl", "label_dp")


# the manifest's label entry minus what is counted from the labels (those are covered by label_set_digest)
LABEL_COUNTS = ("counts", "class_counts")
LABEL_SET_DOMAIN = b"vfl/label-dp/label-set/v1"
DIGEST_ROWS = 1 << 20  # rows hashed per update (a 45M-row shard is hashed in bounded memory)


def label_encoding(label: dict | None) -> dict:
    """A labelled shard's label column and encoding (column, task, classes, clip, ...) from its manifest's `label`."""
    return {k: v for k, v in sorted((label or {}).items()) if k not in LABEL_COUNTS}


def dataset_id(source_sha256: str, label: dict | None = None) -> str:
    """The name of a labelled dataset: a digest of its labelled source file's sha256 and its label column and
    encoding (`label`: the leader manifest's label entry; its counts are left out)."""
    if not isinstance(source_sha256, str) or len(source_sha256) != 64:
        raise LabelDPStoreError(
            f"the labelled source's sha256 must be 64 hex digits, got {source_sha256!r} "
            "(re-run `python -m vfl.data prepare`: older manifests lack source.sha256)"
        )
    encoding = json.dumps(label_encoding(label), sort_keys=True, default=str)
    return hashlib.sha256(f"vfl/labelled-dataset/v2|{source_sha256}|{encoding}".encode()).hexdigest()[:32]


def label_set_digest(key: bytes, splits: Iterable[tuple[str, object, object]]) -> str:
    """HMAC-SHA256 under the leader's key of a labelled set: each (split name, sample ids, labels) in order, ids as
    int64 and labels as float64 (real values) or int64 (class ids), little-endian. Any changed label, id or row order
    changes it; without the key it reveals nothing about the labels (a plain hash would confirm a guessed label)."""
    import numpy as np

    mac = hmac.new(bytes(key), LABEL_SET_DOMAIN, hashlib.sha256)
    for name, ids, labels in splits:
        ids, labels = np.asarray(ids), np.asarray(labels)
        if ids.shape != (labels.shape[0],) or labels.ndim != 1:
            raise ValueError(f"split {name}: {ids.shape} ids for labels of shape {labels.shape}, one per row expected")
        real = np.issubdtype(labels.dtype, np.floating)
        mac.update(f"|{name}|{ids.size}|{'real' if real else 'class'}|".encode())
        for rows in (slice(a, a + DIGEST_ROWS) for a in range(0, ids.size, DIGEST_ROWS)):
            mac.update(np.ascontiguousarray(ids[rows], dtype="<i8").tobytes())
        for rows in (slice(a, a + DIGEST_ROWS) for a in range(0, ids.size, DIGEST_ROWS)):
            mac.update(np.ascontiguousarray(labels[rows], dtype="<f8" if real else "<i8").tobytes())
    return mac.hexdigest()[:32]


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
