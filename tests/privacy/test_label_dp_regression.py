"""Label DP for real-valued labels: the three mechanisms (discrete Laplace, RR-on-Bins, the optimal unbiased
randomizer), the DP-histogram prior, the release rules (keyed, replayed at no cost, a change is a new release the
ledger charges, the prior charged beside the randomizer) and the debiased validation RMSE.

Statistical tests are seeded; each states its false-failure bound: z = 5.5 standard deviations (two-sided
P < 4e-8 per comparison under the normal approximation) or Hoeffding slack at beta = 1e-8 per histogram cell
(tests/support/dp_stats.py). Noise-free paths (eps = inf) are compared bit for bit."""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest

from privacy.keyed_random import keyed_uniforms
from privacy.label.ledger.store import LabelDPStore, dataset_id
from privacy.label.noisy_metrics import noisy_regression_metrics
from privacy.label.regression_mechanisms import (
    channel_eps,
    channel_noise_variance,
    grid_values,
    laplace_label,
    laplace_noise_variance,
    nearest_index,
    rr_on_bins,
    rr_on_bins_channel,
    rr_on_bins_design,
    rr_on_bins_loss,
    unbiased_design,
    unbiased_label,
)
from privacy.label.regression_prior import dp_histogram_prior, file_prior, geometric_noise, label_histogram
from tests.support.dp_stats import dp_histogram_violations
from tests.support.leader_config import _leader
from vfl.config.schema import ConfigError, LabelDPConfig, parse_config
from vfl.data.task import LABEL_DP_MECHANISMS, Task
from vfl.labeldp.release import MECHANISMS, LabelDPRelease, LabelKey, training_labels

Z = 5.5


def _key(tmp_path, name="x") -> LabelKey:
    store = LabelDPStore(str(tmp_path / "store"))
    return LabelKey(store.key(), store, dataset_id(hashlib.sha256(name.encode()).hexdigest()), {}, name)


def _labels(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(20, 5, n), np.arange(n, dtype=np.int64), rng.normal(20, 5, 400), np.arange(n, n + 400)


def _draw(tmp_path, key=None, **cfg):
    cfg = {"eps": 1.0, "mechanism": "rr_on_bins", "clip": (0.0, 40.0), **cfg}
    rel = LabelDPRelease.from_config(LabelDPConfig(**cfg), Task("regression"))
    y, ids, vy, vids = _labels()
    return training_labels(y, ids, rel, key or _key(tmp_path), None, vy, vids, real_valued=True)


# -- noise-free paths, exactly -------------------------------------------------------------------------------------------
def test_eps_inf_returns_the_clipped_label_bit_for_bit_for_every_mechanism():
    # Prepare: labels inside and outside the clip
    y = np.array([-3.0, 0.0, 1.234567891, 7.5, 10.0, 12.0])
    u = np.linspace(0.01, 0.99, y.size)
    values = grid_values(0, 10, 8)
    group, outputs = rr_on_bins_design(np.ones(8), values, math.inf)
    outs, channel = unbiased_design(np.ones(8), values, math.inf)
    # Execute
    got = [
        laplace_label(y, 0, 10, math.inf, u, u, u),
        rr_on_bins(y, 0, 10, group, outputs, math.inf, u),
        unbiased_label(y, 0, 10, outs, channel, u, u),
    ]
    # Assert
    for g in got:
        assert np.array_equal(g, np.clip(y, 0, 10))


# -- RR-on-Bins -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.3, 1.0, 2.0, 4.0])
def test_rr_on_bins_dynamic_programme_finds_the_best_of_every_contiguous_partition(eps):
    # Prepare: a random prior over 7 grid points; every partition into contiguous bins enumerated
    rng = np.random.default_rng(int(eps * 10))
    prior, values = rng.random(7), np.sort(rng.uniform(0, 10, 7))
    # Execute
    group, outputs = rr_on_bins_design(prior, values, eps)
    starts = [0] + [i for i in range(1, 7) if group[i] != group[i - 1]]
    brute = min(
        rr_on_bins_loss(prior, values, eps, [0, *cut])
        for r in range(7)
        for cut in itertools.combinations(range(1, 7), r)
    )
    # Assert: optimal, contiguous and monotone, and each output is the closed form
    assert rr_on_bins_loss(prior, values, eps, starts) == pytest.approx(brute, rel=1e-12)
    assert np.all(np.diff(group) >= 0) and np.all(np.diff(outputs) > 0)
    p, e = prior / prior.sum(), math.exp(eps)
    for j, v in enumerate(outputs):
        inside = group == j
        want = (p @ values + (e - 1) * p[inside] @ values[inside]) / (1 + (e - 1) * p[inside].sum())
        assert v == pytest.approx(want, rel=1e-12)


def test_rr_on_bins_is_eps_dp_exactly_and_its_samples_follow_the_channel_and_a_planted_leak_fails():
    # Prepare
    eps, n = 1.0, 200_000
    values = grid_values(0, 40, 16)
    group, outputs = rr_on_bins_design(np.exp(-((values - 20) ** 2) / 50), values, eps)
    rng = np.random.default_rng(1)
    # Execute: the lowest and highest label (neighbouring datasets differ in this one label)
    lo_out = rr_on_bins(np.zeros(n), 0, 40, group, outputs, eps, rng.random(n))
    hi_out = rr_on_bins(np.full(n, 40.0), 0, 40, group, outputs, eps, rng.random(n))
    leak = rr_on_bins(np.full(n, 40.0), 0, 40, group, outputs, eps + 2.0, rng.random(n))  # claims eps, spends 3
    # Assert: the channel's ratio is exactly e^eps; the empirical check passes (false failure <= 2 m 1e-8) and
    # catches the leak
    m = outputs.size
    assert m >= 2 and channel_eps(rr_on_bins_channel(group, m, eps)) == pytest.approx(eps, abs=1e-12)
    idx = lambda out: np.searchsorted(outputs, out)
    assert dp_histogram_violations(idx(lo_out), idx(hi_out), eps, m) == []
    assert dp_histogram_violations(idx(lo_out), idx(leak), eps, m) != []


# -- the optimal unbiased randomizer --------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0])
def test_unbiased_randomizer_is_eps_dp_unbiased_and_beats_laplace(eps):
    # Prepare
    values = grid_values(0, 40, 16)
    prior = np.exp(-((values - 20) ** 2) / 50)
    # Execute
    outputs, channel = unbiased_design(prior, values, eps)
    # Assert: the constraints of the programme hold on the channel it returns; its variance is below Laplace's
    assert channel_eps(channel) <= eps + 1e-9
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(channel @ outputs, values, atol=1e-6 * 40)
    assert channel_noise_variance(prior, values, outputs, channel) < laplace_noise_variance(0, 40, eps)


def test_unbiased_samples_average_to_the_label_and_laplace_samples_too_with_the_stated_variance():
    # Prepare: 100k draws at labels between grid points (the randomized rounding keeps them unbiased)
    eps, n = 1.0, 100_000
    values = grid_values(0, 40, 16)
    outputs, channel = unbiased_design(np.ones(16), values, eps)
    rng = np.random.default_rng(2)
    for y in (0.0, 13.7, 40.0):
        # Execute
        ub = unbiased_label(np.full(n, y), 0, 40, outputs, channel, rng.random(n), rng.random(n))
        lp = laplace_label(np.full(n, y), 0, 40, eps, rng.random(n), rng.random(n), rng.random(n))
        # Assert: means within Z standard errors; Laplace's variance within Z standard errors of its formula
        assert abs(ub.mean() - y) < Z * ub.std() / math.sqrt(n)
        assert abs(lp.mean() - y) < Z * lp.std() / math.sqrt(n)
        v = laplace_noise_variance(0, 40, eps)
        se_var = math.sqrt((np.mean((lp - y) ** 4) - v * v) / n)
        assert abs(np.var(lp) - v) < Z * se_var + (40 / 4096) ** 2


def test_laplace_passes_the_empirical_dp_check_and_a_planted_leak_fails():
    # Prepare: outputs grouped in 12 coarse cells (post-processing keeps eps-DP)
    eps, n = 1.0, 200_000
    rng = np.random.default_rng(3)
    cells = lambda out: np.clip(((out + 80) / 200 * 12).astype(np.int64), 0, 11)
    # Execute
    lo = laplace_label(np.zeros(n), 0, 40, eps, *rng.random((3, n)))
    hi = laplace_label(np.full(n, 40.0), 0, 40, eps, *rng.random((3, n)))
    leak = laplace_label(np.full(n, 40.0), 0, 40, 4 * eps, *rng.random((3, n)))
    # Assert: false failure <= 24e-8
    assert dp_histogram_violations(cells(lo), cells(hi), eps, 12) == []
    assert dp_histogram_violations(cells(lo), cells(leak), eps, 12) != []


def test_the_sampled_mechanisms_state_a_delta_covering_what_53_bit_uniforms_never_draw(tmp_path):
    # Prepare: the largest geometric the Laplace sampler can draw at eps 1 (from the largest uniform, 1 - 2^-53)
    from privacy.label.regression_mechanisms import laplace_alpha, sampling_delta

    log_a = math.log(laplace_alpha(1.0))
    top = math.floor(math.log1p(-(1.0 - 2.0**-53)) / log_a)
    # Execute
    delta, never_drawn = sampling_delta(1.0), math.exp(log_a * (top + 1))  # the exact tail beyond it
    report = _draw(tmp_path, mechanism="rr_on_bins", prior="uniform", bins=16).report
    # Assert: a positive delta, at least the mass never drawn; the release reports its own
    assert 0 < never_drawn <= delta < 1e-9 and sampling_delta(math.inf) == 0.0
    assert report["sampling_delta"] == sampling_delta(1.0, len(report["bin_values"])) > 0


# -- the prior ----------------------------------------------------------------------------------------------------------
def test_dp_histogram_is_exact_at_eps_inf_and_its_noise_has_the_geometric_variance():
    # Prepare
    y = np.array([0.0, 0.1, 5.0, 9.9, 10.0, 10.0, 42.0])
    rng = np.random.default_rng(4)
    # Execute
    prior, counts = dp_histogram_prior(y, 0, 10, 3, math.inf, np.zeros(3), np.zeros(3))
    noise = geometric_noise(1.0, 2, rng.random(200_000), rng.random(200_000))
    # Assert: nearest grid points 0, 5, 10; the noise is centred with var 2a/(1-a)^2, a = e^-0.5
    assert counts.tolist() == [2, 1, 4] and prior.tolist() == pytest.approx([2 / 7, 1 / 7, 4 / 7])
    assert np.array_equal(label_histogram(y, 0, 10, 3), counts)
    a = math.exp(-0.5)
    var = 2 * a / (1 - a) ** 2
    assert abs(noise.mean()) < Z * math.sqrt(var / noise.size)
    assert abs(noise.var() - var) < Z * math.sqrt((np.mean(noise.astype(float) ** 4) - var**2) / noise.size)


def _moved_label_event(histogram, n: int = 4000, eps: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """1[noisy count of grid point 3 above its count without the moved label, and of grid point 12 at most its count]
    over n draws of `histogram` on neighbouring label sets: D (one label at grid point 3) and D' (moved to 12)."""
    grid = grid_values(0, 40, 16)
    base = np.repeat(grid, 10)
    d, d2 = np.append(base, grid[3]), np.append(base, grid[12])
    c3, c12 = 10, 10  # counts of grid points 3 and 12 without the moved label
    key = bytes(range(32))
    out = []
    for labels in (d, d2):
        counts = np.array([histogram(labels, 0, 40, 16, eps, key, f"prior-{i}")[1][[3, 12]] for i in range(n)])
        out.append(((counts[:, 0] > c3) & (counts[:, 1] <= c12)).astype(np.int64))
    return out[0], out[1]


def test_the_dp_histogram_prior_passes_the_empirical_dp_check_and_planted_leaks_fail():
    """On the event {count 3 moved up, count 12 not}, the ratio of the two label sets' probabilities is exactly e^eps
    for geometric noise at sensitivity 2 (alpha = e^(-eps/2) per count, each factor e^(eps/2)): the check is tight.
    An exact histogram (no noise) or noise for sensitivity 1 (e^(2 eps) there) fails it. False failure <= 4e-8."""
    # Prepare
    from privacy.label.regression_draws import dp_histogram_once

    def sensitivity_one(labels, lo, hi, bins, eps, key, release):  # the planted leak: half the noise it needs
        u = [keyed_uniforms(key, release, p, np.arange(bins)) for p in ("regression/prior-a", "regression/prior-b")]
        return None, label_histogram(labels, lo, hi, bins) + geometric_noise(eps, 1, *u)

    def exact(labels, lo, hi, bins, eps, key, release):
        return None, label_histogram(labels, lo, hi, bins)

    # Execute
    keyed = _moved_label_event(dp_histogram_once)
    leaks = [_moved_label_event(leak) for leak in (sensitivity_one, exact)]
    # Assert
    assert dp_histogram_violations(*keyed, 1.0, 2) == []
    for leak in leaks:
        assert dp_histogram_violations(*leak, 1.0, 2) != []


def test_a_prior_file_is_read_at_the_grid_and_a_bad_line_is_named(tmp_path):
    # Prepare
    good, bad = tmp_path / "prior.csv", tmp_path / "bad.csv"
    good.write_text("value,weight\n0,1\n4.9,3\n10,0\n")
    bad.write_text("value,weight\n1,2\n3,-1\n")
    # Execute
    prior = file_prior(str(good), 0, 10, 3)
    # Assert
    assert prior.tolist() == [0.25, 0.75, 0.0]
    with pytest.raises(ValueError, match=r"bad.csv:3: '3,-1' is not `value,weight`"):
        file_prior(str(bad), 0, 10, 3)
    assert nearest_index(np.array([-1.0, 2.4, 2.6, 11.0]), 0, 10, 3).tolist() == [0, 0, 1, 2]


# -- release rules --------------------------------------------------------------------------------------------------------
def test_the_same_release_replays_at_no_cost_and_any_change_is_a_new_independent_release(tmp_path):
    # Prepare
    key = _key(tmp_path)
    first = _draw(tmp_path, key)
    # Execute
    again = _draw(tmp_path, key)
    changed = {
        "eps": _draw(tmp_path, key, eps=2.0),
        "bins": _draw(tmp_path, key, bins=16),
        "clip": _draw(tmp_path, key, clip=(0.0, 50.0)),
        "mechanism": _draw(tmp_path, key, mechanism="laplace"),
    }
    # Assert: bit-identical replay, nothing charged; each change a new release with independent draws
    assert np.array_equal(again.labels, first.labels) and np.array_equal(again.valid, first.valid)
    assert (
        again.report["new_release"] is False and again.report["dataset_total_eps"] == first.report["dataset_total_eps"]
    )
    y = _labels()[0]
    for name, c in changed.items():
        assert c.report["new_release"] is True and c.release != first.release, name
    lap = changed["mechanism"]
    # Laplace noise is independent of the earlier release's: its correlation with that release's noise ~ 0
    # (|r| < Z / sqrt(n))
    r = np.corrcoef(lap.labels - y, first.labels - y)[0, 1]
    assert abs(r) < Z / math.sqrt(y.size)
    # 1 (the first) + 2 (eps) + 1 (bins) + 1 (clip) + 1 (laplace): each with its own prior where it has one
    assert lap.report["dataset_total_eps"] == pytest.approx(6.0)


def test_the_dp_histogram_prior_is_charged_beside_the_randomizer_and_shared_across_mechanisms(tmp_path):
    # Prepare
    key = _key(tmp_path)
    # Execute
    bins = _draw(tmp_path, key, eps=2.0, prior_eps_fraction=0.25)
    unbiased = _draw(tmp_path, key, eps=2.0, prior_eps_fraction=0.25, mechanism="unbiased")
    uniform = _draw(tmp_path, key, eps=2.0, prior="uniform")
    # Assert: the ledger holds the prior (eps 0.5) and each randomizer (1.5; uniform: 2.0); unbiased reuses the prior
    entries = key.store.ledger()["releases"]
    by_name = sorted((r["mechanism"], r["eps"]) for r in entries)
    assert by_name == [("dp_histogram_prior", 0.5), ("rr_on_bins", 1.5), ("rr_on_bins", 2.0), ("unbiased", 1.5)]
    assert bins.report["prior_release"] == unbiased.report["prior_release"]
    assert bins.report["dataset_total_eps"] == 2.0 and unbiased.report["dataset_total_eps"] == 3.5
    assert uniform.report["dataset_total_eps"] == 5.5 and uniform.report["prior_eps"] == 0.0
    # validation labels are randomized in the same release (RR-on-Bins outputs are bin values), unbiased knows its
    # noise variance and RR-on-Bins (biased) has none
    assert set(np.round(np.unique(bins.valid), 6)) <= set(bins.report["bin_values"])
    assert bins.valid_noise_var is None and unbiased.valid_noise_var > 0


def test_an_eps_split_outside_the_label_eps_domain_is_refused_before_anything_is_charged(tmp_path):
    # Prepare: eps 0.01 with 0.95 of it on the prior leaves the randomizer 0.0005, under the domain's 0.001
    from vfl.config.label_dp_rules import PRIOR_EPS_FRACTION

    cfg = LabelDPConfig(eps=0.01, mechanism="rr_on_bins", clip=(0.0, 40.0), prior_eps_fraction=0.95)
    # Execute
    with pytest.raises(ValueError) as e:
        training_labels(*_labels()[:2], LabelDPRelease.from_config(cfg, Task("regression")), _key(tmp_path), None)
    # Assert: one line naming both shares; the ledger never written; the rule's default is the config's
    assert "\n" not in str(e.value) and "prior eps 0.0095 and the randomizer eps 0.0005" in str(e.value)
    assert not (tmp_path / "store" / "ledger.json").exists()
    assert PRIOR_EPS_FRACTION == LabelDPConfig.model_fields["prior_eps_fraction"].default


def test_the_registry_serves_every_task_and_agrees_with_the_config_domain():
    # Assert: every (task, mechanism) the config accepts has a registry entry, and nothing else
    accepted = {(kind, m) for kind, ms in LABEL_DP_MECHANISMS.items() for m in ms}
    assert accepted == set(MECHANISMS)
    assert {k for k, m in MECHANISMS.items() if m.real_valued} == {
        ("regression", m) for m in ("laplace", "rr_on_bins", "unbiased")
    }


@pytest.mark.parametrize(
    "task, label_dp, message",
    [
        ("regression", {"eps": 1.0, "mechanism": "rr"}, "mechanism rr randomizes class labels; train.task: regression"),
        ("regression", {"eps": 1.0}, "privacy.label_dp.clip is required for mechanism rr_on_bins"),
        ("binary", {"eps": 1.0, "mechanism": "rr_on_bins"}, "mechanism rr_on_bins is for real-valued labels"),
        ("regression", {"eps": 1.0, "mechanism": "laplace"}, "privacy.label_dp.clip is required for mechanism laplace"),
        ("regression", {"eps": 1.0, "mechanism": "unbiased", "clip": [0, 1], "bins": 64}, "at most 48"),
        ("regression", {"eps": 1.0, "mechanism": "rr_on_bins", "clip": [5, 1]}, "lo < hi, got [5, 1]"),
        ("regression", {"eps": 1.0, "mechanism": "laplace", "clip": [0, math.inf]}, "finite numbers lo < hi"),
        ("regression", {"eps": 1.0, "mechanism": "rr_on_bins", "clip": [0, 1], "prior": "nope.csv"}, "neither"),
        ("binary", {"eps": 1.0, "clip": [0, 1]}, "privacy.label_dp.clip applies to train.task: regression only"),
        (
            "regression",
            {"eps": 0.01, "mechanism": "rr_on_bins", "clip": [0, 1], "prior_eps_fraction": 0.95},
            "prior eps 0.0095 and the randomizer eps 0.0005; each must be in [0.001, 50]",
        ),
        ("regression", {"eps": 0.005, "mechanism": "unbiased", "clip": [0, 1]}, "prior eps 0.0005 and the randomizer"),
    ],
)
def test_a_wrong_label_dp_combination_is_a_one_line_config_error(task, label_dp, message):
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(_leader(train={"task": task}, privacy={"label_dp": label_dp}))
    # Assert
    assert "1 problem(s)" in str(e.value) and message in str(e.value)


def test_debiased_validation_rmse_matches_the_true_rmse_under_laplace_noise():
    # Prepare: predictions with true RMSE 2 on 200k labels; Laplace noise at eps 4 on [0, 40]
    rng = np.random.default_rng(5)
    n, eps = 200_000, 4.0
    y = rng.uniform(0, 40, n)
    pred = y + rng.normal(0, 2.0, n)
    noisy = laplace_label(y, 0, 40, eps, *rng.random((3, n)))
    # Execute
    plain = noisy_regression_metrics(noisy, pred, None)
    debiased = noisy_regression_metrics(noisy, pred, laplace_noise_variance(0, 40, eps))
    # Assert: the noisy RMSE is far off; the debiased one is within Z standard errors of the truth (se of
    # mean((f - y~)^2) by the delta method: sd / sqrt(n) / (2 rmse))
    true_rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
    se = float(np.std((pred - noisy) ** 2)) / math.sqrt(n) / (2 * true_rmse)
    assert plain["rmse"] > 3 * true_rmse
    assert abs(debiased["rmse"] - true_rmse) < Z * se


@pytest.mark.parametrize("mechanism", ["rr_on_bins", "unbiased"])
def test_a_release_keeps_its_prior_and_design_so_a_later_run_draws_the_same_labels(tmp_path, monkeypatch, mechanism):
    # Prepare: the first run keeps the DP histogram and the design in the store
    key = _key(tmp_path)
    first = _draw(tmp_path, key, mechanism=mechanism)
    # Execute: a later run where recomputing either would give something else (another scipy, other PSI ids)
    import privacy.label.regression_release as regression

    def refuse(*args, **kwargs):
        raise AssertionError("the kept prior and design must be read back, not recomputed")

    for name in ("dp_histogram_once", "rr_on_bins_design", "unbiased_design"):
        monkeypatch.setattr(regression, name, refuse)
    again = _draw(tmp_path, key, mechanism=mechanism)
    # Assert
    assert np.array_equal(again.labels, first.labels) and np.array_equal(again.valid, first.valid)
    assert again.report["prior_reused"] and again.report["design_reused"] and not first.report["design_reused"]


def test_the_training_loop_selects_on_the_debiased_noisy_validation_rmse_when_the_leader_sets_the_variance():
    # Prepare: the loop as the leader builds it under regression label DP (valid_eps set, then the noise variance)
    from vfl.config.schema import TrainConfig
    from vfl.training.loop import TrainingLoop

    rng = np.random.default_rng(6)
    y, y_test = rng.uniform(0, 40, 5000), rng.uniform(0, 40, 500)
    noisy = laplace_label(y, 0, 40, 4.0, *rng.random((3, y.size)))
    pred = {"valid": y + rng.normal(0, 2.0, y.size), "test": y_test + 1.0}
    train = TrainConfig(task="regression", early_stopping={"patience": 3})
    loops = []
    for variance in (None, laplace_noise_variance(0, 40, 4.0)):
        loop = TrainingLoop(train, 100, y_test, lambda *a, **k: None, noisy, 4.0, Task("regression"))
        loop.valid_noise_var = variance
        # Execute
        loop._evaluate(0, lambda split: pred[split], None, 0.0, 1.0, 10)
        loops.append(loop.history[-1])
    # Assert: the selection reads the noisy labels, debiased once the variance is set; test metrics use the truth
    plain, debiased = (entry["valid"]["rmse"] for entry in loops)
    assert plain == noisy_regression_metrics(noisy, pred["valid"], None)["rmse"]
    assert debiased == noisy_regression_metrics(noisy, pred["valid"], laplace_noise_variance(0, 40, 4.0))["rmse"]
    assert debiased < plain / 3 and loops[1]["test_rmse"] == pytest.approx(1.0)
