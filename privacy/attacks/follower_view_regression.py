"""What a curious follower recovers of real-valued labels with its full view: every cut gradient it received, its
config and seed, the sample ids, eps and the clip (not secrets), and every public seed and salt in this code.

The attack (regression counterpart of privacy/attacks/follower_view.py):
1. Noisy label from the gradient: with squared loss and a linear top, a row's cut gradient is
   (2 / B) (prediction - y~_std) w, with w the top's weights on this follower's cut, the same for the whole batch.
   The batch's gradients are rank one: their top singular vector is +-w, and each row's projection on it is the
   residual (prediction - y~) up to the batch's scale, standardized per batch. The sign of w is tracked from batch to
   batch (w moves slowly), and one global sign is left to the scorer.
2. Vote over epochs: each sample's residual averaged over every epoch it was seen in. A label drawn once per
   release gives the same y~ in every epoch (nothing to average away); one re-drawn per epoch averages towards y.
3. Replay: the noise of discrete Laplace as every public seed and salt would draw it (uniform_from_ids with
   `candidate_seeds` x LEGACY_SALTS^2), each tried as a second regressor: the right one cancels the noise exactly.
The scorer grants the attacker an oracle calibration: the least-squares affine map from its scores (and a replayed
noise) to the true labels; the mechanism's own output y~ gets the same. Under a correct eps-label-DP release, no
candidate's calibrated mean absolute error is below y~'s beyond sampling error (`excess`, paired over samples).
"""

from __future__ import annotations

import math

import numpy as np

from privacy.attacks.follower_view import LEGACY_SALTS, candidate_seeds
from privacy.label.regression_mechanisms import LAPLACE_STEPS, laplace_alpha
from privacy.public_hash import uniform_from_ids


def residual_scores(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(ids, residual per id averaged over epochs): step 1 and 2 of the module docstring."""
    ids, grad = np.asarray(record["ids"]), np.asarray(record["grad"], np.float64)
    batch = np.asarray(record["epoch"]).astype(np.int64) * (1 << 32) + np.asarray(record["step"]).astype(np.int64)
    order = np.argsort(batch, kind="stable")
    score = np.zeros(ids.size)
    ref = None
    cuts = np.flatnonzero(np.diff(batch[order])) + 1
    for rows in np.split(order, cuts):
        g = grad[rows]
        _, _, vt = np.linalg.svd(g - 0.0, full_matrices=False)
        v = vt[0]
        if ref is not None and v @ ref < 0:
            v = -v
        ref = v
        s = g @ v
        score[rows] = (s - s.mean()) / (s.std() or 1.0)
    uniq, inverse = np.unique(ids, return_inverse=True)
    votes = np.bincount(inverse, weights=score) / np.bincount(inverse)
    return uniq, votes


def public_laplace_noise(ids: np.ndarray, eps: float, clip: tuple[float, float], seeds: list[int]) -> dict:
    """name -> the discrete Laplace noise (label units) a leader drawing from public uniforms would have added."""
    a = laplace_alpha(eps)
    if a == 0.0:
        return {}
    step, log_a = (clip[1] - clip[0]) / LAPLACE_STEPS, math.log(a)
    out = {}
    for seed in seeds:
        geo = {s: np.floor(np.log1p(-uniform_from_ids(ids, seed, s)) / log_a) for s in LEGACY_SALTS}
        for sa in LEGACY_SALTS:
            for sb in LEGACY_SALTS:
                if sa != sb:
                    out[f"laplace noise from uniform_from_ids(seed={seed}, salts={sa:#x}, {sb:#x})"] = (
                        geo[sa] - geo[sb]
                    ) * step
    return out


def calibrated_abs_errors(truth: np.ndarray, *regressors: np.ndarray) -> np.ndarray:
    """|y - (a + sum b_k x_k)| with the least-squares a, b (the oracle calibration)."""
    x = np.column_stack([np.ones(truth.size), *regressors])
    coef, *_ = np.linalg.lstsq(x, truth, rcond=None)
    return np.abs(truth - x @ coef)


def follower_view_regression(
    record: dict, ids: np.ndarray, truth: np.ndarray, noisy: np.ndarray, eps: float, clip, follower_seed: int
) -> dict:
    """The best candidate against the mechanism's own output: excess = mean(|err_attack| - |err_y~|) (negative:
    closer to the truth than y~), with its standard error, over the samples the follower saw."""
    seen, votes = residual_scores(record)
    at = np.searchsorted(ids, seen)
    if not np.array_equal(ids[np.minimum(at, ids.size - 1)], seen):
        raise ValueError("the record holds ids outside the labelled split")
    y, y_noisy = np.asarray(truth, np.float64)[at], np.asarray(noisy, np.float64)[at]
    base = calibrated_abs_errors(y, y_noisy)
    candidates = {"gradient residual (voted over epochs)": (votes,)}
    for name, noise in public_laplace_noise(seen, eps, clip, candidate_seeds(follower_seed)).items():
        candidates[f"gradient residual + {name}"] = (votes, noise)
    best = None
    for name, regs in candidates.items():
        d = calibrated_abs_errors(y, *regs) - base
        excess, se = float(d.mean()), float(d.std() / math.sqrt(d.size))
        if best is None or excess < best["excess"]:
            best = {"best": name, "excess": excess, "excess_se": se}
    return {
        **best,
        "noisy_mae": float(base.mean()),
        "candidates": len(candidates),
        "rows": int(seen.size),
        # how well step 1 recovers the noisy label: |corr(voted residual, y~)| (1 when the prediction is constant)
        "noisy_label_correlation": float(abs(np.corrcoef(votes, y_noisy)[0, 1])),
    }
