"""Regression label DP with the leader's keyed PRF: each real label randomized once per release.

The same release rules as binary and K-class labels (privacy/label/release_draws.py): the noisy label of sample i is
a pure function of (leader key, release id, i, true label), so every epoch, run and resume of one release reuses it,
and another release (eps, mechanism, clip, bins, prior or key) draws independently. The DP histogram's noise is drawn
the same way, per grid point, under the prior's own release id.
"""

from __future__ import annotations

import numpy as np

from privacy.keyed_random import keyed_uniforms
from privacy.label.regression_mechanisms import laplace_label, rr_on_bins, unbiased_label
from privacy.label.regression_prior import dp_histogram_prior

# PRF purposes: one independent uniform stream per decision
PURPOSE_ROUND = "regression/round"
PURPOSE_NOISE_A = "regression/laplace-a"
PURPOSE_NOISE_B = "regression/laplace-b"
PURPOSE_PICK = "regression/pick"
PURPOSE_PRIOR_A = "regression/prior-a"
PURPOSE_PRIOR_B = "regression/prior-b"


def laplace_once(labels, ids, lo: float, hi: float, eps: float, key: bytes, release: str) -> np.ndarray:
    """Discrete Laplace on the clipped label, uniforms from the leader's PRF at (key, release, sample id)."""
    u = (keyed_uniforms(key, release, p, ids) for p in (PURPOSE_ROUND, PURPOSE_NOISE_A, PURPOSE_NOISE_B))
    return laplace_label(labels, lo, hi, eps, *u)


def rr_on_bins_once(labels, ids, lo: float, hi: float, group, outputs, eps: float, key: bytes, release: str):
    """RR-on-Bins with its bins and values, one keyed uniform per sample id."""
    return rr_on_bins(labels, lo, hi, group, outputs, eps, keyed_uniforms(key, release, PURPOSE_PICK, ids))


def unbiased_once(labels, ids, lo: float, hi: float, outputs, channel, key: bytes, release: str) -> np.ndarray:
    """The unbiased randomizer's channel, keyed uniforms for the rounding and the pick."""
    u_round = keyed_uniforms(key, release, PURPOSE_ROUND, ids)
    return unbiased_label(labels, lo, hi, outputs, channel, u_round, keyed_uniforms(key, release, PURPOSE_PICK, ids))


def dp_histogram_once(labels, lo: float, hi: float, bins: int, eps: float, key: bytes, release: str):
    """(prior, noisy counts) of the labels' eps-DP histogram, its noise keyed per grid point under `release`."""
    points = np.arange(int(bins), dtype=np.int64)
    u_a = keyed_uniforms(key, release, PURPOSE_PRIOR_A, points)
    u_b = keyed_uniforms(key, release, PURPOSE_PRIOR_B, points)
    return dp_histogram_prior(labels, lo, hi, bins, eps, u_a, u_b)
