"""The maintained accountant (privacy/dp_accountant.py) and the FedAvg ledger built on it, against known values.

Deterministic: no randomness anywhere, so no false-failure bound applies. The reference values come from code that does
not go through dp_accounting: the analytic Gaussian mechanism of Balle & Wang 2018 (Theorem 8, Algorithm 1) in
privacy/federated/gaussian.py, and Mironov 2017's closed forms (Gaussian RDP alpha / (2 z^2), Proposition 7; additive
composition, Proposition 1; conversion, Proposition 3).
"""

from __future__ import annotations

import math

import pytest

from privacy.dp_accountant import (
    composed_gaussian_epsilon,
    gaussian_epsilon,
    gaussian_noise_multiplier,
)
from privacy.federated.accounting import PrivacyLedger
from privacy.federated.gaussian import analytic_gaussian_sigma, gaussian_delta


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_one_release_under_pld_matches_the_analytic_gaussian_mechanism(eps):
    # Prepare: Balle & Wang's smallest sigma for (eps, 1e-5) at sensitivity 1
    z = analytic_gaussian_sigma(eps, 1e-5)
    # Execute
    got = gaussian_epsilon(z, 1e-5, 1, accountant="pld")
    # Assert: pessimistic (never below the exact eps) and tight to the discretisation
    assert eps - 1e-6 <= got <= eps + 2e-3


@pytest.mark.parametrize("z, k", [(1.0, 1), (2.0, 10), (0.8, 50)])
def test_k_releases_under_pld_are_one_release_of_z_over_sqrt_k(z, k):
    # Prepare: k Gaussian releases of noise multiplier z are exactly one of z / sqrt(k) (Dong, Roth & Su 2019, Cor. 3.3)
    sigma_one = z / math.sqrt(k)
    # Execute
    eps = gaussian_epsilon(z, 1e-6, k, accountant="pld")
    # Assert: Balle & Wang's delta at the accountant's eps is within budget, and a slightly smaller eps is not
    assert gaussian_delta(eps, 1.0, sigma_one) <= 1e-6 * (1 + 1e-6)
    assert gaussian_delta(eps - 5e-3 * max(1.0, eps), 1.0, sigma_one) > 1e-6


@pytest.mark.parametrize("z, k", [(1.0, 1), (1.5, 20), (0.3, 100)])
def test_rdp_is_sound_and_no_looser_than_mironov_proposition_3(z, k):
    # Prepare: the exact eps (Balle & Wang at z / sqrt(k)) and Mironov's conversion over the accountant's orders
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    delta = 1e-5
    exact = gaussian_epsilon(z, delta, k, accountant="pld")
    mironov = min(k * a / (2 * z * z) + math.log(1 / delta) / (a - 1) for a in DEFAULT_RDP_ORDERS)
    # Execute
    rdp = gaussian_epsilon(z, delta, k, accountant="rdp")
    # Assert: an upper bound on the exact eps, at most Mironov's own bound (dp_accounting's conversion is tighter)
    assert exact - 1e-6 <= rdp <= mironov + 1e-9


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_twenty_calibrated_rounds_cost_far_less_than_their_summed_eps(accountant):
    # Prepare: DP_ENCRYPT's rounds, each calibrated to (1, 1e-5) by the analytic Gaussian mechanism
    z = analytic_gaussian_sigma(1.0, 1e-5)
    # Execute
    composed = gaussian_epsilon(z, 1e-5, 20, accountant=accountant)
    # Assert: basic composition charges (20, 2e-4); the accountant (at the smaller delta 1e-5) less than half the eps
    assert 1.0 < composed < 0.5 * 20


def test_eps_falls_with_noise_and_rises_with_releases_and_sampling_rate():
    # Execute
    by_z = [gaussian_epsilon(z, 1e-5, 10) for z in (0.5, 1.0, 2.0, 4.0)]
    by_k = [gaussian_epsilon(1.0, 1e-5, k) for k in (1, 10, 100, 1000)]
    by_q = [gaussian_epsilon(1.0, 1e-5, 100, q) for q in (0.01, 0.1, 0.5, 1.0)]
    # Assert
    assert by_z == sorted(by_z, reverse=True) and len(set(by_z)) == 4
    assert by_k == sorted(by_k) and len(set(by_k)) == 4
    assert by_q == sorted(by_q) and len(set(by_q)) == 4


def test_sampling_rate_one_is_the_unsampled_release():
    assert gaussian_epsilon(1.3, 1e-5, 30, 1.0) == gaussian_epsilon(1.3, 1e-5, 30)


def test_no_noise_is_not_private_and_no_release_costs_nothing():
    assert gaussian_epsilon(0.0, 1e-5, 3) == math.inf
    assert gaussian_epsilon(0.0, 1e-5, 0) == 0.0
    assert composed_gaussian_epsilon([], 1e-5) == 0.0


def test_composing_two_noise_levels_costs_more_than_either_alone():
    # Execute
    both = composed_gaussian_epsilon([(1.0, 10, 1.0), (2.0, 10, 1.0)], 1e-5)
    # Assert: and equals one release of the equivalent noise level (Gaussian RDP is k / z^2 times alpha / 2, so
    # 10 / 1 + 10 / 4 = 12.5 = 1 / z^2 for z = 1 / sqrt(12.5))
    assert both > gaussian_epsilon(1.0, 1e-5, 10) > gaussian_epsilon(2.0, 1e-5, 10)
    assert both == pytest.approx(gaussian_epsilon(1 / math.sqrt(12.5), 1e-5, 1), rel=1e-9)
    assert composed_gaussian_epsilon([(1.0, 10, 1.0), (1.0, 10, 1.0)], 1e-5) == pytest.approx(
        gaussian_epsilon(1.0, 1e-5, 20)
    )


@pytest.mark.parametrize(
    "accountant, k, q", [("rdp", 1, 1.0), ("rdp", 20, 1.0), ("rdp", 500, 0.02), ("pld", 1, 1.0), ("pld", 20, 1.0)]
)
def test_calibrated_noise_multiplier_is_the_smallest_within_budget(accountant, k, q):
    # Execute
    z = gaussian_noise_multiplier(2.0, 1e-5, k, q, accountant=accountant)
    # Assert: within budget, and 0.1% less noise is not
    assert gaussian_epsilon(z, 1e-5, k, q, accountant=accountant) <= 2.0
    assert gaussian_epsilon(z * 0.999, 1e-5, k, q, accountant=accountant) > 2.0


def test_calibrated_single_release_under_pld_is_balle_wang_sigma():
    # Execute
    z = gaussian_noise_multiplier(1.0, 1e-5, 1, accountant="pld")
    # Assert
    assert z == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5), rel=2e-3)


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: gaussian_epsilon(-1.0, 1e-5), "noise_multiplier must be >= 0, got noise_multiplier=-1.0"),
        (lambda: gaussian_epsilon(1.0, 0.0), "delta must be in (0, 1), got delta=0.0"),
        (lambda: gaussian_epsilon(1.0, 1e-5, 2.5), "compositions must be an integer >= 0, got compositions=2.5"),
        (lambda: gaussian_epsilon(1.0, 1e-5, 2, 0.0), "sampling_rate must be in (0, 1], got sampling_rate=0.0"),
        (lambda: gaussian_epsilon(1.0, 1e-5, accountant="moments"), "accountant must be one of rdp, pld"),
        (lambda: gaussian_noise_multiplier(0.0, 1e-5), "eps must be > 0 and finite, got eps=0.0"),
    ],
)
def test_bad_input_is_one_line_naming_the_value_and_domain(call, needle):
    with pytest.raises(ValueError) as e:
        call()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_ledger_reports_the_accountants_figure_beside_the_summed_one():
    # Prepare: 20 Gaussian rounds at (1, 1e-5) each, plus a pure-eps use in the same scope and one in another scope
    z = analytic_gaussian_sigma(1.0, 1e-5)
    ledger = PrivacyLedger()
    for _ in range(20):
        ledger.spend("gaussian", {"eps": 1.0, "delta": 1e-5}, noise_multiplier=z)
    ledger.spend("signds", {"eps": 0.5, "delta": 0.0})
    ledger.spend("laplace_eval", {"eps": 2.0, "delta": 0.0}, scope="per released output")
    # Execute
    totals = ledger.totals()
    # Assert: summed (20.5, 2e-4); the accountant composes the Gaussian rounds at 1e-5 and adds the pure eps on top
    t = totals["per client"]
    assert t["eps"] == pytest.approx(20.5) and t["delta"] == pytest.approx(2e-4)
    assert t["accountant"]["eps"] == pytest.approx(gaussian_epsilon(z, 1e-5, 20) + 0.5)
    assert t["accountant"]["delta"] == 1e-5 and t["accountant"]["gaussian_releases"] == 20
    assert t["accountant"]["eps"] < t["eps"] / 2
    assert "accountant" not in totals["per released output"]


def test_ledger_composes_a_run_level_claim_as_its_releases():
    # Prepare: NbAFL's shape: one claimed (eps, delta) made of T = 10 uplink releases of noise multiplier 2
    ledger = PrivacyLedger(accountant="rdp")
    ledger.spend(
        "nbafl", {"eps": 3.0, "delta": 1e-3}, scope="per client (whole run)", noise_multiplier=2.0, releases=10
    )
    # Execute
    t = ledger.totals()["per client (whole run)"]
    # Assert
    assert (t["eps"], t["delta"]) == (3.0, 1e-3)
    assert t["accountant"]["eps"] == pytest.approx(gaussian_epsilon(2.0, 1e-3, 10))
    assert t["accountant"]["gaussian_releases"] == 10
