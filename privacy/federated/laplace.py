"""Laplace protection of model outputs at inference ("local differential privacy eval laplace").

Each probability/softmax output gets Lap(1/eps) noise per coordinate. A probability lies in [0, 1],
so one output coordinate has sensitivity 1 (the seed's assumption) and its release is eps-DP. How
small the noise is: P(|X| < t) = 1 - exp(-eps t) for X ~ Lap(1/eps). The seed's
example laplace_eval_eps = 230260 gives, for t = 1e-5, 1 - exp(-2.3026) = 1 - 0.1000 = 0.90:
the noise stays below 1e-5 with 90% probability (ln 10 / 1e-5 = 230258.5, rounded up).
"""

from __future__ import annotations

import math

import numpy as np

from privacy.label.randomized_response import check_eps


def laplace_protect(outputs: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """outputs + Lap(0, 1/eps) elementwise; eps = inf returns the outputs unchanged."""
    eps = check_eps(eps)
    if eps == 0:
        raise ValueError("laplace_eval_eps must be > 0 (eps = 0 would need infinite noise)")
    outputs = np.asarray(outputs, dtype=np.float64)
    if math.isinf(eps):
        return outputs.copy()
    return outputs + rng.laplace(0.0, 1.0 / eps, size=outputs.shape)


def laplace_noise_below(eps: float, t: float) -> float:
    """P(|Lap(1/eps)| < t) = 1 - exp(-eps t)."""
    return 1.0 - math.exp(-check_eps(eps) * t)


def laplace_cost(eps: float) -> dict:
    return {"eps": check_eps(eps), "delta": 0.0}
