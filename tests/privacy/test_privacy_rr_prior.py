"""RRWithPrior follows Ghazi et al. 2021 Algorithm 2: exact weights, eps-DP on neighbouring labels,
collapse detection; the forward-corrected loss recovers clean probabilities. Statistical checks use
Hoeffding bounds at beta = 1e-8 per bin (module false failure < 1e-6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from privacy.label.rr_prior import rr_with_prior, top_k_weights
from tests.support.dp_stats import dp_histogram_violations
from vfl.labeldp.losses import forward_corrected_bce

N = 200_000


def test_weights_follow_the_paper_formula_with_k_counting_classes():
    # Prepare
    prior = np.array([[0.1, 0.5, 0.4]])
    eps = 1.0
    e = math.exp(eps)
    # Execute
    w = top_k_weights(prior, eps)[0]
    # Assert: k = 1, 2, 3 classes in the set
    np.testing.assert_allclose(w, [e / e * 0.5, e / (e + 1) * 0.9, e / (e + 2) * 1.0])


def test_output_stays_in_the_prior_top_k_set():
    # Prepare: k* = 2 for this prior at eps = 1 (w = [0.5, 0.658, 0.576])
    prior = np.tile([0.1, 0.5, 0.4], (N, 1))
    labels = np.zeros(N, np.int64)  # the true class is outside the top-2 set
    # Execute
    out, k = rr_with_prior(labels, prior, 1.0, np.random.default_rng(0))
    # Assert: uniform over {1, 2}
    assert (k == 2).all() and set(np.unique(out)) == {1, 2}
    assert abs(np.mean(out == 1) - 0.5) < 0.01


@pytest.mark.parametrize("pair", [(1, 2), (0, 1)])
def test_dp_histogram_on_neighbouring_labels_with_a_fixed_prior(pair):
    # Prepare
    prior = np.tile([0.1, 0.5, 0.4], (N, 1))
    rng = np.random.default_rng(1)
    # Execute
    a, _ = rr_with_prior(np.full(N, pair[0]), prior, 1.0, rng)
    b, _ = rr_with_prior(np.full(N, pair[1]), prior, 1.0, rng)
    # Assert
    assert dp_histogram_violations(a, b, 1.0, bins=3) == []


def test_binary_prior_collapses_to_argmax_at_small_eps():
    # Prepare: top prior mass 0.9 > e/(1+e) = 0.73
    prior = np.tile([0.1, 0.9], (1000, 1))
    labels = np.random.default_rng(2).integers(0, 2, 1000)
    # Execute
    out, k = rr_with_prior(labels, prior, 1.0, np.random.default_rng(3))
    # Assert
    assert (k == 1).all() and (out == 1).all()


def test_infinite_eps_keeps_every_label():
    labels = np.random.default_rng(4).integers(0, 3, 100)
    out, _ = rr_with_prior(labels, np.tile([0.0, 0.0, 1.0], (100, 1)), math.inf)
    np.testing.assert_array_equal(out, labels)


def test_bad_prior_is_rejected():
    with pytest.raises(ValueError, match="probability vectors"):
        rr_with_prior(np.array([0]), np.array([[0.5, 0.6]]), 1.0, np.random.default_rng(0))


def test_forward_correction_is_plain_bce_without_noise_and_recovers_clean_probability():
    # Prepare
    logits = torch.linspace(-3, 3, 7)
    y = torch.tensor([0, 1, 1, 0, 1, 0, 1], dtype=torch.float32)
    # Execute / Assert: rho = 0 is exactly BCE
    torch.testing.assert_close(
        forward_corrected_bce(logits, y, 0.0), F.binary_cross_entropy_with_logits(logits, y), rtol=1e-5, atol=1e-6
    )
    # a constant model fitted on noisy labels of a p = 0.2 source predicts ~0.2 with correction, ~0.34 without
    rho, p = 1 / (1 + math.e), 0.2
    rng = np.random.default_rng(5)
    clean = rng.random(N) < p
    noisy = torch.from_numpy(np.where(rng.random(N) < rho, ~clean, clean).astype(np.float32))
    z = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([z], max_iter=100)

    def closure():
        opt.zero_grad()
        loss = forward_corrected_bce(z.expand(N), noisy, rho)
        loss.backward()
        return loss

    opt.step(closure)
    # sd of the estimate ~ sqrt(q(1-q)/N)/(1-2 rho) = 0.0023; 0.015 is > 6 sd
    assert abs(torch.sigmoid(z).item() - p) < 0.015
