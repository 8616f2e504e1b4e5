"""The prior over a regression label's grid that RR-on-Bins and the unbiased randomizer are optimised for.

Three sources, none of them the true labels for free (`privacy.label_dp.prior`):

* `dp_histogram`: the counts of the leader's clipped labels on the grid (each label at its nearest grid point) plus
  two-sided geometric noise with alpha = e^(-eps_prior / 2) per count, negative counts set to zero. Changing one
  label moves one count down and another up, an L1 sensitivity of 2, so the histogram is eps_prior-DP (the geometric
  mechanism, Ghosh, Roughgarden, Sundararajan 2009, Thm. 4.1 scaled to sensitivity 2; Dwork & Roth 2014, Prop. 3.4
  for its Laplace twin). Integer counts: no floating-point holes. Ghazi et al. 2023 (Sec. 4) spend part of eps on
  such a prior and the rest on RR-on-Bins; basic composition adds the two (Dwork & Roth 2014, Thm. 3.16), and the
  ledger records them as two releases.
* `uniform`: every grid point alike; costs nothing.
* a file the user states (CSV lines `value,weight`, a header allowed): weights of label values from public or
  earlier knowledge, each at its nearest grid point. It costs nothing here, and it must not be computed from these
  labels (the leader's word).
"""

from __future__ import annotations

import math
import os

import numpy as np

from privacy.label.randomized_response import check_label_eps
from privacy.label.regression_mechanisms import nearest_index, sampling_delta

PRIOR_KINDS = ("dp_histogram", "uniform")  # anything else names a file


def label_histogram(labels: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Counts of the clipped labels at their nearest grid point (int64, length bins)."""
    return np.bincount(nearest_index(labels, lo, hi, bins), minlength=bins).astype(np.int64)


def geometric_noise(eps: float, sensitivity: int, u_a: np.ndarray, u_b: np.ndarray) -> np.ndarray:
    """Two-sided geometric noise with alpha = e^(-eps / sensitivity) from two uniforms each (zeros at eps = inf)."""
    eps = check_label_eps(eps)
    if math.isinf(eps):
        return np.zeros(np.shape(u_a), np.int64)
    log_a = -eps / sensitivity
    g_a = np.floor(np.log1p(-np.asarray(u_a)) / log_a)
    g_b = np.floor(np.log1p(-np.asarray(u_b)) / log_a)
    return (g_a - g_b).astype(np.int64)


def histogram_sampling_delta(eps: float) -> float:
    """The delta of the DP histogram as sampled from 53-bit uniforms (regression_mechanisms.py, Granularity): each
    count's noise is two geometrics with alpha = e^(-eps / 2), each drawn by an inverse CDF that gives every value up
    to the largest drawn (`top`) its probability within 2^-52 and never draws beyond. A neighbour moves two counts;
    the others have the same law in both, so the two counts' four geometrics of top + 1 values each bound the total
    variation, and the histogram is (eps, (1 + e^eps) TV)-DP: sampling_delta with 4 (top + 1) outputs; 0 at inf."""
    eps = check_label_eps(eps)
    if math.isinf(eps):
        return 0.0
    top = math.floor(math.log(2.0**-53) / (-eps / 2))  # the largest geometric the sampler draws
    return sampling_delta(eps, 4 * (top + 1))


def dp_histogram_prior(
    labels: np.ndarray, lo: float, hi: float, bins: int, eps: float, u_a: np.ndarray, u_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(prior, noisy counts): the eps-DP histogram of the labels, normalised (uniform when every noisy count is
    <= 0). eps = inf: the exact histogram."""
    noisy = label_histogram(labels, lo, hi, bins) + geometric_noise(eps, 2, u_a, u_b)
    kept = np.maximum(noisy, 0).astype(np.float64)
    prior = kept / kept.sum() if kept.sum() > 0 else np.full(bins, 1.0 / bins)
    return prior, noisy


def uniform_prior(bins: int) -> np.ndarray:
    return np.full(int(bins), 1.0 / int(bins))


def file_prior(path: str, lo: float, hi: float, bins: int) -> np.ndarray:
    """The stated prior of a `value,weight` CSV at the grid; ValueError naming the line for a bad one."""
    if not os.path.isfile(path):
        raise ValueError(
            f"privacy.label_dp.prior {path!r} is not a file (allowed: dp_histogram, uniform, or a CSV file)"
        )
    weights = np.zeros(int(bins))
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            parts = [p.strip() for p in text.split(",")]
            try:
                value, weight = float(parts[0]), float(parts[1]) if len(parts) == 2 else math.nan
            except ValueError:
                if number == 1:
                    continue  # a header
                value, weight = math.nan, math.nan
            if len(parts) != 2 or not (math.isfinite(value) and math.isfinite(weight) and weight >= 0):
                raise ValueError(
                    f"privacy.label_dp.prior {path}:{number}: {text[:60]!r} is not `value,weight` with a finite value "
                    "and a finite weight >= 0"
                )
            weights[nearest_index(np.array([value]), lo, hi, bins)[0]] += weight
    if weights.sum() <= 0:
        raise ValueError(f"privacy.label_dp.prior {path} has no positive weight (allowed: value,weight lines)")
    return weights / weights.sum()
