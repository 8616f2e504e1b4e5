"""Statistical helpers for testing randomized mechanisms with a stated false-failure bound."""

from __future__ import annotations

import math

import numpy as np


def binomial_tolerance(n: int, p: float, z: float = 5.5) -> float:
    """z standard deviations of a binomial proportion; z = 5.5 gives two-sided P(false failure) < 4e-8."""
    return z * math.sqrt(max(p * (1 - p), 1e-12) / n)


def hoeffding_slack(n: int, beta: float) -> float:
    """|empirical - true| <= t with probability >= 1 - beta for a frequency over n samples (Hoeffding)."""
    return math.sqrt(math.log(2.0 / beta) / (2.0 * n))


def dp_histogram_violations(
    out_a: np.ndarray, out_b: np.ndarray, eps: float, bins: int, beta: float = 1e-8
) -> list[str]:
    """Bins o where the empirical histograms of neighbouring inputs break P_a(o) <= e^eps P_b(o) (and back)
    by more than sampling error allows (the approach of Google differential-privacy
    statistical_tests_utils, with Hoeffding slack). With 2*bins estimates at beta each, a correct
    mechanism fails with probability <= 2 * bins * beta."""
    n_a, n_b = out_a.size, out_b.size
    pa = np.bincount(out_a, minlength=bins) / n_a
    pb = np.bincount(out_b, minlength=bins) / n_b
    ta, tb = hoeffding_slack(n_a, beta), hoeffding_slack(n_b, beta)
    bound = math.exp(eps)
    bad = []
    for o in range(bins):
        if pa[o] - ta > bound * (pb[o] + tb):
            bad.append(f"P_a({o})={pa[o]:.4f} > e^eps P_b({o})={bound * pb[o]:.4f}")
        if pb[o] - tb > bound * (pa[o] + ta):
            bad.append(f"P_b({o})={pb[o]:.4f} > e^eps P_a({o})={bound * pa[o]:.4f}")
    return bad
