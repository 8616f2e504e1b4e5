"""A regression release's prior and design: the unbiased programme is met at every config-valid (bins, eps) (the
solver retried at a wider margin), a design the solver cannot meet charges nothing of the randomizer, and of two
concurrent runs of one release both draw with the prior and design the store kept first.

Noise-free checks (exact channels and stored matrices); no statistical bound is needed."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import privacy.label.regression_mechanisms as mechanisms
from privacy.label.ledger.release_names import release_id
from privacy.label.ledger.store import LabelDPStore, dataset_id
from privacy.label.regression_mechanisms import channel_eps, grid_values, rr_on_bins_design, unbiased_design
from privacy.label.regression_prior import uniform_prior
from privacy.label.regression_release import draw_regression
from privacy.label.release_plans import RegressionSpec
from vfl.config.schema import LabelDPConfig
from vfl.data.task import Task
from vfl.labeldp.release import LabelDPRelease, LabelKey, training_labels

CLIP = (0.0, 40.0)


def test_the_unbiased_programme_at_48_bins_and_eps_7_9_is_met():
    # Prepare: the largest grid the config allows, just under the eps cap (HiGHS missed the ratio by < 1e-6 here)
    values = grid_values(*CLIP, 48)
    # Execute
    outputs, channel = unbiased_design(uniform_prior(48), values, 7.9)
    # Assert: eps-DP and unbiased
    assert channel_eps(channel) <= 7.9 + 1e-9
    assert np.max(np.abs(channel @ outputs - values)) <= 1e-6 * (CLIP[1] - CLIP[0])


def test_a_solution_that_misses_eps_is_solved_again_at_a_wider_margin(monkeypatch):
    # Prepare: the solver's first answer breaks the ratio constraints (a channel with a zero beside a positive entry)
    real, margins = mechanisms._solve_unbiased, []

    def first_misses(p, x, outs, e):
        margins.append(e)
        channel, kept = real(p, x, outs, e)
        if len(margins) == 1:
            channel = channel.copy()
            channel[0] = np.eye(1, channel.shape[1], int(np.argmax(channel[0])))[0]
        return channel, kept

    monkeypatch.setattr(mechanisms, "_solve_unbiased", first_misses)
    # Execute
    outputs, channel = unbiased_design(uniform_prior(8), grid_values(*CLIP, 8), 1.0)
    # Assert: a second, tighter solve, whose channel is eps-DP
    assert len(margins) == 2 and margins[1] < margins[0]
    assert channel_eps(channel) <= 1.0 + 1e-9


@pytest.mark.parametrize("prior", ["uniform", "dp_histogram"])
def test_a_design_the_solver_cannot_meet_charges_nothing_of_the_randomizer(tmp_path, monkeypatch, prior):
    # Prepare: a programme the solver fails
    import privacy.label.regression_release as regression

    def fails(*a, **k):
        raise ValueError("the unbiased randomizer's linear programme failed at eps=1.0: planted")

    monkeypatch.setattr(regression, "unbiased_design", fails)
    store = LabelDPStore(str(tmp_path / "store"))
    key = LabelKey(store.key(), store, dataset_id(hashlib.sha256(b"d").hexdigest()), {}, "d")
    cfg = LabelDPConfig(eps=1.0, mechanism="unbiased", clip=CLIP, bins=8, prior=prior)
    y = np.random.default_rng(0).uniform(*CLIP, 500)
    # Execute
    with pytest.raises(ValueError, match="planted"):
        training_labels(y, np.arange(500), LabelDPRelease.from_config(cfg, Task("regression")), key, real_valued=True)
    # Assert: the randomizer's release is not in the ledger (the DP histogram's, drawn before, is)
    ledger = tmp_path / "store" / "ledger.json"
    charged = [r["mechanism"] for r in json.loads(ledger.read_text())["releases"]] if ledger.exists() else []
    assert charged == ([] if prior == "uniform" else ["dp_histogram_prior"])


def test_a_run_that_loses_the_race_draws_with_the_prior_and_design_kept_first():
    # Prepare: another run of the same release keeps its prior and its design right after this run looked for them
    key = bytes(range(32))
    spec = RegressionSpec(CLIP, 16, "dp_histogram", 0.25)
    name = lambda m, p: release_id("race", "fp", m, p)  # noqa: E731
    plan = spec.plan("rr_on_bins", 2.0, name)
    prior_rel, design_rel = name(*plan[0]), name(*plan[1])
    other_prior = np.linspace(1.0, 2.0, 16) / np.linspace(1.0, 2.0, 16).sum()
    group, outputs = rr_on_bins_design(other_prior, grid_values(*CLIP, 16), 1.5)
    other = {prior_rel: other_prior, design_rel: np.column_stack([group, outputs[group]]).astype(np.float64)}
    stored: dict = {}

    def kept(release):
        got = stored.get(release)
        if got is None and release in other:
            stored[release] = other.pop(release)  # the other run keeps its matrix just after this look
        return got

    y = np.random.default_rng(1).normal(20, 5, 2000)
    # Execute
    drawn = draw_regression(
        spec,
        "rr_on_bins",
        2.0,
        plan,
        y,
        np.arange(2000),
        y[:0],
        np.arange(0),
        key,
        lambda pl: (name(*pl[0]), True, {}),
        kept=kept,
        keep=lambda release, matrix: stored.setdefault(release, matrix),  # the store keeps the first
        release_id_of=name,
    )
    # Assert: this run's labels come from the design kept first, not from the one it computed
    assert drawn.extra["bin_values"] == [round(float(v), 6) for v in outputs]
    assert set(np.unique(drawn.noisy)) <= set(outputs)
