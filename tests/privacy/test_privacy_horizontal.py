"""Horizontal mechanisms: exact where noise-free, statistical where noisy (5.5-sigma or Hoeffding
beta=1e-8 bounds; the module fails by chance with probability < 1e-6), eps-LDP of SignDS by exact
enumeration, and every domain error."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privacy.federated.gaussian import (
    GaussianParams,
    analytic_gaussian_sigma,
    clip_by_global_norm,
    gaussian_client,
    gaussian_delta,
)
from privacy.federated.laplace import laplace_noise_below, laplace_protect
from privacy.federated.magrr import MagRRServer, magrr_client_bit
from privacy.federated.nbafl import NbAFLParams, clip_weights, downlink_scale, nbafl_cost, uplink_scale
from privacy.federated.secure_aggregation import (
    MaskingClient,
    SecureAggregationError,
    aggregate_masked,
    decode_fixed,
    encode_fixed,
)
from privacy.federated.signds import (
    SignDSParams,
    choose_dim_out,
    expectations,
    optimal_threshold,
    selection_pmf,
    signds_aggregate,
    signds_client,
)
from privacy.label.randomized_response import debias_count, kary_rr
from tests.support.dp_stats import binomial_tolerance, hoeffding_slack

N = 200_000


# -- randomized response primitives ------------------------------------------------------------
def test_debias_count_inverts_the_expected_report_exactly():
    # Prepare: E[N_C] = P N_T + (1 - P)(N - N_T)
    n, n_true, eps = 1000.0, 300.0, 1.3
    p = math.exp(eps) / (1 + math.exp(eps))
    expected_reports = p * n_true + (1 - p) * (n - n_true)
    # Execute / Assert
    assert debias_count(expected_reports, n, eps) == pytest.approx(n_true, abs=1e-9)
    with pytest.raises(ValueError, match=r"eps must be in \[0.001, 50\], or inf for no noise, got eps=0.0"):
        debias_count(10, 20, 0.0)


def test_debiased_estimate_is_unbiased_on_randomized_bits():
    from privacy.label.randomized_response import binary_rr

    rng = np.random.default_rng(0)
    bits = (rng.random(N) < 0.3).astype(np.int64)
    est = debias_count(float(binary_rr(bits, 1.0, rng).sum()), N, 1.0)
    p = math.e / (1 + math.e)
    sd = math.sqrt(N * p * (1 - p)) / (2 * p - 1)
    assert abs(est - bits.sum()) < 5.5 * sd


def test_kary_rr_keep_rate():
    cls = np.random.default_rng(1).integers(0, 5, N)
    out = kary_rr(cls, 5, 1.0, np.random.default_rng(2))
    p1 = math.e / (4 + math.e)
    assert abs(np.mean(out == cls) - p1) < binomial_tolerance(N, p1)


# -- SignDS --------------------------------------------------------------------------------------
def _prob_of_output(J: tuple, S: set, d: int, k: int, h: int, eps: float, t: int) -> float:
    v_values, pmf = selection_pmf(d, k, h, eps, t)
    v = len(set(J) & S)
    p_v = dict(zip(v_values.tolist(), pmf.tolist())).get(v, 0.0)
    return p_v / (math.comb(k, v) * math.comb(d - k, h - v))


def test_signds_is_eps_ldp_by_exact_enumeration():
    # Prepare: d = 8, k = 2, h = 3: every output J and every pair of top-k sets
    d, k, h, eps = 8, 2, 3, 1.5
    t, _ = optimal_threshold(d, k, h, eps)
    outputs = list(itertools.combinations(range(d), h))
    sets = [set(s) for s in itertools.combinations(range(d), k)]
    # Execute
    probs = np.array([[_prob_of_output(J, S, d, k, h, eps, t) for J in outputs] for S in sets])
    # Assert: each row is a distribution; the worst ratio over J and pairs of S is <= e^eps
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    ratio = (probs[:, None, :] / probs[None, :, :]).max()
    assert ratio <= math.exp(eps) * (1 + 1e-9)
    assert ratio > math.exp(eps) * 0.999  # tight: the mechanism uses its whole budget


def test_signds_sampler_matches_the_enumerated_distribution():
    # Prepare: the sampler's output distribution over J for a fixed update (Hoeffding, beta = 1e-8 per J)
    d, k, h, eps = 8, 2, 3, 1.5
    update = np.array([5.0, 4.0, 0, 0, 0, 0, 0, 0])  # top-2 for sign +1 is {0, 1}; for -1 two of the zeros
    params = SignDSParams(sign_k=0.25, sign_eps=eps, sign_dim_out=h)
    rng = np.random.default_rng(3)
    n = 60_000
    # Execute
    counts: dict = {}
    plus = 0
    for _ in range(n):
        u = signds_client(update, params, rng)
        if u.sign == 1:
            plus += 1
            key = tuple(sorted(u.indices.tolist()))
            counts[key] = counts.get(key, 0) + 1
    # Assert
    t, _ = optimal_threshold(d, k, h, eps)
    slack = hoeffding_slack(plus, 1e-8)
    for J in itertools.combinations(range(d), h):
        want = _prob_of_output(J, {0, 1}, d, k, h, eps, t)
        assert abs(counts.get(J, 0) / plus - want) < slack
    assert abs(plus / n - 0.5) < binomial_tolerance(n, 0.5)


def test_threshold_is_where_the_expectation_stops_increasing_and_dim_out_meets_the_ratio():
    # Prepare
    d, k, eps = 10_000, 100, 10.0
    # Execute
    h, t = choose_dim_out(d, k, eps, 0.6)
    ts, e = expectations(d, k, h, eps)
    _, e_next = optimal_threshold(d, k, h + 1, eps)
    # Assert
    assert all(e[i + 1] > e[i] for i in range(t)) and e[t + 1] <= e[t]
    assert e[t] / h >= 0.6 and e_next / (h + 1) < 0.6


def test_signds_upload_is_h_indices_and_one_sign():
    rng = np.random.default_rng(4)
    update = rng.standard_normal(266_084)  # LeNet-sized
    u = signds_client(update, SignDSParams(sign_k=0.01, sign_eps=100, sign_thr_ratio=0.6), rng)
    assert u.upload_numbers == u.indices.size + 1 < 1000
    assert np.unique(u.indices).size == u.indices.size


def test_signds_server_average_is_exact():
    agg = signds_aggregate([(np.array([0, 2]), 1), (np.array([2, 3]), -1)], d=5, global_lr=0.5)
    np.testing.assert_allclose(agg, [0.25, 0, 0, -0.25, 0])


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"sign_k": 0.3}, "sign_k must be in (0, 0.25]"),
        ({"sign_k": 0}, "sign_k"),
        ({"sign_eps": 0}, "sign_eps must be in (0, 100]"),
        ({"sign_eps": 101}, "sign_eps"),
        ({"sign_thr_ratio": 0.4}, "sign_thr_ratio must be in [0.5, 1]"),
        ({"sign_global_lr": 0}, "sign_global_lr must be > 0"),
        ({"sign_dim_out": 51}, "sign_dim_out must be an integer in [0, 50]"),
        ({"sign_dim_out": 1.5}, "sign_dim_out"),
    ],
)
def test_signds_domain_errors(kw, needle):
    with pytest.raises(ValueError) as e:
        SignDSParams(**kw)
    assert needle in str(e.value)


# -- MagRR -----------------------------------------------------------------------------------------
def test_magrr_grows_then_contracts_around_the_true_magnitude():
    # Prepare: noise-free bits (eps_rr = inf) and every client at r = 1e-2
    server = MagRRServer(eps_rr=math.inf)
    rng = np.random.default_rng(5)
    # Execute
    for _ in range(40):
        bits = [magrr_client_bit(1e-2, server.r_est, server.phase, math.inf, rng) for _ in range(10)]
        server.update(bits)
    # Assert: 1e-5 * 5^4 = 6.25e-3 is the first estimate with 2 r_est > r; contraction then halves r_est while r < r_est
    growth = [h for h in server.history if h["phase"] == "growth"]
    assert server.history[3]["r_est"] == pytest.approx(1e-5 * 5**4)
    assert server.phase == "contraction" and len(growth) >= 4
    assert 5e-3 <= server.r_est <= 2e-2
    assert server.global_lr(10) == pytest.approx(2 * server.r_est * 10)


def test_magrr_bit_is_randomized_response_with_eps_rr():
    rng = np.random.default_rng(6)
    bits = np.array([magrr_client_bit(1.0, 10.0, "contraction", 5.0, rng) for _ in range(20_000)])
    rho = 1 / (1 + math.exp(5.0))
    assert abs(np.mean(bits == 0) - rho) < binomial_tolerance(20_000, rho)


# -- Gaussian ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps, delta", [(0.1, 1e-5), (1.0, 1e-5), (5.0, 1e-3), (50.0, 0.01)])
def test_analytic_sigma_meets_delta_exactly_and_beats_the_classical_bound(eps, delta):
    # Execute
    sigma = analytic_gaussian_sigma(eps, delta, 2.0)
    # Assert: Theorem 8's delta at that sigma equals the target; a smaller sigma breaks it
    assert gaussian_delta(eps, 2.0, sigma) == pytest.approx(delta, rel=1e-6)
    assert gaussian_delta(eps, 2.0, sigma * 0.99) > delta
    if eps <= 1:
        assert sigma < math.sqrt(2 * math.log(1.25 / delta)) * 2.0 / eps


def test_clipping_is_exact_and_noise_has_the_calibrated_sd():
    # Prepare
    x = np.full(10_000, 0.1)  # norm 10
    params = GaussianParams(dp_eps=5.0, dp_delta=1e-3, dp_norm_clip=1.0)
    # Execute
    clipped, norm = clip_by_global_norm(x, 1.0)
    noisy = gaussian_client(x, params, np.random.default_rng(7))
    # Assert
    assert norm == pytest.approx(10.0) and np.linalg.norm(clipped) == pytest.approx(1.0)
    np.testing.assert_array_equal(clip_by_global_norm(x, 100.0)[0], x)
    resid = noisy - clipped
    # sample sd of 10k normals: relative sd 1/sqrt(2n) = 0.7%; 5.5 sigma = 3.9%
    assert abs(resid.std() / params.sigma - 1) < 0.039


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"dp_eps": 0}, "dp_eps must be > 0"),
        ({"dp_delta": 1}, "dp_delta must be in (0, 1)"),
        ({"dp_norm_clip": -1}, "dp_norm_clip must be > 0"),
    ],
)
def test_gaussian_domain_errors(kw, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        GaussianParams(**kw)


# -- Laplace -----------------------------------------------------------------------------------------
def test_laplace_eval_seed_example_gives_noise_below_1e_5_with_90_percent():
    # Execute / Assert: the calculation the docs reproduce
    assert laplace_noise_below(230260, 1e-5) == pytest.approx(0.9, abs=1e-5)
    noise = laplace_protect(np.zeros(N), 230260, np.random.default_rng(8))
    p = 0.9
    assert abs(np.mean(np.abs(noise) < 1e-5) - p) < binomial_tolerance(N, p)
    np.testing.assert_array_equal(laplace_protect(np.ones(3), math.inf, np.random.default_rng(0)), np.ones(3))
    with pytest.raises(ValueError, match="> 0"):
        laplace_protect(np.ones(3), 0.0, np.random.default_rng(0))


# -- NbAFL -------------------------------------------------------------------------------------------
def test_nbafl_scales_follow_the_formulas():
    # Prepare
    p = NbAFLParams(epsilon=10.0, delta=0.01, w_clip=1.0, constant=30.0)
    # Execute / Assert
    assert uplink_scale(p, rounds=20, n_train=1000) == pytest.approx(1.0 * 20 * 2 * 30 / (1000 * 10))
    assert downlink_scale(p, rounds=20, num_clients=100, sampled=10, min_n_train=500) == 0.0  # 20 <= sqrt(100)*10
    want = 2 * 30 * 1.0 * math.sqrt(200**2 - 10**2 * 100) / (500 * 100 * 10)
    assert downlink_scale(p, rounds=200, num_clients=100, sampled=10, min_n_train=500) == pytest.approx(want)
    assert NbAFLParams(delta=0.01).c == pytest.approx(math.sqrt(2 * math.log(125)))
    w = np.full(100, 1.0)
    assert np.linalg.norm(clip_weights(w, 2.0)) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        NbAFLParams(epsilon=0)


# -- secure aggregation ---------------------------------------------------------------------------------
def _clients(n):
    clients = [MaskingClient(i) for i in range(n)]
    return clients, {c.client_id: c.public for c in clients}


def test_masks_cancel_exactly_in_fixed_point():
    # Prepare
    rng = np.random.default_rng(9)
    clients, pubs = _clients(6)
    updates = [rng.standard_normal(5000) * 3 for _ in clients]
    # Execute
    masked = {c.client_id: c.mask(u, pubs, round_id=7, n_clients=6) for c, u in zip(clients, updates)}
    total = aggregate_masked(masked, list(pubs))
    # Assert: bit-exact against the sum of the fixed-point encodings, within quantisation of the real sum
    exact = decode_fixed(np.sum(np.stack([encode_fixed(u) for u in updates]), axis=0, dtype=np.uint64))
    np.testing.assert_array_equal(total, exact)
    assert np.abs(total - np.sum(updates, axis=0)).max() <= 6 * 2.0**-25


def test_a_single_masked_upload_hides_the_update():
    rng = np.random.default_rng(10)
    clients, pubs = _clients(3)
    u = rng.standard_normal(20_000)
    y = decode_fixed(clients[0].mask(u, pubs, 1, 3))
    assert abs(np.corrcoef(u, y)[0, 1]) < 0.05  # masks are uniform mod 2^64


def test_dropped_client_is_detected_and_the_round_refused():
    clients, pubs = _clients(4)
    masked = {c.client_id: c.mask(np.ones(10), pubs, 1, 4) for c in clients[:3]}
    with pytest.raises(SecureAggregationError, match=r"clients \[3\] masked their updates but did not upload"):
        aggregate_masked(masked, list(pubs))


def test_fixed_point_overflow_is_refused():
    with pytest.raises(SecureAggregationError, match="finite"):
        encode_fixed(np.array([1e20]), n_clients=10)


def test_nbafl_charges_its_claim_only_where_the_classical_gaussian_mechanism_holds():
    # Prepare: epsilon 10 over 20 rounds (0.5 a round), epsilon 1000 over 20 (50 a round), and a constant below c
    from privacy.dp_accountant import gaussian_epsilon

    ok, far = NbAFLParams(epsilon=10.0, delta=0.01), NbAFLParams(epsilon=1000.0, delta=0.01)
    low_c = NbAFLParams(epsilon=10.0, delta=0.01, constant=1.0)
    # Execute
    costs = [nbafl_cost(p, 20) for p in (ok, far, low_c)]
    # Assert: the claim where it holds; elsewhere the accountant's composition of the 20 uplinks, which at epsilon
    # 1000 is well above the claim (the void claim understated the cost)
    assert costs[0] == {"eps": 10.0, "delta": 0.01}
    assert costs[1] == {"eps": gaussian_epsilon(20 * far.c / 1000.0, 0.01, 20), "delta": 0.01, "claim_void": True}
    assert costs[1]["eps"] > 2000
    assert costs[2]["claim_void"] and costs[2]["eps"] == gaussian_epsilon(20 * 1.0 / 10.0, 0.01, 20)
