"""The regression label-DP release: what `privacy.label_dp` means for a real-valued label, as releases and draws.

A regression release is one or two ledger entries (privacy/label/ledger/store.py), known from the leader's config alone:
* `prior: dp_histogram` (with rr_on_bins or unbiased): first the DP histogram of the labels ("dp_histogram_prior",
  eps x prior_eps_fraction, named by eps, clip and bins only, so rr_on_bins and unbiased at the same eps share it),
  then the randomizer at the rest of eps, named by the prior's release id. Both are charged: together eps (basic
  composition; Ghazi et al. 2023 split eps the same way).
* `prior: uniform` or a file (named by its sha256), and `laplace` (no prior): one release at the whole eps.
Each randomizer is a pure function of the leader's keyed uniforms (privacy/label/regression_draws.py); the training
and validation labels are drawn in the same release. Where the mechanism is unbiased (laplace, unbiased) the noise
variance E[Var(y~ | y)] is known, and model selection subtracts it from the noisy validation MSE
(privacy/label/noisy_metrics.py: noisy_regression_metrics); RR-on-Bins is biased and selects on the plain noisy RMSE.
Training (vfl/labeldp/release.py) and the standalone API (privacy/label/regression_label_dp.py) both draw through
`draw_regression`, name their releases with `ReleaseNames` and keep a release's matrices with `store_matrices`, so
one release gives one set of noisy labels whichever of the two draws it. The draw's report keeps `LEADER_ONLY`
statistics of the true labels (not DP): they stay in the leader's own metrics and never leave it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privacy.domains import eps_split_problem
from privacy.durable_files import file_sha256
from privacy.label.ledger.release_names import release_id
from privacy.label.ledger.store import Release
from privacy.label.regression_draws import dp_histogram_once, laplace_once, rr_on_bins_once, unbiased_once
from privacy.label.regression_mechanisms import (
    LAPLACE_STEPS,
    UNBIASED_MAX_EPS,
    channel_noise_variance,
    grid_values,
    laplace_alpha,
    laplace_noise_variance,
    rr_on_bins_design,
    sampling_delta,
    unbiased_design,
)
from privacy.label.regression_prior import file_prior, histogram_sampling_delta, uniform_prior

PRIOR_RELEASE = "dp_histogram_prior"  # the ledger's name of the prior's release
LEADER_ONLY = ("noise_rmse", "noise_mae")  # the report's statistics of the true labels (not DP): the leader's only


@dataclass(frozen=True)
class ReleaseNames:
    """How a labelled dataset's releases are named: (dataset id, key fingerprint, mechanism, parameters with the
    label set they randomize), so other labels are another release (privacy/label/ledger/release_names.py)."""

    dataset: str
    fingerprint: str
    label_set: str

    def named(self, params: dict) -> dict:
        return {**params, "label_set": self.label_set}

    def id_of(self, mechanism: str, params: dict) -> str:
        return release_id(self.dataset, self.fingerprint, mechanism, self.named(params))

    def plan(self, entries: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
        """A mechanism's plan with every entry's parameters named by the label set."""
        return [(m, self.named(p)) for m, p in entries]

    def release(self, mechanism: str, params: dict, rows: int, eps: float) -> Release:
        """The ledger's entry of a plan entry (eps: the entry's own, a split one's share)."""
        params = self.named(params)
        return Release(self.id_of(mechanism, params), self.dataset, mechanism, float(eps), params, rows)


def store_matrices(store) -> tuple[Callable, Callable]:
    """(kept, keep) of draw_regression on the leader's store: a release's prior or design, read and kept there."""
    kept = lambda rel: None if (got := store.stored_prior(rel)) is None else got[1]
    keep = lambda rel, matrix: store.keep_prior(rel, np.arange(len(matrix)), matrix)
    return kept, keep


@dataclass(frozen=True)
class RegressionSpec:
    """A regression release's numbers: the clip, the grid, the prior's source and its share of eps."""

    clip: tuple[float, float]
    bins: int
    prior: str  # dp_histogram | uniform | a value,weight CSV
    prior_eps_fraction: float

    @classmethod
    def of(cls, label_dp, task_clip: tuple[float, float] | None) -> RegressionSpec:
        """From privacy.label_dp (its clip, else the shard's declared label clip); ValueError without either."""
        clip = label_dp.clip or task_clip
        if clip is None:
            raise ValueError(
                f"privacy.label_dp.clip is required for mechanism {label_dp.mechanism}: [lo, hi], the label's range "
                "in its units (the leader's shard declares no label clip)"
            )
        lo, hi = float(clip[0]), float(clip[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and math.isfinite(hi - lo)):
            raise ValueError(
                f"privacy.label_dp.clip must be [lo, hi] with finite lo < hi and hi - lo, got {list(clip)}"
            )
        spec = cls((lo, hi), int(label_dp.bins), str(label_dp.prior), float(label_dp.prior_eps_fraction))
        if label_dp.mechanism != "laplace" and spec.prior == "dp_histogram":  # refused before anything is charged
            split = eps_split_problem(float(label_dp.eps), spec.prior_eps_fraction)
            if split:
                raise ValueError(split)
        return spec

    def split(self, mechanism: str, eps: float) -> tuple[float, float]:
        """(eps of the prior's release, eps of the randomizer's): 0 for a prior that costs nothing."""
        if mechanism == "laplace" or self.prior != "dp_histogram":
            return 0.0, eps
        return eps * self.prior_eps_fraction, eps * (1.0 - self.prior_eps_fraction)

    def sampling_delta(self, mechanism: str, eps: float, outputs: int | None = None) -> float:
        """The delta of the release as sampled from 53-bit uniforms: the randomizer's (its `outputs`; unset, at most
        bins for rr_on_bins and 3 bins + 1 for unbiased) plus the DP histogram's own (basic composition)."""
        eps_prior, eps_rand = self.split(mechanism, eps)
        if outputs is None and mechanism != "laplace":
            outputs = self.bins if mechanism == "rr_on_bins" else 3 * self.bins + 1
        prior = histogram_sampling_delta(eps_prior) if eps_prior > 0 else 0.0
        return min(1.0, sampling_delta(eps_rand, outputs) + prior)

    def output_bound(self, mechanism: str, eps: float) -> float:
        """The largest |noisy label| the randomizer can output: the clip's edge for rr_on_bins, beyond it by the
        largest geometric drawn (laplace) or the unbiased output grid's margin c (hi - lo) (unbiased_design)."""
        lo, hi = self.clip
        edge, width, eps_rand = max(abs(lo), abs(hi)), hi - lo, self.split(mechanism, eps)[1]
        if math.isinf(eps_rand) or mechanism == "rr_on_bins":
            return edge
        if mechanism == "laplace":
            top = math.floor(math.log(2.0**-53) / math.log(laplace_alpha(eps_rand)))
            return edge + (top + 1) * (width / LAPLACE_STEPS)
        return edge + (1.05 / math.expm1(min(eps_rand, UNBIASED_MAX_EPS)) + 0.5) * width

    def prior_name(self) -> str:
        if self.prior in ("dp_histogram", "uniform"):
            return self.prior
        return f"file sha256:{file_sha256(self.prior)}"  # another file is another release

    def plan(self, mechanism: str, eps: float, release_id_of: Callable[[str, dict], str]) -> list[tuple[str, dict]]:
        """The (ledger mechanism, parameters) of each release, in the order they are drawn."""
        lo, hi = self.clip
        if mechanism == "laplace":
            return [("laplace", {"eps": eps, "labels": "regression", "clip": [lo, hi]})]
        grid = {"labels": "regression", "clip": [lo, hi], "bins": self.bins}
        eps_prior, eps_rand = self.split(mechanism, eps)
        if self.prior == "dp_histogram":
            prior = {"eps": eps_prior, **grid, "noise": "two-sided geometric"}
            named = {"prior": "dp_histogram", "prior_release": release_id_of(PRIOR_RELEASE, prior), "total_eps": eps}
            return [(PRIOR_RELEASE, prior), (mechanism, {"eps": eps_rand, **grid, **named})]
        return [(mechanism, {"eps": eps_rand, **grid, "prior": self.prior_name()})]


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
