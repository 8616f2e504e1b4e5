"""Clipping and the analytic Gaussian mechanism (DP_ENCRYPT).

sigma comes from Balle & Wang 2018, "Improving the Gaussian Mechanism for Differential Privacy:
Analytical Calibration and Optimal Denoising", Algorithm 1 (analytic Gaussian mechanism), which
finds the smallest sigma with
    Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D) <= delta     (Theorem 8)
for L2 sensitivity D. Unlike the classical sqrt(2 ln(1.25/delta)) D / eps it is exact for any eps.
"""

from __future__ import annotations

import math

import numpy as np

from privacy.domains import Params
from privacy.field_types import Number


def _phi(x: float) -> float:
    """Standard normal CDF, accurate in the far tails (erfc)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _exp_phi(eps: float, x: float) -> float:
    """e^eps * Phi(x) without overflow for large eps (log-space)."""
    from scipy.special import log_ndtr  # imported on use: configs import this module for its parameter schema

    return math.exp(eps + float(log_ndtr(x)))


def gaussian_delta(eps: float, delta_sensitivity: float, sigma: float) -> float:
    """delta of the Gaussian mechanism at eps (Balle & Wang 2018, Theorem 8)."""
    a = delta_sensitivity / (2.0 * sigma)
    b = eps * sigma / delta_sensitivity
    return _phi(a - b) - _exp_phi(eps, -a - b)


def analytic_gaussian_sigma(eps: float, delta: float, sensitivity: float = 1.0, tol: float = 1e-12) -> float:
    """Algorithm 1 of Balle & Wang 2018: the smallest sigma that makes the mechanism (eps, delta)-DP."""
    if not (isinstance(eps, (int, float)) and eps > 0 and math.isfinite(eps)):
        raise ValueError(f"dp_eps must be > 0 and finite, got {eps!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ValueError(f"dp_delta must be in (0, 1), got {delta!r}")
    if not (isinstance(sensitivity, (int, float)) and sensitivity > 0):
        raise ValueError(f"sensitivity must be > 0, got {sensitivity!r}")

    def case_a(s: float) -> float:
        return _phi(math.sqrt(eps * s)) - _exp_phi(eps, -math.sqrt(eps * (s + 2.0)))

    def case_b(s: float) -> float:
        return _phi(-math.sqrt(eps * s)) - _exp_phi(eps, -math.sqrt(eps * (s + 2.0)))

    delta0 = case_a(0.0)
    if delta == delta0:
        alpha = 1.0
    else:
        if delta > delta0:
            f, stop, to_alpha = (
                case_a,
                (lambda s: case_a(s) >= delta),
                (lambda s: math.sqrt(1 + s / 2) - math.sqrt(s / 2)),
            )
            go_left = lambda s: case_a(s) > delta  # noqa: E731
        else:
            f, stop, to_alpha = (
                case_b,
                (lambda s: case_b(s) <= delta),
                (lambda s: math.sqrt(1 + s / 2) + math.sqrt(s / 2)),
            )
            go_left = lambda s: case_b(s) < delta  # noqa: E731
        lo, hi = 0.0, 1.0
        for _ in range(200):  # doubling
            if stop(hi):
                break
            lo, hi = hi, 2.0 * hi
        s = lo + (hi - lo) / 2
        for _ in range(200):  # bisection
            if abs(f(s) - delta) <= tol:
                break
            if go_left(s):
                hi = s
            else:
                lo = s
            s = lo + (hi - lo) / 2
        alpha = to_alpha(s)
    return alpha * sensitivity / math.sqrt(2.0 * eps)


def clip_by_global_norm(update: np.ndarray, max_norm: float) -> tuple[np.ndarray, float]:
    """Scale the whole flattened update so its L2 norm is at most max_norm; return (clipped, original norm)."""
    norm = float(np.linalg.norm(update))
    scale = min(1.0, max_norm / norm) if norm > 0 else 1.0
    return update * scale, norm


class GaussianParams(Params):
    """dp_eps > 0, dp_delta in (0, 1), dp_norm_clip > 0."""

    dp_eps: Number(0, lo_open=True) = 50.0
    dp_delta: Number(0, 1, lo_open=True, hi_open=True) = 0.01
    dp_norm_clip: Number(0, lo_open=True) = 1.0

    @property
    def sigma(self) -> float:
        """Local DP: two clipped updates differ by at most 2 * dp_norm_clip in L2."""
        return analytic_gaussian_sigma(self.dp_eps, self.dp_delta, 2.0 * self.dp_norm_clip)

    @property
    def noise_multiplier(self) -> float:
        """sigma / sensitivity of one round's release (sensitivity 2 * dp_norm_clip): what an accountant composes."""
        return self.sigma / (2.0 * self.dp_norm_clip)


def gaussian_client(update: np.ndarray, params: GaussianParams, rng: np.random.Generator) -> np.ndarray:
    """DP_ENCRYPT on one client: clip to dp_norm_clip, add N(0, sigma^2) per coordinate."""
    clipped, _ = clip_by_global_norm(np.asarray(update, dtype=np.float64), params.dp_norm_clip)
    return clipped + rng.normal(0.0, params.sigma, size=clipped.shape)


def gaussian_cost(params: GaussianParams) -> dict:
    """One round's (dp_eps, dp_delta); the rounds compose through `noise_multiplier` in the ledger's accountant."""
    return {"eps": float(params.dp_eps), "delta": float(params.dp_delta)}
