"""Randomized response: binary and k-ary, their probabilities, and the debiased frequency estimate.

Warner 1965; k-ary ("generalized") RR as in Kairouz, Oh, Viswanath 2016 and Ghazi et al. 2021
(RR is Algorithm 1 there). Each use on one record is eps-DP for that record (pure DP, delta = 0).
Every function is pure: randomness comes in as a numpy Generator or as pre-drawn uniforms.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from privacy.domains import label_eps_error


def check_eps(eps) -> float:
    """eps as a float; TypeError for non-real numbers (bool, str), ValueError for NaN or eps < 0."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__} {eps!r}")
    eps = float(eps)
    if math.isnan(eps) or eps < 0:
        raise ValueError(f"eps must be >= 0 (or inf for no noise), got eps={eps!r}")
    return eps


def check_label_eps(eps) -> float:
    """eps as a float when it is a label-DP eps (privacy/domains.py LABEL_EPS_DOMAIN: [0.001, 50] or inf, where the
    mechanisms are numerically sound); TypeError for non-real numbers, ValueError quoting the domain otherwise."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__} {eps!r}")
    err = label_eps_error("eps", float(eps))
    if err:
        raise ValueError(err)
    return float(eps)


def flip_probability(eps: float) -> float:
    """Binary RR flips with rho = 1 / (1 + e^eps); 0 at eps = inf."""
    eps = check_label_eps(eps)
    return 0.0 if math.isinf(eps) else 1.0 / (1.0 + math.exp(eps))


def keep_probability(eps: float, k: int) -> float:
    """k-ary RR keeps the true class with p1 = e^eps / (k - 1 + e^eps) (computed without overflow)."""
    eps = check_label_eps(eps)
    if k < 1:
        raise ValueError(f"k must be >= 1, got k={k}")
    return 1.0 if math.isinf(eps) else 1.0 / (1.0 + (k - 1) * math.exp(-eps))


def kary_transition(k: int, eps: float) -> np.ndarray:
    """The K x K channel of k-ary RR: T[i, j] = P(y~ = j | y = i) = p1 on the diagonal, (1 - p1)/(K - 1) off it."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"k must be an integer >= 2, got k={k!r}")
    p1 = keep_probability(eps, k)
    t = np.full((k, k), (1.0 - p1) / (k - 1))
    np.fill_diagonal(t, p1)
    return t


def binary_rr(
    bits: np.ndarray, eps: float, rng: np.random.Generator | None = None, u: np.ndarray | None = None
) -> np.ndarray:
    """Flip each 0/1 value with probability rho(eps); `u` (uniforms, same shape) replaces `rng`."""
    bits = np.asarray(bits)
    rho = flip_probability(eps)
    if rho == 0.0:
        return bits.copy()
    if u is None:
        if rng is None:
            raise ValueError("binary_rr needs a numpy Generator (rng) or pre-drawn uniforms (u)")
        u = rng.random(bits.shape)
    flip = np.asarray(u) < rho
    return np.where(flip, 1 - bits, bits).astype(bits.dtype)


def kary_rr(
    classes: np.ndarray,
    k: int,
    eps: float,
    rng: np.random.Generator | None = None,
    u_keep: np.ndarray | None = None,
    u_other: np.ndarray | None = None,
) -> np.ndarray:
    """Keep each class index with p1 = e^eps/(k-1+e^eps), else move to one of the other k-1 uniformly."""
    classes = np.asarray(classes)
    p1 = keep_probability(eps, k)
    if p1 == 1.0 or k == 1:
        return classes.copy()
    if u_keep is None or u_other is None:
        if rng is None:
            raise ValueError("kary_rr needs a numpy Generator (rng) or pre-drawn uniforms (u_keep, u_other)")
        u_keep, u_other = rng.random(classes.shape), rng.random(classes.shape)
    shift = 1 + np.minimum((np.asarray(u_other) * (k - 1)).astype(np.int64), k - 2)
    moved = (classes + shift) % k
    return np.where(np.asarray(u_keep) < p1, classes, moved).astype(classes.dtype)


def debias_count(n_reported_ones: float, n: float, eps: float) -> float:
    """Unbiased estimate of the true number of ones behind binary RR reports.

    N_T = (N_C - N + N P) / (2P - 1) with P = e^eps / (1 + e^eps) the keep probability
    (E[N_C] = P N_T + (1 - P)(N - N_T)). Undefined at eps = 0, where reports carry no information (outside the
    label-eps domain, refused by flip_probability).
    """
    p = 1.0 - flip_probability(eps)
    return (n_reported_ones - n + n * p) / (2 * p - 1)


def rr_cost(eps: float) -> dict:
    """The (eps, delta) that one randomized-response report spends on its record."""
    return {"eps": check_label_eps(eps), "delta": 0.0}
