"""Label-leakage attacks on the gradients a follower receives for a K-class cut.

Each is scored as accuracy against the true classes.

With a softmax top, a follower's gradient of sample i is g_i = W_f^T (softmax(z_i) - e_{y~_i}) / B, so its
direction points (mostly) at the column of its training label y~_i: the K-class form of the direction
attacks of Li et al. 2022 ("Label Leakage and Protection in Two-party Split Learning", Sec. 3).
  oracle  - the best direction attack: class means of the gradients, computed with the true labels,
            and each sample assigned to the class whose centred mean is most cosine-similar;
  cluster - label-free: k-means (K clusters) on the unit-normalised gradients of each epoch, each
            cluster then mapped to the class that maximises agreement (Hungarian matching with the
            true labels: the attacker is granted the best naming of its clusters).
Under eps-label-DP by k-ary RR an attack that recovers the training label y~ exactly scores
p1 = e^eps / (K - 1 + e^eps) against the true label; both attacks recover at most y~, so p1 bounds them
(up to what the features predict about y through the model's confidence, as for the binary attacks).
"""

from __future__ import annotations

import math

import numpy as np


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


def oracle_direction_guess(grad: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """argmax_c cos(g_i, mu_c - mu) with mu_c the mean gradient of true class c (mu the overall mean)."""
    g = np.asarray(grad, np.float64)
    mu = g.mean(axis=0)
    means = np.stack([g[y == c].mean(axis=0) - mu if np.any(y == c) else np.zeros(g.shape[1]) for c in range(k)])
    return np.argmax(_unit(g) @ _unit(means).T, axis=1)


def cluster_guess(grad: np.ndarray, y: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """k-means on unit gradients, clusters named by the agreement-maximising matching with the true labels."""
    from scipy.optimize import linear_sum_assignment
    from sklearn.cluster import KMeans

    g = _unit(np.asarray(grad, np.float64))
    clusters = KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(g)
    agree = np.zeros((k, k))
    np.add.at(agree, (clusters, y), 1)
    rows, cols = linear_sum_assignment(-agree)
    naming = np.empty(k, np.int64)
    naming[rows] = cols
    return naming[clusters]


def multiclass_leakage_report(record: dict, ids: np.ndarray, labels: np.ndarray, k: int, eps: float | None) -> dict:
    """Per-epoch accuracy of each attack against the true classes, and the k-ary RR bound p1."""
    order = np.argsort(ids)
    pos = np.searchsorted(ids[order], record["ids"])
    if np.any(pos >= ids.size) or np.any(ids[order][np.minimum(pos, ids.size - 1)] != record["ids"]):
        raise ValueError("recorded gradients name sample ids that are not in the label file")
    y = labels[order][pos].astype(np.int64)
    per: dict[str, list[float]] = {"oracle": [], "cluster": []}
    for epoch in np.unique(record["epoch"]):
        m = record["epoch"] == epoch
        g = record["grad"][m]
        per["oracle"].append(float(np.mean(oracle_direction_guess(g, y[m], k) == y[m])))
        per["cluster"].append(float(np.mean(cluster_guess(g, y[m], k) == y[m])))
    bound = 1.0 if eps is None or math.isinf(eps) else 1.0 / (1.0 + (k - 1) * math.exp(-eps))
    return {
        "eps": eps,
        "num_classes": k,
        "bound": bound,
        "rows": int(y.size),
        "majority_class": float(np.bincount(y, minlength=k).max() / max(y.size, 1)),
        "attacks": {
            name: {"mean_accuracy": float(np.mean(v)), "max_accuracy": float(np.max(v)), "per_epoch": v}
            for name, v in per.items()
        },
    }
