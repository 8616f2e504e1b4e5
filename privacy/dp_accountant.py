"""Composed Gaussian releases through Google's maintained accountant (dp_accounting): eps for a noise level, and back.

Every function here is pure: it builds the releases as dp_accounting events (`GaussianDpEvent` of noise multiplier
z = sigma / L2 sensitivity, `PoissonSampledDpEvent` where each release samples the unit with probability q,
`SelfComposedDpEvent` for k releases) and asks a fresh accountant for eps at delta. Two accountants, by name:

- ``rdp`` (default): Renyi DP. A Gaussian release of noise multiplier z is (alpha, alpha / (2 z^2))-RDP for every
  order alpha > 1 (Mironov 2017, "Renyi Differential Privacy", Proposition 7 and Corollary 3), and RDP composes by
  adding at each order (Proposition 1); Poisson subsampling follows Mironov, Talwar & Zhang 2019 ("Renyi Differential
  Privacy of the Sampled Gaussian Mechanism", Theorem 5 / Section 3.3). The conversion to (eps, delta) is the
  improved one of Canonne, Kamath & Steinke 2020 ("The Discrete Gaussian for Differential Privacy", Proposition 12)
  that dp_accounting applies, tighter than Mironov 2017's Proposition 3 (eps = rdp + ln(1/delta) / (alpha - 1)),
  minimised over dp_accounting's default orders. Fast and stable at any eps; a few percent loose.
- ``pld``: privacy loss distributions (Meiser & Mohammadi 2018; Koskela, Jalko & Honkela 2020; Doroshenko, Ghazi,
  Kamath, Kumar & Manurangsi 2022, "Connect the Dots", for the pessimistic discretisation dp_accounting uses). Tight
  up to the discretisation interval (for one Gaussian release it matches the analytic Gaussian mechanism of Balle &
  Wang 2018, Theorem 8), but slower; its grid here is 1e-4 * max(1, sqrt(k) / z) so that very small noise stays
  tractable.

Units: the noise multiplier is the ratio sigma / sensitivity, where sensitivity is the L2 distance between the
outputs on two neighbouring inputs of the caller's unit (a client's update, a sample, a row). Poisson sampling is
defined under add/remove-one neighbours, as the accountants implement it. Pure-eps mechanisms (Laplace, randomized
response, SignDS) are not composed here: their eps are summed (Dwork & Roth 2014, Theorem 3.16).
"""

from __future__ import annotations

import math

ACCOUNTANTS = ("rdp", "pld")
DEFAULT_ACCOUNTANT = "rdp"
PLD_BASE_INTERVAL = 1e-4


def _check_accountant(accountant: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got accountant={accountant!r}")
    return accountant


def _check_delta(delta: float) -> float:
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got delta={delta!r}")
    return float(delta)


def _check_release(noise_multiplier: float, compositions: int, sampling_rate: float) -> tuple[float, int, float]:
    if not (isinstance(noise_multiplier, (int, float)) and noise_multiplier >= 0 and not math.isnan(noise_multiplier)):
        raise ValueError(f"noise_multiplier must be >= 0, got noise_multiplier={noise_multiplier!r}")
    if isinstance(compositions, bool) or not isinstance(compositions, int) or compositions < 0:
        raise ValueError(f"compositions must be an integer >= 0, got compositions={compositions!r}")
    if not (isinstance(sampling_rate, (int, float)) and 0 < sampling_rate <= 1):
        raise ValueError(f"sampling_rate must be in (0, 1], got sampling_rate={sampling_rate!r}")
    return float(noise_multiplier), compositions, float(sampling_rate)


def gaussian_releases_event(noise_multiplier: float, compositions: int = 1, sampling_rate: float = 1.0):
    """The dp_accounting event of `compositions` Gaussian releases of noise multiplier z, each Poisson-sampled at q < 1."""
    import dp_accounting  # imported on use: it loads scipy.stats and scipy.signal (seconds)

    z, k, q = _check_release(noise_multiplier, compositions, sampling_rate)
    event = dp_accounting.GaussianDpEvent(z)
    if q < 1.0:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    return dp_accounting.SelfComposedDpEvent(event, k)


def _pld_interval(releases: list[tuple[float, int, float]]) -> float:
    """The PLD grid: the composed privacy loss spans about 20 sqrt(sum k / z^2) (Gaussian-DP's mu); keep ~1e5 points."""
    mu = math.sqrt(sum(k / z**2 for z, k, _ in releases if z > 0 and k > 0)) if releases else 0.0
    return PLD_BASE_INTERVAL * max(1.0, mu)


def _fresh_accountant(accountant: str, releases: list[tuple[float, int, float]]):
    if accountant == "rdp":
        from dp_accounting.rdp import RdpAccountant

        return RdpAccountant()
    from dp_accounting.pld import PLDAccountant

    return PLDAccountant(value_discretization_interval=_pld_interval(releases))


def composed_gaussian_epsilon(
    releases: list[tuple[float, int, float]], delta: float, accountant: str = DEFAULT_ACCOUNTANT
) -> float:
    """eps at `delta` of every (noise_multiplier, compositions, sampling_rate) release composed; inf if one has z = 0."""
    _check_accountant(accountant)
    delta = _check_delta(delta)
    checked = [_check_release(*r) for r in releases]
    live = [r for r in checked if r[1] > 0]
    if not live:
        return 0.0
    if any(z == 0 for z, _, _ in live):
        return math.inf  # a release without noise is not private
    acct = _fresh_accountant(accountant, live)
    for z, k, q in live:
        acct.compose(gaussian_releases_event(z, k, q))
    return float(acct.get_epsilon(delta))


def gaussian_epsilon(
    noise_multiplier: float,
    delta: float,
    compositions: int = 1,
    sampling_rate: float = 1.0,
    accountant: str = DEFAULT_ACCOUNTANT,
) -> float:
    """eps at `delta` of `compositions` Gaussian releases of noise multiplier z (sampled at `sampling_rate`)."""
    return composed_gaussian_epsilon([(noise_multiplier, compositions, sampling_rate)], delta, accountant)


def gaussian_noise_multiplier(
    eps: float,
    delta: float,
    compositions: int = 1,
    sampling_rate: float = 1.0,
    accountant: str = DEFAULT_ACCOUNTANT,
    rtol: float = 1e-6,
) -> float:
    """The smallest noise multiplier z whose `compositions` releases are (eps, delta)-DP under `accountant`.

    Brent's method over z (dp_accounting.calibrate_dp_mechanism), bracketed below by the exact unsampled answer
    (k Gaussian releases of z are one of z / sqrt(k): Dong, Roth & Su 2019, Corollary 3.3; solved by Balle & Wang's
    Theorem 8 in dp_accounting.get_sigma_gaussian), which no accountant can beat without sampling; the result is within
    rtol * z of the optimum and never below it by more than that.
    """
    import dp_accounting
    from dp_accounting.mechanism_calibration import ExplicitBracketInterval

    _check_accountant(accountant)
    delta = _check_delta(delta)
    if not (isinstance(eps, (int, float)) and 0 < eps and math.isfinite(eps)):
        raise ValueError(f"eps must be > 0 and finite, got eps={eps!r}")
    _, k, q = _check_release(1.0, compositions, sampling_rate)
    if k == 0:
        return 0.0
    exact = float(dp_accounting.get_sigma_gaussian(eps, delta)) * math.sqrt(k)
    lo = exact * q / 2 if q < 1 else exact / 2  # sampling amplifies: below the unsampled answer
    hi = max(exact, 1e-12) * 1.01
    eps_at = lambda z: gaussian_epsilon(z, delta, k, q, accountant)  # noqa: E731
    while lo > 1e-9 and eps_at(lo) <= eps:
        lo /= 2
    for _ in range(60):
        if eps_at(hi) <= eps:
            break
        lo, hi = hi, hi * 2
    else:
        raise ValueError(f"no noise multiplier up to {hi:.3g} reaches eps={eps} at delta={delta} over {k} releases")
    z = dp_accounting.calibrate_dp_mechanism(
        lambda: _fresh_accountant(accountant, [(hi, k, q)]),
        lambda z: gaussian_releases_event(z, k, q),
        eps,
        delta,
        ExplicitBracketInterval(lo, hi),
        tol=rtol * hi,
    )
    z = float(z)
    # Brent's root sits within tol of the boundary on either side: step up until the budget holds
    while eps_at(z) > eps:
        z += rtol * hi
    return z
