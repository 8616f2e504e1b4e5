"""Label-leakage attacks on the gradients a follower receives, scored by AUC against the true labels.

Attacks (Li et al. 2022, "Label Leakage and Protection in Two-party Split Learning", Sec. 3):
  sign    - the sign of the gradient of the first cut value (for a scalar cut, sign(g) is the label);
  norm    - norm scoring: ||g_i|| (positives, the rarer class, get larger gradients);
  cosine  - cosine direction scoring against the batch's largest-norm gradient (no labels needed);
  oracle  - cos(g_i, mean g|y=1 - mean g|y=0) with the true class means: the best direction attack.
Each AUC is orientation-free, max(AUC, 1 - AUC): the attacker is granted the right polarity.
With eps-label-DP by randomized response, an attack that recovers the noisy label exactly scores
AUC = 1 - rho = e^eps / (1 + e^eps) against the true label, which bounds sign, cosine and oracle.
Norm scoring uses the model's confidence, which reflects what the features say about the label;
it can exceed the bound, and so can the model's own test AUC (the feature-only baseline).

`python -m privacy.attacks --gradients G.npz --labels DIR [--eps E] [--out leakage.json]
    [--follower-seed S] [--compare-gradients G2.npz --compare-eps E2]`
(DIR holds ids.npy and labels.npy of the leader's train split). --follower-seed adds the full-view
attack of privacy/attacks/follower_view.py (replay of every public seed and salt, vote over epochs), scored
as true-label accuracy; --compare-gradients adds the two-release attack against a second recorded
release of the same data.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import roc_auc_score


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    if np.unique(y).size < 2:
        return math.nan
    a = float(roc_auc_score(y, score))
    return max(a, 1.0 - a)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=-1)
    return np.divide((a * b).sum(axis=1), na, out=np.zeros(a.shape[0]), where=na > 0)


def attack_scores(grad: np.ndarray, steps: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample scores of every attack for one epoch of recorded gradients."""
    grad = grad.astype(np.float64)
    cosine = np.empty(grad.shape[0])
    norms = np.linalg.norm(grad, axis=1)
    for s in np.unique(steps):
        rows = np.flatnonzero(steps == s)
        ref = grad[rows[np.argmax(norms[rows])]]
        cosine[rows] = _cos(grad[rows], np.broadcast_to(ref, grad[rows].shape))
    direction = (
        grad[y == 1].mean(axis=0) - grad[y == 0].mean(axis=0) if 0 < y.sum() < y.size else np.zeros(grad.shape[1])
    )
    return {
        "sign": -np.sign(grad[:, 0]),
        "norm": norms,
        "cosine": cosine,
        "oracle": _cos(grad, np.broadcast_to(direction, grad.shape)),
    }


def leakage_report(record: dict, ids: np.ndarray, labels: np.ndarray, eps: float | None) -> dict:
    """leakage.json: per-attack mean/max/per-epoch AUC against the true labels, and the DP bound."""
    order = np.argsort(ids)
    pos = np.searchsorted(ids[order], record["ids"])
    if np.any(pos >= ids.size) or np.any(ids[order][np.minimum(pos, ids.size - 1)] != record["ids"]):
        raise ValueError("recorded gradients name sample ids that are not in the label file")
    y_all = labels[order][pos].astype(np.int64)
    per: dict[str, list[float]] = {k: [] for k in ("sign", "norm", "cosine", "oracle")}
    for epoch in np.unique(record["epoch"]):
        m = record["epoch"] == epoch
        scores = attack_scores(record["grad"][m], record["step"][m], y_all[m])
        for name, s in scores.items():
            per[name].append(_auc(y_all[m], s))
    bound = 1.0 if eps is None else (1.0 if math.isinf(eps) else math.exp(eps) / (1.0 + math.exp(eps)))
    return {
        "eps": eps,
        "bound": bound,
        "attacks": {
            k: {"mean_auc": float(np.mean(v)), "max_auc": float(np.max(v)), "per_epoch": v} for k, v in per.items()
        },
        "samples_per_epoch": int(np.sum(record["epoch"] == record["epoch"][0])),
    }


def _true_labels(ids: np.ndarray, labels: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    order = np.argsort(ids)
    return labels[order][np.searchsorted(ids[order], wanted)].astype(np.int64)


def follower_view_report(
    record: dict,
    ids: np.ndarray,
    labels: np.ndarray,
    eps: float,
    follower_seed: int,
    second: dict | None = None,
    second_eps: float | None = None,
) -> dict:
    """The full-view attacks scored against the true labels, beside the bound 1 - rho."""
    from privacy.attacks.follower_view import (
        balanced_accuracy,
        best_accuracy,
        follower_view_attack,
        independent_disagreement_accuracy,
        per_epoch_guesses,
    )

    guesses = follower_view_attack(record, ids, eps, follower_seed)
    seen, _ = per_epoch_guesses(record)
    truth = _true_labels(ids, labels, seen)
    name, acc = best_accuracy(guesses, truth)
    out = {
        "follower_view": {
            "metric": "balanced accuracy (TPR + TNR) / 2 against the true labels, better polarity",
            "bound": math.exp(eps) / (1 + math.exp(eps)) if math.isfinite(eps) else 1.0,
            "gradient_sign_accuracy": balanced_accuracy(guesses["gradient sign (epoch 0)"], truth),
            "vote_accuracy": balanced_accuracy(guesses["majority vote over epochs"], truth),
            "best_accuracy": acc,
            "best_attack": name,
            "candidates": len(guesses),
        }
    }
    if second is not None and second_eps is not None:
        seen2, g2 = per_epoch_guesses(second)
        common, i1, i2 = np.intersect1d(seen, seen2, return_indices=True)
        lo, hi = guesses["gradient sign (epoch 0)"][i1], g2[0][i2]
        if second_eps < eps:
            lo, hi = hi, lo
        d = lo != hi
        acc_hi = float(np.mean(hi[d] == truth[i1][d])) if d.any() else math.nan
        out["two_releases"] = {
            "eps": sorted([eps, second_eps]),
            "disagree_fraction": float(d.mean()),
            "high_eps_accuracy_where_they_disagree": max(acc_hi, 1 - acc_hi),
            "independent_draws_allow": independent_disagreement_accuracy(min(eps, second_eps), max(eps, second_eps)),
            "nested_draws_give": 1.0,
        }
    return out
