"""A keyed standalone release's labels, pinned per sample id: its coins are never applied to a changed label.

A keyed release draws each sample's noise from PRF(key, release, id, label) (release_draws.randomize_binary_by_label),
so two calls of one release on the same id and label reuse the same coins: that is what makes a replay free. A
*changed* label meets fresh coins, so its output is a second, independent release of that id, which the ledger would
charge nothing (were the coins per id alone, the XOR of two binary outputs would be the XOR of the labels, exactly).
The standalone API (`LabelDP(eps, dataset=...)(labels, ids=...)`) may be called batch by batch, so the release
cannot digest its whole label set as training does (privacy/label/ledger/release_names.label_set_digest); instead the store
pins, for each release, every id's label as a keyed tag, and a call that gives a pinned id another label
is refused before anything is drawn or recorded. A corrected label set is another dataset (another `dataset=`
name): new coins, and the ledger charges it with the first, as they share ids.

    <store>/label_pins/<release id>.npy   uint64 (n, 2): keyed id tag, keyed (id, label) tag; sorted by id tag; 0600

The tags are PRF outputs under the release's key, so the file reveals neither ids nor labels without it; it is
written under a new name and renamed over the old one, so it is never half-written, and the ledger's release entry
records its row count and digest, so a pins file lost or rolled back is refused rather than read as "no pins". The
ledger itself is sealed (privacy/label/ledger/ledger_seal.py): losing it with the pins is refused at open, and the only way
on, `ack-reset`, draws new coins, so lost pins never mean the same coins on a changed label.
The release id of a pinned release names the pin format and the store (its ledger secret's fingerprint): a
release drawn before pins existed, or under the same key in another store, is another release with other coins.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from privacy.durable_files import write_bytes
from privacy.keyed_random import keyed_words
from privacy.label.ledger.id_store import uint64_npy
from privacy.label.ledger.secret_files import LabelDPStoreError, check_private

PIN_DIR = "label_pins"
PIN_FORMAT = 1  # in a pinned release's id: releases drawn before pins existed are other releases
EMPTY_PINS = np.zeros((0, 2), dtype=np.uint64)


def label_tags(key: bytes, release: str, ids: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """(n, 2) uint64: each row's keyed id tag and keyed (id, class) tag, in the rows' order."""
    ids = np.asarray(ids, dtype=np.int64)
    classes = np.asarray(classes, dtype=np.int64)
    tags = np.empty((ids.size, 2), dtype=np.uint64)
    tags[:, 0] = keyed_words(key, release, "label-pin/id", ids)
    for c in np.unique(classes):
        rows = np.flatnonzero(classes == c)
        tags[rows, 1] = keyed_words(key, release, f"label-pin/class {int(c)}", ids[rows])
    return tags


def relabelled_rows(pinned: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """The rows of `tags` whose id is pinned with another label (pinned sorted by its first column)."""
    if pinned.shape[0] == 0 or tags.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    at = np.minimum(np.searchsorted(pinned[:, 0], tags[:, 0]), pinned.shape[0] - 1)
    known = pinned[at, 0] == tags[:, 0]
    return np.flatnonzero(known & (pinned[at, 1] != tags[:, 1]))


def merged_pins(pinned: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """The pins with the rows of `tags` whose id is not pinned yet, sorted by id tag (ids distinct)."""
    both = np.concatenate([pinned, tags]).astype(np.uint64)
    first = np.unique(both[:, 0], return_index=True)[1]  # pinned rows come first: an id keeps its first label
    return both[first]


def _path(store_dir: str, release: str) -> str:
    if not release.isalnum():
        raise ValueError(f"release id must be alphanumeric, got {release!r}")
    return os.path.join(store_dir, PIN_DIR, f"{release}.npy")


def load_pins(store_dir: str, release: str) -> np.ndarray:
    """The release's pins (none yet: an empty array); LabelDPStoreError when the file cannot be read as pins."""
    path = _path(store_dir, release)
    if not os.path.exists(path):
        return EMPTY_PINS
    try:
        check_private(path, "label-DP label pins")
        pins = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        if isinstance(e, LabelDPStoreError):
            raise
        raise LabelDPStoreError(f"label-DP label pins {path} cannot be read ({e})") from None
    if pins.dtype != np.uint64 or pins.ndim != 2 or pins.shape[1] != 2 or (pins[1:, 0] <= pins[:-1, 0]).any():
        raise LabelDPStoreError(f"label-DP label pins {path} do not hold (n, 2) 64-bit tags, one row per id, sorted")
    return pins


def pins_record(pins: np.ndarray) -> dict:
    """What the ledger's release entry records of its pins: {rows, sha256}."""
    return {"rows": int(pins.shape[0]), "sha256": hashlib.sha256(np.ascontiguousarray(pins).tobytes()).hexdigest()}


def save_pins(store_dir: str, release: str, pins: np.ndarray) -> None:
    """Replace the release's pins durably (privacy/durable_files.py: mode 0600, fsynced, renamed, the directory
    synced)."""
    path = _path(store_dir, release)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        write_bytes(path, uint64_npy(pins), mode=0o600)
    except OSError as e:
        raise LabelDPStoreError(f"label-DP label pins {path} cannot be written: {e.strerror}") from None


def relabel_error(dataset: str, changed: int, rows: int) -> ValueError:
    """The one-line refusal of a call that gives pinned ids other labels (names counts, never ids or labels)."""
    return ValueError(
        f"label DP: {changed} of the {rows} ids already have another label in dataset {dataset!r} at this eps; the "
        "same coins on a changed label would show which labels changed. A corrected label set is another release: "
        "pass another dataset= name (the ledger charges the two together, as they share ids); nothing was drawn"
    )


def _entry(doc: dict, release: str) -> dict | None:
    return next((r for r in doc["releases"] if r.get("release_id") == release), None)


def check_pins(store, release: str, dataset: str, tags: np.ndarray) -> np.ndarray:
    """The release's pins after a check of `tags` against them (relabel_error when an id changed its label), called
    under the store's lock. The pins must be the ones the ledger recorded with the release: a pins file lost, rolled
    back or replaced is a LabelDPStoreError, never a release without pins. (A release the ledger holds without a
    record of pins drew nothing: its labels are drawn only after the pins are recorded.)"""
    pinned = load_pins(store.dir, release)
    entry = _entry(store.ledger(), release)
    noted = None if entry is None else entry.get("pins")
    if noted is not None and noted != pins_record(pinned):
        raise LabelDPStoreError(
            f"label-DP label pins {_path(store.dir, release)} are missing or not the ones ledger {store.ledger_path} "
            f"recorded ({noted['rows']} ids) for this release: restore them from the backup of the ledger, or pass "
            "another dataset= name"
        )
    changed = relabelled_rows(pinned, tags)
    if changed.size:
        raise relabel_error(dataset, int(changed.size), int(tags.shape[0]))
    return pinned


def pin(store, release: str, dataset: str, tags: np.ndarray) -> None:
    """Under the store's lock: check `tags` against the release's pins (check_pins), add the ids not pinned yet, and
    record the pins in the release's ledger entry (the file first: a pins file the ledger does not name yet is
    only ever more pins than it recorded, and was written before anything was drawn)."""
    pinned = check_pins(store, release, dataset, tags)
    merged = merged_pins(pinned, tags)
    doc = store.ledger()
    entry = _entry(doc, release)
    if merged.shape[0] != pinned.shape[0]:
        save_pins(store.dir, release, merged)
    if entry is not None and entry.get("pins") != pins_record(merged):
        entry["pins"] = pins_record(merged)
        store.write_ledger(doc)
