"""RRWithPrior: randomized response restricted to the prior's top-k classes.

Ghazi, Golowich, Kumar, Manurangsi, Zhang 2021, "Deep Learning with Label Differential Privacy", Algorithm 2.

For each example with prior p over K classes (sorted descending, p_(1) >= ... >= p_(K)):
    w_k = e^eps / (e^eps + k - 1) * sum_{j <= k} p_(j),   k = 1..K            (Alg. 2, line 2)
    k*  = argmax_k w_k ; Y_k* = the k* most likely classes
    if y in Y_k*: output y with prob e^eps/(e^eps + k* - 1), each other member of Y_k*
                  with prob 1/(e^eps + k* - 1)
    else:         output a uniform member of Y_k*
Here k counts the classes in the set, exactly as in the paper (the google-research/label-dp
code indexes k from 0 in this expression, which shifts the weight by one class).
The prior must not depend on the example's own label; then the output is eps-label-DP.
Binary CTR at small eps: with K = 2, w_1 = max(p) and w_2 = e^eps/(e^eps+1), so whenever the prior's
top class has more mass than e^eps/(1+e^eps) the mechanism outputs the prior's argmax whatever
the label ("collapse"); the fraction of such rows is reported as `collapse_fraction`.
"""

from __future__ import annotations

import numpy as np

from privacy.label.randomized_response import check_label_eps


def top_k_weights(prior: np.ndarray, eps: float) -> np.ndarray:
    """w_k for k = 1..K per row (Alg. 2, line 2); prior rows sorted or not."""
    eps = check_label_eps(eps)
    sorted_p = -np.sort(-prior, axis=1)
    mass = np.cumsum(sorted_p, axis=1)
    k = np.arange(1, prior.shape[1] + 1)
    keep = np.ones_like(k, dtype=np.float64) if np.isinf(eps) else 1.0 / (1.0 + (k - 1) * np.exp(-eps))
    return keep[None, :] * mass


def rr_with_prior(
    labels: np.ndarray,
    prior: np.ndarray,
    eps: float,
    rng: np.random.Generator | None = None,
    u_keep: np.ndarray | None = None,
    u_pick: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy class indices and the chosen k* per row. labels: (N,) ints in [0, K); prior: (N, K)."""
    labels = np.asarray(labels, dtype=np.int64)
    prior = np.asarray(prior, dtype=np.float64)
    if prior.ndim != 2 or prior.shape[0] != labels.shape[0]:
        raise ValueError(f"prior must have shape (N, K) with N = {labels.shape[0]}, got {prior.shape}")
    n, k_total = prior.shape
    if n and (labels.min() < 0 or labels.max() >= k_total):
        raise ValueError(f"labels must be class indices in [0, {k_total}), got range [{labels.min()}, {labels.max()}]")
    if (prior < 0).any() or not np.allclose(prior.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("prior rows must be probability vectors (non-negative, summing to 1)")
    eps = check_label_eps(eps)
    if np.isinf(eps):  # noise-free: every label is kept
        return labels.copy(), np.full(n, k_total, dtype=np.int64)
    if u_keep is None or u_pick is None:
        if rng is None:
            raise ValueError("rr_with_prior needs a numpy Generator (rng) or pre-drawn uniforms (u_keep, u_pick)")
        u_keep, u_pick = rng.random(n), rng.random(n)
    order = np.argsort(-prior, axis=1, kind="stable")
    k_star = np.argmax(top_k_weights(prior, eps), axis=1) + 1
    rank = np.argmax(order == labels[:, None], axis=1)  # position of the true label in the order
    in_top = rank < k_star
    keep_p = np.ones(n) if np.isinf(eps) else 1.0 / (1.0 + (k_star - 1) * np.exp(-eps))
    # in the set: keep, or a uniform other member; positions skip the label's own rank
    j = np.minimum((u_pick * np.maximum(k_star - 1, 1)).astype(np.int64), np.maximum(k_star - 2, 0))
    other_pos = np.where(j < rank, j, j + 1)
    pos_in = np.where(u_keep < keep_p, rank, other_pos)
    # outside the set: a uniform member
    pos_out = np.minimum((u_pick * k_star).astype(np.int64), k_star - 1)
    pos = np.where(in_top, pos_in, pos_out)
    return order[np.arange(n), pos], k_star
