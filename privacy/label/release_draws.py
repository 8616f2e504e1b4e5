"""Label DP for a labelled dataset: each label randomized once per release with the leader's secret PRF.

The losses that train on noisy labels are in vfl/labeldp/losses.py.

MindSpore Federated and SecretFlow re-randomize labels every batch of every epoch, so a run of E
epochs spends E x eps (sequential composition) without saying so, and SecretFlow's flips can be
replayed from the split seed that every party shares. Here the noisy label of sample i is a pure
function of (leader key, release id, i, true label): every epoch, run and resume of the same
release reuses it, nobody without the key can predict the draws, and a different release (other
eps, mechanism, prior or key) draws independently, so two releases never nest. Each release is
eps-label-DP (one eps-DP mechanism per label; anything computed from the noisy labels afterwards is
post-processing); the per-dataset ledger (privacy/label/ledger/store.py) adds up the releases.
"""

from __future__ import annotations

import numpy as np

from privacy.keyed_random import keyed_uniforms
from privacy.label.randomized_response import (
    binary_rr,
    flip_probability,
    kary_rr,
    keep_probability,
)
from privacy.label.rr_prior import rr_with_prior

# PRF purposes: one independent uniform stream per decision
PURPOSE_FLIP = "binary-rr/flip"
PURPOSE_STAGE = "lp2st/stage-one"
PURPOSE_KEEP = "rr-prior/keep"
PURPOSE_PICK = "rr-prior/pick"
PURPOSE_KARY_KEEP = "kary-rr/keep"
PURPOSE_KARY_OTHER = "kary-rr/other"
LABEL_COINS = "id+label/v1"  # in a standalone release's id: its coins are drawn per (sample id, label)


def _uniforms_by_label(key: bytes, release: str, purpose: str, ids: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """A keyed U[0, 1) per row from PRF(key, release, purpose given the row's label, id): rows with one label share a
    stream, and another label on the same id is another, independent stream."""
    u = np.empty(labels.shape[0], dtype=np.float64)
    for y in np.unique(labels):
        rows = np.flatnonzero(labels == y)
        u[rows] = keyed_uniforms(key, release, f"{purpose}|label {int(y)}", ids[rows])
    return u


def randomize_binary_once(labels: np.ndarray, ids: np.ndarray, eps: float, key: bytes, release: str) -> np.ndarray:
    """Binary RR with the uniform of each sample drawn by the leader's PRF at (key, release, sample id)."""
    return binary_rr(np.asarray(labels).astype(np.int64), eps, u=keyed_uniforms(key, release, PURPOSE_FLIP, ids))


def randomize_classes_once(
    classes: np.ndarray, ids: np.ndarray, k: int, eps: float, key: bytes, release: str
) -> np.ndarray:
    """k-ary RR on class ids in [0, k) with keyed uniforms per sample (Ghazi et al. 2021, Alg. 1)."""
    return kary_rr(
        np.asarray(classes).astype(np.int64),
        k,
        eps,
        u_keep=keyed_uniforms(key, release, PURPOSE_KARY_KEEP, ids),
        u_other=keyed_uniforms(key, release, PURPOSE_KARY_OTHER, ids),
    )


def randomize_binary_by_label(labels: np.ndarray, ids: np.ndarray, eps: float, key: bytes, release: str) -> np.ndarray:
    """Binary RR whose flip coin is PRF(key, release, (sample id, true label)). For each fixed label the coin is uniform
    and independent of every other id's, so each output is exactly binary RR; the same label replays the same output,
    and a changed label meets a fresh coin (two outputs on two labels are two independent RR releases, never the XOR of
    the labels). Used where the release cannot digest its label set (the standalone API, called batch by batch)."""
    labels = np.asarray(labels).astype(np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    return binary_rr(labels, eps, u=_uniforms_by_label(key, release, PURPOSE_FLIP, ids, labels))


def randomize_classes_by_label(
    classes: np.ndarray, ids: np.ndarray, k: int, eps: float, key: bytes, release: str
) -> np.ndarray:
    """k-ary RR whose keep and move coins are PRF(key, release, (sample id, true class)): as randomize_binary_by_label,
    each output is k-ary RR and a changed class meets fresh coins."""
    classes = np.asarray(classes).astype(np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    return kary_rr(
        classes,
        k,
        eps,
        u_keep=_uniforms_by_label(key, release, PURPOSE_KARY_KEEP, ids, classes),
        u_other=_uniforms_by_label(key, release, PURPOSE_KARY_OTHER, ids, classes),
    )


def stage_one_mask(ids: np.ndarray, key: bytes, release: str, fraction: float) -> np.ndarray:
    """LP-2ST (Ghazi et al. 2021, Algorithm 3): which samples form the first stage, decided per id by the PRF."""
    return keyed_uniforms(key, release, PURPOSE_STAGE, ids) < fraction


def rr_prior_once(
    labels: np.ndarray, ids: np.ndarray, prior_positive: np.ndarray, eps: float, key: bytes, release: str
):
    """RRWithPrior on binary labels with prior P(y=1) per sample; keyed uniforms per sample id."""
    p = np.clip(np.asarray(prior_positive, dtype=np.float64), 0.0, 1.0)
    prior = np.stack([1.0 - p, p], axis=1)
    return rr_with_prior(
        np.asarray(labels).astype(np.int64),
        prior,
        eps,
        u_keep=keyed_uniforms(key, release, PURPOSE_KEEP, ids),
        u_pick=keyed_uniforms(key, release, PURPOSE_PICK, ids),
    )


def rr_prior_classes_once(
    classes: np.ndarray, ids: np.ndarray, prior: np.ndarray, eps: float, key: bytes, release: str
):
    """RRWithPrior on class ids in [0, K) with a prior (n, K) per sample; keyed uniforms per sample id.
    Returns (noisy classes, k* per row)."""
    return rr_with_prior(
        np.asarray(classes).astype(np.int64),
        np.asarray(prior, dtype=np.float64),
        eps,
        u_keep=keyed_uniforms(key, release, PURPOSE_KEEP, ids),
        u_pick=keyed_uniforms(key, release, PURPOSE_PICK, ids),
    )


REPORT_TASKS = ("binary", "multiclass", "regression")


def run_report(
    true: np.ndarray,
    noisy: np.ndarray,
    eps: float,
    mechanism: str,
    task: str = "binary",
    num_classes: int | None = None,
    **extra,
) -> dict:
    """What metrics.json records about the run's label DP. task: "binary" (0/1 labels), "multiclass" (class ids in
    [0, num_classes)) or "regression" (real values: every value changes, so no flipped_fraction; the caller's
    `extra` reports the noise, e.g. noise_rmse)."""
    if task not in REPORT_TASKS:
        raise ValueError(f"label DP report: task {task!r} is not one of {list(REPORT_TASKS)}")
    if (task == "multiclass") != (num_classes is not None):
        raise ValueError(f"label DP report: num_classes {num_classes!r} is given exactly for multiclass, task {task!r}")
    cast = np.float64 if task == "regression" else np.int64
    true, noisy = np.asarray(true).astype(cast), np.asarray(noisy).astype(cast)
    if task == "regression":
        rates = {}
    elif task == "binary":
        rates = {
            "flip_probability": flip_probability(eps),
            "noisy_positive_rate": float(noisy.mean()) if noisy.size else 0.0,
        }
    else:
        rates = {
            "num_classes": num_classes,
            "keep_probability": keep_probability(eps, num_classes),
            "flip_probability": 1.0 - keep_probability(eps, num_classes),
        }
    return {
        "eps": eps if np.isfinite(eps) else "inf",
        "delta": 0.0,
        "mechanism": mechanism,
        **({} if task == "regression" else {"flipped_fraction": float(np.mean(true != noisy)) if true.size else 0.0}),
        **rates,
        "accounting": "each label randomized once per release by the leader's secret PRF at (key, release, sample id): "
        f"this release is {eps}-label-DP whatever the number of epochs, runs and resumes; "
        "the dataset's ledger adds the eps of every distinct release",
        **extra,
    }
