"""A regression release's prior and design: the unbiased programme is met at every config-valid (bins, eps) (the
solver retried at a wider margin), and a design the solver cannot meet charges nothing of the randomizer.

Noise-free checks (exact channels and stored matrices); no statistical bound is needed."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import privacy.label.regression_mechanisms as mechanisms
from privacy.label.regression_mechanisms import channel_eps, grid_values, unbiased_design
from privacy.label.regression_prior import uniform_prior
from privacy.label.store import LabelDPStore, dataset_id
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
    import vfl.labeldp.regression as regression

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
