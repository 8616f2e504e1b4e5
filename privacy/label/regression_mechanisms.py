"""Label DP for real-valued labels: discrete Laplace on the clipped label, RR-on-Bins, the optimal unbiased randomizer.

Every mechanism works on a label clipped to a stated [lo, hi] (never a range read from the labels) and on the grid
`grid_values(lo, hi, bins)` of `bins` evenly spaced points with lo and hi among them. All are pure functions:
randomness comes in as uniforms in [0, 1) (the leader's keyed PRF, privacy/label/regression_draws.py). Each is
eps-label-DP for one label as a distribution, and (eps, delta)-DP as sampled from 53-bit uniforms (Granularity,
below); eps = inf is the noise-free path, which returns the clipped label bit for bit.

* `laplace`: the label is rounded (randomized rounding, so unbiasedly) to a lattice of LAPLACE_STEPS steps over
  [lo, hi], then moved by two-sided geometric noise P(z) ~ alpha^|z| with alpha = e^(-eps / LAPLACE_STEPS)
  (the geometric mechanism of Ghosh, Roughgarden, Sundararajan 2009, Def. 2.3; the discrete Laplace of Canonne,
  Kamath, Steinke 2020): the sensitivity is LAPLACE_STEPS steps, so the ratio of two outputs' probabilities is at most
  alpha^-LAPLACE_STEPS = e^eps. It is the Laplace baseline of both regression papers, on integers so that the
  floating-point attack on textbook Laplace sampling (Mironov 2012) has no holes to read. Unbiased; its variance is
  `laplace_noise_variance`.
* `rr_on_bins`: Ghazi, Kamath, Kumar, Leeman, Manurangsi, Varadarajan, Zhang, "Regression with Label Differential
  Privacy" (ICLR 2023), Algorithm 1 (RR-on-Bins): a monotone map of the label values to m contiguous bins, one output
  value per bin, and eps-randomized response over the m bins (keep the label's bin with e^eps / (e^eps + m - 1), else
  one of the other m - 1 uniformly). For the squared loss and a prior p over the grid, bin j's optimal value is
  (sum_y p(y) y + (e^eps - 1) sum_{y in j} p(y) y) / (sum_y p(y) + (e^eps - 1) sum_{y in j} p(y)), and the paper's
  dynamic programme over contiguous ranges gives the optimal bins (`rr_on_bins_design`); the paper proves an
  optimal eps-DP randomizer for a given prior and loss takes this form. Biased (it shrinks towards the prior's mean).
* `unbiased`: Badanidiyuru, Ghazi, Kamath, Kumar, Leeman, Manurangsi, Varadarajan, Zhang, "Optimal Unbiased
  Randomizers for Regression with Label Differential Privacy" (NeurIPS 2023), Algorithm 1 (ComputeOptUnbiasedRand):
  the linear programme over a channel M[y, o] minimising sum_y p(y) sum_o M[y, o] (o - y)^2 subject to
  sum_o M[y, o] = 1, sum_o M[y, o] o = y (unbiased) and M[y, o] <= e^eps M[y', o] (eps-DP). Outputs lie on a grid
  over [lo - c W, hi + c W] with W = hi - lo and c = 1.05 / (e^eps - 1) (just beyond where the two-point unbiased randomizer puts its
  outputs, so the programme is feasible), plus the label grid; the paper shows an optimum needs at most 2|Y| outputs,
  which this grid does not restrict. Above eps = UNBIASED_MAX_EPS the programme is solved at that eps (a channel that
  is 8-DP is DP at any larger eps; the solver is not reliable beyond). The label is first rounded to its two neighbouring grid points with
  randomized rounding, which keeps E[output | y] = y for every real y in [lo, hi]. scipy's HiGHS solves it.

Granularity: every draw reads a uniform of 53 bits through an inverse CDF, so each attainable value gets its exact
probability up to 2^-52 (one grid point of quantization, one of floating-point error at its boundary), and values
beyond the largest attainable one (the geometric's tail past ~37 LAPLACE_STEPS / eps steps, of mass ~2^-53
LAPLACE_STEPS / eps; a moved bin at eps near 40) are never drawn, though a neighbouring label may draw them. The law
drawn is within total variation TV of the exact one, so each mechanism is (eps, (1 + e^eps) TV)-DP per label
(`sampling_delta`): about 2.5e-10 for Laplace at eps 1, below 1e-9 for a channel of 150 outputs at eps <= 10; at eps
near 40 and beyond a bound of this kind says nothing. An exact sampler (Canonne, Kamath, Steinke 2020, Alg. 2) on
the PRF's bits would make it pure DP.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from privacy.label.randomized_response import check_label_eps

LAPLACE_STEPS = 4096  # lattice steps over [lo, hi] of the discrete Laplace mechanism
_ZERO = 1e-12  # channel entries below this are taken as zero (solver noise)
_LP_MARGINS = (1e-6, 1e-4, 1e-3)  # the programme is solved at eps - margin (the next when the check fails), and the
# channel checked at eps
UNBIASED_MAX_BINS = 48  # the programme has ~6 bins^2 variables: 32 bins solve in ~1 s, 64 in ~30 s on 2 cores
UNBIASED_MAX_EPS = 8.0  # above it HiGHS misses the ratio constraints (e^10 ~ 2e4): the design's eps is capped here


def check_clip(lo: float, hi: float) -> tuple[float, float]:
    """(lo, hi) as floats; ValueError unless both are real numbers, finite, lo < hi and hi - lo finite (the grid's
    and the lattice's steps are fractions of it)."""
    real = all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in (lo, hi))
    if not real or not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and math.isfinite(hi - lo)):
        raise ValueError(f"clip must be [lo, hi] of real numbers with finite lo < hi and hi - lo, got [{lo!r}, {hi!r}]")
    return float(lo), float(hi)


def grid_values(lo: float, hi: float, bins: int) -> np.ndarray:
    """The `bins` label values the prior and the channels are defined on: lo, ..., hi evenly spaced."""
    lo, hi = check_clip(lo, hi)
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 2:
        raise ValueError(f"bins must be an integer >= 2, got {bins!r}")
    return np.linspace(lo, hi, int(bins))


def nearest_index(labels: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """The grid point nearest each clipped label (a monotone map, as RR-on-Bins needs)."""
    t = (np.clip(np.asarray(labels, np.float64), lo, hi) - lo) / (hi - lo) * (bins - 1)
    return np.clip(np.rint(t), 0, bins - 1).astype(np.int64)


def _rounded(labels: np.ndarray, lo: float, hi: float, steps: int, u: np.ndarray) -> np.ndarray:
    """Randomized rounding of the clipped labels to the lattice 0..steps: E[result] = (y - lo) / (hi - lo) * steps."""
    t = (np.clip(np.asarray(labels, np.float64), lo, hi) - lo) / (hi - lo) * steps
    low = np.minimum(np.floor(t), steps - 1)
    return (low + (np.asarray(u) < t - low)).astype(np.int64)


# -- discrete Laplace ---------------------------------------------------------------------------------------------------
def laplace_alpha(eps: float) -> float:
    """alpha = e^(-eps / LAPLACE_STEPS) of the two-sided geometric noise (0 at eps = inf)."""
    eps = check_label_eps(eps)
    return 0.0 if math.isinf(eps) else math.exp(-eps / LAPLACE_STEPS)


def laplace_noise_variance(lo: float, hi: float, eps: float) -> float:
    """Var of the noise in label units: 2 alpha / (1 - alpha)^2 steps^2 (~ 2 ((hi - lo) / eps)^2, textbook
    Laplace's); the randomized rounding adds at most step^2 / 4 = ((hi - lo) / 4096)^2 / 4 more, left out."""
    a, step = laplace_alpha(eps), (hi - lo) / LAPLACE_STEPS
    return 2.0 * a / (1.0 - a) ** 2 * step * step


def laplace_label(
    labels: np.ndarray, lo: float, hi: float, eps: float, u_round: np.ndarray, u_a: np.ndarray, u_b: np.ndarray
) -> np.ndarray:
    """The clipped label plus discrete Laplace noise (module docstring); unbiased for the clipped label."""
    lo, hi = check_clip(lo, hi)
    y = np.clip(np.asarray(labels, np.float64), lo, hi)
    a = laplace_alpha(eps)
    if a == 0.0:
        return y.copy()
    k = _rounded(y, lo, hi, LAPLACE_STEPS, u_round)
    # G = floor(ln(1 - u) / ln(alpha)) is geometric: P(G >= g) = alpha^g; G_a - G_b is two-sided geometric
    log_a = math.log(a)
    g_a = np.floor(np.log1p(-np.asarray(u_a)) / log_a)
    g_b = np.floor(np.log1p(-np.asarray(u_b)) / log_a)
    return lo + (k + g_a - g_b) * ((hi - lo) / LAPLACE_STEPS)


def sampling_delta(eps: float, outputs: int | None = None) -> float:
    """The delta of a mechanism as sampled from 53-bit uniforms (module docstring, Granularity): (1 + e^eps) TV with
    TV <= 2^-52 per attainable value: both geometrics' values of the discrete Laplace (outputs None), or the
    channel's `outputs`; 0 at eps = inf (no noise drawn)."""
    eps = check_label_eps(eps)
    if math.isinf(eps):
        return 0.0
    if outputs is None:
        top = math.floor(math.log(2.0**-53) / math.log(laplace_alpha(eps)))  # the largest geometric drawn
        outputs = 2 * (top + 1)
    return min(1.0, (1.0 + math.exp(eps)) * outputs * 2.0**-52)


# -- a channel over the grid, sampled with one uniform -----------------------------------------------------------------
def sample_channel(rows: np.ndarray, channel: np.ndarray, outputs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """outputs[o] with o drawn from channel[rows[i]] by the inverse CDF at u[i]."""
    cdf = np.cumsum(channel, axis=1)
    rows = np.asarray(rows, np.int64)
    pick = (np.asarray(u)[:, None] >= cdf[rows]).sum(axis=1)
    return np.asarray(outputs, np.float64)[np.minimum(pick, channel.shape[1] - 1)]


def channel_eps(channel: np.ndarray) -> float:
    """The eps a channel achieves: max over outputs of log(max_y M[y, o] / min_y M[y, o]) (inf where a column has
    a zero beside a positive entry)."""
    top, bottom = channel.max(axis=0), channel.min(axis=0)
    used = top > 0
    if (bottom[used] <= 0).any():
        return math.inf
    return float(np.max(np.log(top[used] / bottom[used]))) if used.any() else 0.0


# -- RR-on-Bins -----------------------------------------------------------------------------------------------------------
def _group_costs(prior: np.ndarray, values: np.ndarray, e: float) -> tuple[np.ndarray, np.ndarray]:
    """(cost[a, b], value[a, b]) of a bin holding grid points a..b-1: its optimal output (the issue's formula) and
    sum_y p(y) (y - v)^2 + (e - 1) sum_{y in bin} p(y) (y - v)^2 at it; inf where a >= b."""
    p = prior / prior.sum()
    zero = np.zeros(1)
    cp, cs, cq = (np.concatenate([zero, np.cumsum(x)]) for x in (p, p * values, p * values * values))
    pj = cp[None, :] - cp[:, None]
    sj = cs[None, :] - cs[:, None]
    qj = cq[None, :] - cq[:, None]
    mean_all, var_all = cs[-1], max(cq[-1] - cs[-1] ** 2, 0.0)
    v = (mean_all + (e - 1.0) * sj) / (1.0 + (e - 1.0) * pj)
    with np.errstate(invalid="ignore", divide="ignore"):
        var_j = np.where(pj > 0, np.maximum(qj - sj * sj / np.where(pj > 0, pj, 1.0), 0.0), 0.0)
        mean_j = np.where(pj > 0, sj / np.where(pj > 0, pj, 1.0), v)
    cost = var_all + (mean_all - v) ** 2 + (e - 1.0) * (var_j + pj * (mean_j - v) ** 2)
    a, b = np.indices(cost.shape)
    return np.where(a < b, cost, np.inf), v


def rr_on_bins_loss(prior: np.ndarray, values: np.ndarray, eps: float, starts: list[int]) -> float:
    """E[(output - y)^2] of RR-on-Bins with bins starting at grid points `starts` (starts[0] = 0) under the prior."""
    e = math.exp(check_label_eps(eps))
    cost, _ = _group_costs(np.asarray(prior, np.float64), np.asarray(values, np.float64), e)
    ends = [*starts[1:], len(values)]
    return float(sum(cost[a, b] for a, b in zip(starts, ends)) / (e + len(starts) - 1))


def rr_on_bins_design(prior: np.ndarray, values: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(bin of each grid point, output value of each bin) minimising the squared loss under the prior: the dynamic
    programme over contiguous ranges, A[m][b] = min_a A[m-1][a] + cost(a, b), and the best m for
    A[m][n] / (e^eps + m - 1) (the denominator depends on m only). O(n^3) for n grid points."""
    prior, values = np.asarray(prior, np.float64), np.asarray(values, np.float64)
    n = values.size
    if prior.shape != (n,) or (prior < 0).any() or prior.sum() <= 0:
        raise ValueError(f"prior must be {n} non-negative weights with a positive sum, got shape {prior.shape}")
    eps = check_label_eps(eps)
    if math.isinf(eps):
        return np.arange(n), values.copy()
    e = math.exp(eps)
    cost, value = _group_costs(prior, values, e)
    best = cost[0].copy()  # A[1][b]
    back = [np.zeros(n + 1, np.int64)]
    choice = (best[n] / e, 1)
    for m in range(2, n + 1):
        total = best[:, None] + cost  # [a, b]
        arg = np.argmin(total, axis=0)
        best = total[arg, np.arange(n + 1)]
        back.append(arg)
        loss = best[n] / (e + m - 1)
        if loss < choice[0]:
            choice = (loss, m)
    m, b, starts = choice[1], n, []
    for level in range(m - 1, -1, -1):
        a = int(back[level][b]) if level else 0
        starts.append(a)
        b = a
    starts.reverse()
    ends = [*starts[1:], n]
    group = np.concatenate([np.full(b - a, j) for j, (a, b) in enumerate(zip(starts, ends))])
    return group.astype(np.int64), np.array([value[a, b] for a, b in zip(starts, ends)])


def rr_on_bins_channel(group: np.ndarray, m: int, eps: float) -> np.ndarray:
    """M[y, j] = P(output bin j | grid point y): e^eps / (e^eps + m - 1) for y's own bin, 1 / (e^eps + m - 1) else."""
    eps = check_label_eps(eps)
    keep = 1.0 if math.isinf(eps) else 1.0 / (1.0 + (m - 1) * math.exp(-eps))
    other = 0.0 if m == 1 else (1.0 - keep) / (m - 1)
    channel = np.full((group.size, m), other)
    channel[np.arange(group.size), group] = keep
    return channel


def rr_on_bins(
    labels: np.ndarray, lo: float, hi: float, group: np.ndarray, outputs: np.ndarray, eps: float, u: np.ndarray
) -> np.ndarray:
    """RR-on-Bins (Alg. 1) on real labels: the nearest grid point's bin, kept or moved by eps-RR, as its value."""
    lo, hi = check_clip(lo, hi)
    if math.isinf(check_label_eps(eps)):
        return np.clip(np.asarray(labels, np.float64), lo, hi)
    rows = nearest_index(labels, lo, hi, group.size)
    return sample_channel(rows, rr_on_bins_channel(group, outputs.size, eps), outputs, u)


# -- the optimal unbiased randomizer ------------------------------------------------------------------------------------
def unbiased_design(prior: np.ndarray, values: np.ndarray, eps: float, extra: int | None = None):
    """(outputs (m,), channel (n, m)) of the optimal unbiased eps-DP randomizer over the output grid (module
    docstring); ValueError when the solver fails or its channel misses eps or unbiasedness by more than 1e-6 at
    every margin of _LP_MARGINS (a channel solved at a wider margin is eps-DP all the same, slightly noisier)."""
    prior, values = np.asarray(prior, np.float64), np.asarray(values, np.float64)
    eps = check_label_eps(eps)
    n = values.size
    if n > UNBIASED_MAX_BINS:
        raise ValueError(
            f"bins must be at most {UNBIASED_MAX_BINS} for mechanism unbiased (a linear programme), got {n}"
        )
    if math.isinf(eps):
        return values.copy(), np.eye(n)
    eps = min(eps, UNBIASED_MAX_EPS)  # an eps'-DP channel is eps-DP for every eps >= eps'
    lo, width = values[0], values[-1] - values[0]
    x = (values - lo) / width  # the programme in [0, 1] units
    c = 1.05 / math.expm1(eps) + 0.5  # beyond the two-point randomizer's outputs: room to correct the mean
    outs = np.unique(np.concatenate([np.linspace(-c, 1.0 + c, extra or 2 * n + 1), x]))
    failure = ""
    for margin in _LP_MARGINS:  # HiGHS can miss the ratio constraints by ~1e-6 at large eps: solve tighter
        got = _solve_unbiased(prior / prior.sum(), x, outs, math.exp(eps - margin))
        if isinstance(got, str):
            failure = got
            continue
        channel, kept = got
        bias = float(np.max(np.abs(channel @ kept - x)))
        if channel_eps(channel) <= eps + 1e-9 and bias <= 1e-6:
            return lo + kept * width, channel
        failure = f"its solution misses its constraints (eps {channel_eps(channel):.6g}, bias {bias:.2g} of the width)"
    raise ValueError(f"the unbiased randomizer's linear programme failed at eps={eps}: {failure}")


def _solve_unbiased(p: np.ndarray, x: np.ndarray, outs: np.ndarray, e: float) -> tuple[np.ndarray, np.ndarray] | str:
    """(channel, outputs it uses) of the programme with ratio bound e, in [0, 1] units; the solver's message when it
    fails."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, vstack

    n, m = x.size, outs.size
    cost = np.concatenate([(p[:, None] * (outs[None, :] - x[:, None]) ** 2).ravel(), np.zeros(m)])
    rows_n = np.repeat(np.arange(n), m)
    cols_nm = np.arange(n * m)
    a_eq = vstack(
        [
            coo_matrix((np.ones(n * m), (rows_n, cols_nm)), shape=(n, n * m + m)),
            coo_matrix((np.tile(outs, n), (rows_n, cols_nm)), shape=(n, n * m + m)),
        ]
    )
    t_cols = n * m + np.tile(np.arange(m), n)
    k = np.arange(n * m)
    upper = coo_matrix(  # M[y, o] - e t_o <= 0
        (np.concatenate([np.ones(n * m), np.full(n * m, -e)]), (np.concatenate([k, k]), np.concatenate([k, t_cols]))),
        shape=(n * m, n * m + m),
    )
    lower = coo_matrix(  # t_o - M[y, o] <= 0
        (np.concatenate([np.full(n * m, -1.0), np.ones(n * m)]), (np.concatenate([k, k]), np.concatenate([k, t_cols]))),
        shape=(n * m, n * m + m),
    )
    res = linprog(
        cost,
        A_ub=vstack([upper, lower]).tocsr(),
        b_ub=np.zeros(2 * n * m),
        A_eq=a_eq.tocsr(),
        b_eq=np.concatenate([np.ones(n), x]),
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        return str(res.message)
    channel = np.where(res.x[: n * m].reshape(n, m) < _ZERO, 0.0, res.x[: n * m].reshape(n, m))
    channel[:, channel.min(axis=0) == 0] = 0.0  # an output some label never gives is never given
    keep = channel.max(axis=0) > 0
    channel, outs = channel[:, keep], outs[keep]
    channel /= channel.sum(axis=1, keepdims=True)
    return channel, outs


def unbiased_label(
    labels: np.ndarray,
    lo: float,
    hi: float,
    outputs: np.ndarray,
    channel: np.ndarray,
    u_round: np.ndarray,
    u_pick: np.ndarray,
) -> np.ndarray:
    """The unbiased randomizer on real labels: randomized rounding to a neighbouring grid point (unbiased), then an
    output drawn from its channel row. E[output | y] = clip(y)."""
    lo, hi = check_clip(lo, hi)
    n = channel.shape[0]
    y = np.clip(np.asarray(labels, np.float64), lo, hi)
    if channel.shape[1] == n and np.array_equal(channel, np.eye(n)):
        return y.copy()  # eps = inf
    rows = _rounded(y, lo, hi, n - 1, u_round)
    return sample_channel(rows, channel, outputs, u_pick)


def channel_noise_variance(prior: np.ndarray, values: np.ndarray, outputs: np.ndarray, channel: np.ndarray) -> float:
    """E_y~prior Var(output | y) of an unbiased channel (the randomized rounding adds at most step^2 / 4, left out)."""
    p = np.asarray(prior, np.float64) / np.sum(prior)
    return float(p @ (channel * (outputs[None, :] - np.asarray(values)[:, None]) ** 2).sum(axis=1))
