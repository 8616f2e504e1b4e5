"""The regression label-DP release: what `privacy.label_dp` draws for a real-valued label, release by release.

A regression release is one or two ledger entries, planned from the leader's config alone
(privacy/label/release_plans.py: RegressionSpec.plan): the DP histogram's release where the prior is `dp_histogram`,
then the randomizer's; each is recorded before it is drawn (the `record` of `draw_regression`: a ReleaseLedger's,
privacy/label/ledger/recording.py). Each randomizer is a pure function of the leader's keyed uniforms
(privacy/label/regression_draws.py); the training and validation labels are drawn in the same release. Where the
mechanism is unbiased (laplace, unbiased) the noise variance E[Var(y~ | y)] is known, and model selection subtracts it
from the noisy validation MSE (privacy/label/noisy_metrics.py: noisy_regression_metrics); RR-on-Bins is biased and
selects on the plain noisy RMSE. Training (vfl/labeldp/release.py) and the standalone API
(privacy/label/regression_label_dp.py) both draw through `draw_regression`, name their releases with `ReleaseNames`
(privacy/label/ledger/recording.py) and keep a release's matrices with `store_matrices`, so one release gives one set of
noisy labels whichever of the two draws it. The draw's report keeps `LEADER_ONLY` statistics of the true labels (not
DP): they stay in the leader's own metrics and never leave it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privacy.label.regression_draws import dp_histogram_once, laplace_once, rr_on_bins_once, unbiased_once
from privacy.label.regression_mechanisms import (
    channel_noise_variance,
    grid_values,
    laplace_noise_variance,
    rr_on_bins_design,
    unbiased_design,
)
from privacy.label.regression_prior import file_prior, uniform_prior
from privacy.label.release_plans import RegressionSpec

LEADER_ONLY = ("noise_rmse", "noise_mae")  # the report's statistics of the true labels (not DP): the leader's only


def store_matrices(store) -> tuple[Callable, Callable]:
    """(kept, keep) of draw_regression on the leader's store: a release's prior or design, read and kept there."""
    kept = lambda rel: None if (got := store.stored_prior(rel)) is None else got[1]
    keep = lambda rel, matrix: store.keep_prior(rel, np.arange(len(matrix)), matrix)
    return kept, keep


@dataclass(frozen=True)
class Drawn:
    """What one mechanism of the registry (vfl/labeldp/release.py) drew: the release id, the ledger's name and
    parameters, the noisy labels, the report's extras, and for an unbiased regression mechanism its noise variance."""

    release: str
    mechanism: str
    params: dict
    noisy: np.ndarray
    valid_noisy: np.ndarray
    extra: dict
    new_release: bool
    summary: dict
    noise_variance: float | None = None


def _kept_first(kept, keep, release: str, matrix: np.ndarray) -> np.ndarray:
    """Keep a freshly computed matrix for the release and return the one the store holds: the store keeps the first
    (LabelDPStore.keep_prior never replaces a row), so of two concurrent runs of one release both use the first's."""
    keep(release, matrix)
    stored = kept(release)
    return matrix if stored is None else stored


def _design(mechanism: str, prior: np.ndarray, values: np.ndarray, eps: float) -> np.ndarray:
    """The randomizer's design as the store keeps it: rr_on_bins, per grid point its bin and the bin's value;
    unbiased, the outputs, then the channel's rows."""
    if mechanism == "rr_on_bins":
        group, outputs = rr_on_bins_design(prior, values, eps)
        return np.column_stack([group, outputs[group]]).astype(np.float64)
    return np.vstack(unbiased_design(prior, values, eps))


def _sampler(mechanism: str, spec: RegressionSpec, design, prior, values, eps_rand: float, key: bytes, rel: str, extra):
    """(draw(labels, ids), the noise variance or None when biased, the outputs) of the randomizer's release `rel`
    under its design; what the mechanism is goes into `extra`."""
    lo, hi = spec.clip
    outputs = None
    if mechanism == "laplace":
        draw = lambda y, i: laplace_once(y, i, lo, hi, eps_rand, key, rel)
        variance = laplace_noise_variance(lo, hi, eps_rand)
        extra["paper"] = "discrete Laplace on the clipped label (the papers' baseline)"
    elif mechanism == "rr_on_bins":
        group = design[:, 0].astype(np.int64)
        outputs = design[np.unique(group, return_index=True)[1], 1]
        draw = lambda y, i: rr_on_bins_once(y, i, lo, hi, group, outputs, eps_rand, key, rel)
        variance = None  # biased: no debiased RMSE
        extra.update(bin_values=[round(float(v), 6) for v in outputs], paper="Ghazi et al. 2023, Algorithm 1")
    else:
        outputs, channel = design[0], design[1:]
        draw = lambda y, i: unbiased_once(y, i, lo, hi, outputs, channel, key, rel)
        variance = channel_noise_variance(prior, values, outputs, channel)
        extra.update(outputs=int(outputs.size), paper="Badanidiyuru et al. 2023, Algorithm 1")
    return draw, variance, outputs


def draw_regression(
    spec: RegressionSpec,
    mechanism: str,
    eps: float,
    plan: list[tuple[str, dict]],
    labels: np.ndarray,
    ids: np.ndarray,
    valid_labels: np.ndarray,
    valid_ids: np.ndarray,
    key: bytes,
    record: Callable[[list[tuple[str, dict]]], tuple[str, bool, dict]],
    kept: Callable[[str], np.ndarray | None] = lambda release: None,
    keep: Callable[[str, np.ndarray], None] = lambda release, matrix: None,
    release_id_of: Callable[[str, dict], str] | None = None,
) -> Drawn:
    """Record the plan's releases (the prior's first) and draw the noisy training and validation labels.

    kept / keep read and write the store's matrix of a release (the leader's: LabelDPStore.stored_prior and
    keep_prior). The DP histogram is kept under its release and the design (bins and values, or the unbiased
    channel) under the randomizer's, the first time each is computed, and read back on every later run and right
    after keeping (a concurrent run's, kept first, wins): a release id then always means one prior and one channel,
    whatever ids a later PSI yields or whichever scipy solves the programme (two histograms drawn with the same noise
    on different label sets would reveal their difference). The design is computed before the randomizer's release
    is recorded, so a programme the solver cannot meet is refused with nothing of it charged; `release_id_of` (the
    id a plan entry records) finds a kept design before that."""
    lo, hi = spec.clip
    labels, valid_labels = np.asarray(labels, np.float64), np.asarray(valid_labels, np.float64)
    eps_prior, eps_rand = spec.split(mechanism, eps)
    extra: dict = {"labels": "regression", "clip": [lo, hi], "debias": False}
    values = grid_values(lo, hi, spec.bins)
    prior = design = fresh = None
    if mechanism != "laplace":
        if spec.prior == "dp_histogram":
            # the prior's release is recorded before its noise is drawn (the budget counts the randomizer too)
            prior_rel, _, _ = record(plan)
            prior = kept(prior_rel)
            extra["prior_reused"] = prior is not None
            if prior is None:
                y_all = np.concatenate([labels, valid_labels])
                prior, _ = dp_histogram_once(y_all, lo, hi, spec.bins, eps_prior, key, prior_rel)
                prior = _kept_first(kept, keep, prior_rel, prior)
            extra.update(prior_release=prior_rel, prior_eps=eps_prior)
            plan = plan[1:]
        else:
            prior = uniform_prior(spec.bins) if spec.prior == "uniform" else file_prior(spec.prior, lo, hi, spec.bins)
            extra["prior_eps"] = 0.0
        extra.update(prior=spec.prior_name(), bins=spec.bins, randomizer_eps=eps_rand)
        design = kept(release_id_of(*plan[0])) if release_id_of is not None else None
        extra["design_reused"] = design is not None
        if design is None:
            fresh = _design(mechanism, prior, values, eps_rand)
    rel, is_new, summary = record(plan)
    if fresh is not None:
        design = _kept_first(kept, keep, rel, fresh)
    ledger_name, params = plan[0]
    draw, variance, outputs = _sampler(mechanism, spec, design, prior, values, eps_rand, key, rel, extra)
    # the delta of sampling from 53-bit uniforms (regression_mechanisms.py: Granularity), the prior's included
    extra["sampling_delta"] = spec.sampling_delta(mechanism, eps, None if mechanism == "laplace" else outputs.size)
    noisy, valid_noisy = draw(labels, ids), draw(valid_labels, valid_ids)
    err = noisy - np.clip(labels, lo, hi)
    extra.update(
        unbiased=variance is not None,
        noise_variance=variance,
        noise_rmse=float(np.sqrt(np.mean(err * err))) if err.size else 0.0,
        noise_mae=float(np.mean(np.abs(err))) if err.size else 0.0,
    )
    return Drawn(rel, ledger_name, params, noisy, valid_noisy, extra, is_new, summary, variance)
