"""LabelDP flips and keeps at the stated rates, satisfies eps-DP on neighbouring labels, is exact
at eps = inf, and rejects bad input naming the value. Statistical checks use 5.5-sigma binomial
bounds (false failure < 4e-8 each) or Hoeffding bounds at beta = 1e-8 per bin; the whole module
fails by chance with probability < 3e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privacy import LabelDP, flip_probability, keep_probability
from tests.support.dp_stats import binomial_tolerance, dp_histogram_violations

N = 200_000


@pytest.mark.parametrize("eps", [0.001, 0.5, 1.0, 2.0, 4.0])
def test_binary_flip_rate_matches_one_over_one_plus_e_eps(eps):
    # Prepare
    labels = np.random.default_rng(1).integers(0, 2, N)
    # Execute
    noisy = LabelDP(eps)(labels, generator=np.random.default_rng(2), insecure_seed=True)
    # Assert
    rho = 1 / (1 + math.exp(eps))
    assert abs(np.mean(noisy != labels) - rho) < binomial_tolerance(N, rho)


@pytest.mark.parametrize("eps, k", [(0.001, 4), (1.0, 4), (2.0, 10), (1.0, 2)])
def test_one_hot_keep_and_move_rates(eps, k):
    # Prepare
    cls = np.random.default_rng(3).integers(0, k, N)
    onehot = np.eye(k, dtype=np.float32)[cls]
    # Execute
    out = LabelDP(eps)(onehot, generator=np.random.default_rng(4), insecure_seed=True)
    new = out.argmax(axis=1)
    # Assert: keep rate p1, and each other class gets p2 = 1/(k-1+e^eps)
    p1 = math.exp(eps) / (k - 1 + math.exp(eps))
    assert abs(np.mean(new == cls) - p1) < binomial_tolerance(N, p1)
    moved_by = (new - cls) % k
    p2 = 1 / (k - 1 + math.exp(eps))
    for shift in range(1, k):
        assert abs(np.mean(moved_by == shift) - p2) < binomial_tolerance(N, p2)
    assert out.dtype == np.float32 and (out.sum(axis=1) == 1).all()


def test_torch_input_keeps_type_shape_dtype_and_device():
    # Prepare
    y = torch.tensor([[0.0], [1.0], [1.0]], dtype=torch.float64)
    oh = torch.tensor([[0, 1, 0], [1, 0, 0]], dtype=torch.int32)
    # Execute
    a = LabelDP(1.0)(y, generator=torch.Generator().manual_seed(0), insecure_seed=True)
    b = LabelDP(1.0)(oh, generator=np.random.default_rng(5), insecure_seed=True)
    # Assert
    assert isinstance(a, torch.Tensor) and a.shape == (3, 1) and a.dtype == torch.float64 and a.device == y.device
    assert isinstance(b, torch.Tensor) and b.shape == (2, 3) and b.dtype == torch.int32 and (b.sum(1) == 1).all()


def test_eps_infinity_is_exact_and_the_smallest_eps_is_near_uniform():
    # Prepare
    labels = np.random.default_rng(6).integers(0, 2, N).astype(np.int8)
    onehot = torch.eye(3)[torch.from_numpy(np.random.default_rng(7).integers(0, 3, 1000))]
    # Execute
    exact = LabelDP(math.inf)(labels)
    exact_t = LabelDP(float("inf"))(onehot)
    uniform = LabelDP(0.001)(np.zeros(N, np.int64), generator=np.random.default_rng(8), insecure_seed=True)
    # Assert
    np.testing.assert_array_equal(exact, labels)
    assert exact.dtype == np.int8 and torch.equal(exact_t, onehot)
    assert abs(uniform.mean() - 0.5) < binomial_tolerance(N, 0.5)
    assert flip_probability(math.inf) == 0.0 and keep_probability(math.inf, 5) == 1.0
    assert keep_probability(50.0, 3) == 1.0 and 0 < flip_probability(50.0) < 2e-21  # the largest eps: no overflow


def test_same_generator_seed_reproduces_the_output_and_no_generator_never_repeats():
    # Prepare
    labels = np.random.default_rng(9).integers(0, 2, 1000)
    # Execute
    a = LabelDP(1.0)(labels, generator=np.random.default_rng(42), insecure_seed=True)
    b = LabelDP(1.0)(labels, generator=np.random.default_rng(42), insecure_seed=True)
    c = LabelDP(1.0)(labels, generator=42, insecure_seed=True)
    d = LabelDP(1.0)(labels, generator=torch.Generator().manual_seed(42), insecure_seed=True)
    os_a, os_b = LabelDP(1.0)(labels), LabelDP(1.0)(labels)
    # Assert: the opted-in Generator or seed replays; OS entropy is another key every call
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, LabelDP(1.0)(labels, generator=42, insecure_seed=True))
    assert d.shape == a.shape and not np.array_equal(os_a, os_b)


def test_a_seed_or_a_generator_is_refused_without_the_insecure_opt_in_and_a_store_warning_is_shown(tmp_path):
    # Prepare
    labels = np.array([0, 1, 1, 0])
    # Execute / Assert: a seed others may know replays the flips (tests/privacy/test_regression_label_dp.py shows the attack)
    with pytest.raises(ValueError, match=r"generator=7: a seed others can know voids the DP guarantee.*ids=") as e:
        LabelDP(1.0)(labels, generator=7)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="generator must be a numpy Generator or a torch Generator"):
        LabelDP(1.0)(labels, generator="x")
    for gen in (np.random.default_rng(7), torch.Generator(), torch.Generator().manual_seed(7)):
        with pytest.raises(ValueError, match=r"generator=(Generator): a seed others can know voids the DP guarantee"):
            LabelDP(1.0)(labels, generator=gen)
    dp = LabelDP(1.0, dataset="clicks", store_dir=str(tmp_path / "store"))
    with pytest.warns(UserWarning, match="created a new key store"):
        dp(labels, ids=np.arange(4))
    assert len(dp.last_release["warnings"]) == 1


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_dp_histogram_on_neighbouring_binary_labels(eps):
    # Prepare: the same mechanism on label 0 and on label 1 (neighbouring datasets of one record)
    rng = np.random.default_rng(10)
    # Execute
    out0 = LabelDP(eps)(np.zeros(N, np.int64), generator=rng, insecure_seed=True)
    out1 = LabelDP(eps)(np.ones(N, np.int64), generator=rng, insecure_seed=True)
    # Assert
    assert dp_histogram_violations(out0, out1, eps, bins=2) == []


def test_dp_histogram_on_neighbouring_one_hot_labels():
    rng = np.random.default_rng(11)
    a = LabelDP(1.0)(np.tile(np.eye(4)[0], (N, 1)), generator=rng, insecure_seed=True).argmax(1)
    b = LabelDP(1.0)(np.tile(np.eye(4)[1], (N, 1)), generator=rng, insecure_seed=True).argmax(1)
    assert dp_histogram_violations(a, b, 1.0, bins=4) == []


def test_dp_histogram_test_has_power_against_a_miscalibrated_mechanism():
    # Prepare: a mechanism that claims eps but flips with 1/(1+e^(2 eps)) is only 2eps-DP
    eps = 1.0
    rng = np.random.default_rng(12)
    rho_wrong = 1 / (1 + math.exp(2 * eps))
    # Execute
    out0 = (rng.random(N) < rho_wrong).astype(np.int64)
    out1 = 1 - (rng.random(N) < rho_wrong).astype(np.int64)
    # Assert
    assert dp_histogram_violations(out0, out1, eps, bins=2) != []


@pytest.mark.parametrize(
    "eps, exc, needle",
    [
        (True, ValueError, "eps must be a real number in [0.001, 50], or inf for no noise, got bool True"),
        ("1.0", ValueError, "got str '1.0'"),
        (-1.0, ValueError, "eps must be in [0.001, 50], or inf for no noise, got eps=-1.0"),
        (float("nan"), ValueError, "got eps=nan"),
        (0.0, ValueError, "eps must be in [0.001, 50], or inf for no noise, got eps=0.0"),
        (-0.0, ValueError, "got eps=-0.0"),
        (1e-300, ValueError, "got eps=1e-300"),
        (51.0, ValueError, "got eps=51.0"),
        (1000.0, ValueError, "got eps=1000.0"),
    ],
)
def test_bad_eps_raises_quoting_the_value(eps, exc, needle):
    with pytest.raises(exc) as e:
        LabelDP(eps)
    assert needle in str(e.value)


@pytest.mark.parametrize(
    "labels, needle",
    [
        (np.array([0, 1, 2, 1]), "row 2 is 2"),
        (np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0]]), "row 1 is [1, 1, 0]"),
        (np.array([[1, 0, 0], [0, 0, 0]]), "row 1 is [0, 0, 0]"),
        (np.array([[0.5, 0.5], [1, 0]]), "row 0"),
        (np.zeros((2, 2, 2)), "ndim=3"),
        (np.zeros((3, 0)), "K >= 2"),
    ],
)
def test_bad_labels_raise_naming_the_first_bad_row(labels, needle):
    with pytest.raises(ValueError) as e:
        LabelDP(1.0)(labels)
    assert needle in str(e.value)


def test_non_array_labels_raise_type_error():
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        LabelDP(1.0)([0, 1])
