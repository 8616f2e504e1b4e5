"""Embedding DP's mechanism and accountant (privacy/embedding_dp.py); the release path is tests/session/test_cut_release.py.

Statistical checks are seeded; each states its false-failure bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privacy.embedding_dp import (
    calibrate_noise_multiplier,
    clip_rows,
    clip_vjp,
    epsilon_of,
    noise_std,
    noised_cut,
    os_entropy_generator,
    swamp_warning,
)


def test_clipping_leaves_short_rows_bit_for_bit_and_scales_long_rows_to_the_clip():
    # Prepare
    cut = torch.tensor([[0.3, 0.4], [3.0, 4.0], [0.0, 0.0]])
    # Execute
    out = clip_rows(cut, 1.0)
    # Assert
    assert torch.equal(out[0], cut[0]) and torch.equal(out[2], cut[2])
    assert torch.allclose(out[1], torch.tensor([0.6, 0.8]))


def test_zero_noise_releases_the_clipped_cut_exactly():
    cut = torch.randn(50, 4, generator=torch.Generator().manual_seed(0))
    out = noised_cut(cut, 2.0, 0.0, torch.Generator().manual_seed(1))
    assert torch.equal(out, clip_rows(cut, 2.0))


def test_the_noise_has_the_calibrated_std():
    """20k x 8 draws: the sample sd of N(0, s^2) has relative sd 1/sqrt(2 * 160k) = 0.0018; a 1% tolerance is 5.6
    sd (false failure < 1e-7). Power: a std off by 2% fails."""
    # Prepare
    cut = torch.zeros(20_000, 8)
    # Execute
    out = noised_cut(cut, 1.0, 0.7, torch.Generator().manual_seed(5))
    # Assert
    assert abs(float(out.std()) / 0.7 - 1) < 0.01
    assert abs(float(out.std()) / (0.7 * 1.02) - 1) > 0.01


def test_the_gradient_through_the_noised_release_is_the_clippings_vector_jacobian_product():
    # Prepare: one row inside the clip, one outside
    cut = torch.tensor([[0.1, 0.2], [3.0, 4.0]], requires_grad=True)
    grad = torch.tensor([[1.0, -1.0], [0.5, 2.0]])
    # Execute
    got = clip_vjp(cut, grad, 1.0)
    (want,) = torch.autograd.grad(clip_rows(cut, 1.0), cut, grad)
    # Assert: the identity inside, the projection's Jacobian (C/||x||)(I - x x^T/||x||^2) outside
    assert torch.equal(got[0], grad[0])
    x = cut.detach()[1]
    proj = (1.0 / x.norm()) * (torch.eye(2) - torch.outer(x, x) / x.norm() ** 2)
    assert torch.allclose(got[1], proj @ grad[1], atol=1e-6)
    assert torch.allclose(got, want)


def test_the_calibrated_multiplier_spends_eps_and_a_smaller_one_overspends():
    # Execute
    z = calibrate_noise_multiplier(1.0, 1e-5, 10)
    # Assert: within eps, and 1% less noise is over it (the bisection is tight)
    assert epsilon_of(z, 10, 1e-5) <= 1.0
    assert epsilon_of(z * 0.99, 10, 1e-5) > 1.0


def test_more_releases_need_more_noise_as_rdp_composes():
    z1, z10, z100 = (calibrate_noise_multiplier(4.0, 1e-5, r) for r in (1, 10, 100))
    assert z1 < z10 < z100
    # RDP of R Gaussian releases of z equals one release of z / sqrt(R) (Mironov 2017 Prop. 1 and 7)
    assert epsilon_of(z100, 100, 1e-5) == pytest.approx(epsilon_of(z100 / 10, 1, 1e-5), rel=1e-6)


def test_the_one_release_gaussian_matches_the_classical_bound_order_of_magnitude():
    # Dwork & Roth Thm A.1: z = sqrt(2 ln(1.25/delta)) / eps is (eps, delta)-DP for eps < 1; RDP is within 2x of it
    classical = math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    z = calibrate_noise_multiplier(0.5, 1e-5, 1)
    assert 0.5 * classical < z <= 1.05 * classical


@pytest.mark.parametrize("bad", [{"eps": 0.0}, {"eps": -1.0}, {"delta": 0.0}, {"delta": 1.0}, {"releases": 0}])
def test_calibration_refuses_values_outside_the_domain_naming_them(bad):
    args = {"eps": 1.0, "delta": 1e-5, "releases": 3, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        calibrate_noise_multiplier(**args)


def test_a_noise_that_swamps_the_signal_is_warned_about_with_numbers():
    assert swamp_warning(noise_std(0.1, 1.0), 1.0, 16) is None
    text = swamp_warning(noise_std(5.0, 1.0), 1.0, 16)
    assert "40" in text and "cut_dim 16" in text


def test_os_entropy_generators_draw_differently():
    a = torch.randn(8, generator=os_entropy_generator())
    b = torch.randn(8, generator=os_entropy_generator())
    assert not torch.equal(a, b)


def test_the_config_refuses_embedding_dp_on_the_leader_and_requires_eps():
    from vfl.config.role_rules import role_problems

    leader = {"role": "leader", "network": {"bind": "tcp://127.0.0.1:5000"}, "privacy": {"embedding_dp": {"eps": 1}}}
    follower = {"role": "follower", "network": {"connect": "tcp://127.0.0.1:5000"}, "privacy": {"embedding_dp": {}}}
    assert any("privacy.embedding_dp is set on a follower only" in p for p in role_problems(leader, ".*", 512, 8.0))
    assert any("privacy.embedding_dp.eps is required" in p for p in role_problems(follower, ".*", 512, 8.0))


def test_the_attack_bound_is_the_optimal_tests_auc_on_simulated_releases():
    """The likelihood-ratio test on R = 3 simulated sends of a value moved by the full sensitivity reaches the bound's
    AUC: 20k pairs, |AUC - bound| < 0.02 (the AUC's sd is < 0.003 here: fails with probability < 1e-9); a planted
    bound for 4x the sends (what averaging them away would buy) is far above the measured AUC (power)."""
    from privacy.embedding_dp import attack_bounds
    from privacy.rank_metrics import roc_auc

    # Prepare
    rng = np.random.default_rng(3)
    z, releases, n = calibrate_noise_multiplier(4.0, 1e-5, 3), 3, 20_000
    sigma = z * 2.0  # sensitivity 2 (clip 1): the value is 0 or 2 along one axis
    # Execute: the optimal test sums the sends along the shift
    zero = rng.normal(0.0, sigma, (n, releases)).sum(axis=1)
    moved = rng.normal(2.0, sigma, (n, releases)).sum(axis=1)
    auc = roc_auc(np.r_[np.zeros(n), np.ones(n)], np.r_[zero, moved])
    # Assert
    bound = attack_bounds(z, releases)
    assert abs(auc - bound["auc"]) < 0.02 and abs(bound["auc"] - 0.729) < 0.001
    assert attack_bounds(z, 4 * releases)["auc"] > auc + 0.05
