"""Label DP for a whole training run: each label randomized once, keyed by (seed, sample id), and
the forward-corrected loss that trains on noisy labels.

MindSpore Federated and SecretFlow re-randomize labels every batch of every epoch, so a run of E
epochs spends E x eps (sequential composition) without saying so. Here the noisy label of sample i
is a pure function of (seed, i, true label): every epoch reuses it, a resumed run gets it again,
and the run as a whole is eps-label-DP (each label is touched by exactly one eps-DP mechanism;
anything computed from the noisy labels afterwards is post-processing).
"""
from __future__ import annotations

import numpy as np

from privacy.keyed_random import uniform_from_ids
from privacy.randomized_response import binary_rr, flip_probability
from privacy.rr_prior import rr_with_prior

SALT_FLIP = 0x1AB1
SALT_PART = 0x1AB2
SALT_KEEP = 0x1AB3
SALT_PICK = 0x1AB4


def randomize_binary_once(labels: np.ndarray, ids: np.ndarray, eps: float, seed: int) -> np.ndarray:
    """Binary RR with the uniform of each sample derived from (seed, sample id)."""
    return binary_rr(np.asarray(labels).astype(np.int64), eps, u=uniform_from_ids(ids, seed, SALT_FLIP))


def stage_one_mask(ids: np.ndarray, seed: int, fraction: float) -> np.ndarray:
    """LP-2ST (Ghazi et al. 2021, Algorithm 3): which samples form the first stage, decided per id."""
    return uniform_from_ids(ids, seed, SALT_PART) < fraction


def rr_prior_once(labels: np.ndarray, ids: np.ndarray, prior_positive: np.ndarray, eps: float, seed: int):
    """RRWithPrior on binary labels with prior P(y=1) per sample; uniforms keyed by sample id."""
    p = np.clip(np.asarray(prior_positive, dtype=np.float64), 0.0, 1.0)
    prior = np.stack([1.0 - p, p], axis=1)
    return rr_with_prior(np.asarray(labels).astype(np.int64), prior, eps,
                         u_keep=uniform_from_ids(ids, seed, SALT_KEEP), u_pick=uniform_from_ids(ids, seed, SALT_PICK))


def run_report(true: np.ndarray, noisy: np.ndarray, eps: float, mechanism: str, **extra) -> dict:
    """What metrics.json records about the run's label DP."""
    true, noisy = np.asarray(true).astype(np.int64), np.asarray(noisy).astype(np.int64)
    return {
        "eps": eps if np.isfinite(eps) else "inf",
        "delta": 0.0,
        "mechanism": mechanism,
        "flipped_fraction": float(np.mean(true != noisy)) if true.size else 0.0,
        "flip_probability": flip_probability(eps),
        "noisy_positive_rate": float(noisy.mean()) if noisy.size else 0.0,
        "accounting": "each training label randomized once for the whole run, keyed by (seed, sample id): "
                      f"the whole run is {eps}-label-DP whatever the number of epochs",
        **extra,
    }


def forward_corrected_bce(logits, noisy_labels, rho: float):
    """BCE of q = rho + (1 - 2 rho) sigmoid(logit) against the noisy label (forward loss correction,
    Patrini et al. 2017, Eq. 6 with the binary flip matrix). sigmoid(logit) then estimates the
    clean click probability, so calibration and logloss on true labels hold up."""
    import torch

    p = torch.sigmoid(logits)
    q = (rho + (1.0 - 2.0 * rho) * p).clamp(1e-7, 1.0 - 1e-7)
    y = noisy_labels.to(q.dtype)
    return -(y * torch.log(q) + (1.0 - y) * torch.log1p(-q)).mean()


def training_loss(label_dp_cfg):
    """The forward-corrected loss when `debias: true`, else None (the caller's plain BCE)."""
    if label_dp_cfg is None or not label_dp_cfg.debias:
        return None
    rho = flip_probability(label_dp_cfg.eps)
    return lambda logits, labels: forward_corrected_bce(logits, labels, rho)
