"""LP-2ST's stored priors: the first prior each stage-two release drew with, kept beside the ledger and reused.

A stage-two release (RRWithPrior, Ghazi et al. 2021, Alg. 2) draws each sample's noisy label from the leader's PRF
*and* the sample's prior. Its release id names the stage-one release and the leader's settings, not the prior's
values, which followers' bottoms shape (their learning rates, their columns). So that one release id always gives one
set of noisy labels, the prior of a sample id is kept the first time the release draws it and read back on every
later run: a follower changing its own settings changes nothing the leader releases. The prior is a function of the
stage-one randomized labels and the features only (a DP output), so keeping it on the leader spends nothing.

    <store>/priors/<release>.npz   ids (int64, ascending) and prior (float64: (n,) P(y=1), or (n, K)), mode 0600
"""

from __future__ import annotations

import os

import numpy as np

from privacy.durable_files import file_sha256, replacing_file
from privacy.label.ledger.secret_files import LabelDPStoreError, check_private

PRIOR_DIR = "priors"


def load_prior(store_dir: str, entry: dict) -> tuple[np.ndarray, np.ndarray]:
    """(ids, prior) of a ledger entry {file, sha256, rows}; LabelDPStoreError when the file is missing or altered."""
    path = os.path.join(store_dir, entry["file"])
    fix = (
        "restore it from a backup: a stage-two release drawn again with another prior would correlate with the "
        "labels it already released"
    )
    try:
        check_private(path, "LP-2ST prior file")
        if file_sha256(path) != entry["sha256"]:
            raise LabelDPStoreError(f"LP-2ST prior file {path} is not the one the ledger recorded; {fix}")
        with np.load(path, allow_pickle=False) as z:
            return z["ids"].astype(np.int64), z["prior"].astype(np.float64)
    except OSError as e:
        raise LabelDPStoreError(f"LP-2ST prior file {path} cannot be read ({e.strerror}); {fix}") from None


def save_prior(
    store_dir: str,
    release: str,
    ids: np.ndarray,
    prior: np.ndarray,
    old: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict:
    """Write the stored priors of `release`: those of `old` unchanged, plus those of ids `old` lacks. Returns the
    ledger entry {file, sha256, rows}."""
    ids, prior = np.asarray(ids, np.int64), np.asarray(prior, np.float64)
    if old is not None:  # nothing new: the old rows as they are (a matrix of another width is never merged)
        fresh = ~np.isin(ids, old[0])
        ids, prior = (
            (np.concatenate([old[0], ids[fresh]]), np.concatenate([old[1], prior[fresh]])) if fresh.any() else old
        )
    order = np.argsort(ids, kind="stable")
    directory = os.path.join(store_dir, PRIOR_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    name = os.path.join(PRIOR_DIR, f"{release}.npz")
    path = os.path.join(store_dir, name)
    # durably (privacy/durable_files.py): the ledger names this file, so its rename is on disk before the ledger is
    try:
        with replacing_file(path, mode=0o600) as f:
            np.savez(f, ids=ids[order], prior=prior[order])
    except OSError as e:
        raise LabelDPStoreError(f"LP-2ST prior file {path} cannot be written: {e.strerror}") from None
    return {"file": name, "sha256": file_sha256(path), "rows": int(ids.size)}


def priors_of(stored: tuple[np.ndarray, np.ndarray] | None, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(mask of the ids with a stored prior, their priors in the order of ids; None when no id has one)."""
    ids = np.asarray(ids, np.int64)
    if stored is None or stored[0].size == 0:
        return np.zeros(ids.size, bool), None
    pos = np.minimum(np.searchsorted(stored[0], ids), stored[0].size - 1)
    have = stored[0][pos] == ids
    return have, stored[1][pos]
