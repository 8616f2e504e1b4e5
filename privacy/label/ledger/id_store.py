"""The ledger's id sets on disk: every sample id a labelled dataset has released, as its sorted keyed hashes.

    <store>/id_hashes/<dataset>-<digest>.npy   uint64, ascending, distinct; mode 0600; named and digested in the ledger

Only datasets over SKETCH_K ids have a file: below that, the sketch in the ledger is the whole set. 8 bytes per id
(10M ids: 80 MB), exact: a shared id is always found (privacy/label/ledger/ledger_math.py). A new file is written under a new
name before the ledger names it, and the old one removed after, so the ledger never names a half-written set.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os

import numpy as np

from privacy.durable_files import file_sha256, write_bytes
from privacy.label.ledger.ledger_math import EMPTY, sketch_hashes
from privacy.label.ledger.secret_files import LabelDPStoreError, check_private

ID_DIR = "id_hashes"


def load_id_hashes(store_dir: str, entry: dict) -> np.ndarray:
    """The hashes of a ledger entry {file, sha256, rows}; LabelDPStoreError when the file is missing or altered."""
    path = os.path.join(store_dir, entry["file"])
    try:
        check_private(path, "label-DP id file")
        if file_sha256(path) != entry["sha256"]:
            raise LabelDPStoreError(f"label-DP id file {path} is not the one the ledger recorded")
        hashes = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        if isinstance(e, LabelDPStoreError):
            raise
        raise LabelDPStoreError(
            f"label-DP id file {path} cannot be read ({getattr(e, 'strerror', None) or e})"
        ) from None
    if hashes.dtype != np.uint64 or hashes.ndim != 1 or hashes.size != int(entry["rows"]):
        raise LabelDPStoreError(f"label-DP id file {path} does not hold {entry['rows']} 64-bit hashes")
    return hashes


def held_hashes(store_dir: str, ds: dict | None) -> tuple[np.ndarray, str | None]:
    """(a ledger dataset entry's held id hashes, why its id file could not be read, or None): its file's set, else
    its sketch (the whole set below SKETCH_K ids)."""
    if ds is None:
        return EMPTY, None
    if "id_hashes" not in ds:
        return sketch_hashes(ds.get("sketch", "")), None
    try:
        return load_id_hashes(store_dir, ds["id_hashes"]), None
    except LabelDPStoreError as e:
        return sketch_hashes(ds.get("sketch", "")), str(e)


def uint64_npy(values: np.ndarray) -> bytes:
    """The bytes of values saved as a uint64 .npy file (what np.save writes)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(values, dtype=np.uint64), allow_pickle=False)
    return buffer.getvalue()


def save_id_hashes(store_dir: str, dataset: str, hashes: np.ndarray) -> dict:
    """Write the sorted hashes of a dataset under a new name, named by their digest (privacy/durable_files.py: mode
    0600, fsynced, renamed, the directory synced); returns the ledger entry {file, sha256, rows}."""
    directory = os.path.join(store_dir, ID_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    data = uint64_npy(hashes)
    digest = hashlib.sha256(data).hexdigest()
    name = os.path.join(ID_DIR, f"{dataset}-{digest[:16]}.npy")
    try:  # the ledger names this file: its rename is on disk before the ledger is
        write_bytes(os.path.join(store_dir, name), data, mode=0o600)
    except OSError as e:
        raise LabelDPStoreError(f"label-DP id file in {directory} cannot be written: {e.strerror}") from None
    return {"file": name, "sha256": digest, "rows": int(hashes.size)}


def remove_replaced(store_dir: str, old: dict | None, new: dict | None) -> None:
    """Remove a dataset's previous id file once the ledger names its successor."""
    if old and (new is None or old["file"] != new["file"]):
        with contextlib.suppress(OSError):
            os.remove(os.path.join(store_dir, old["file"]))
