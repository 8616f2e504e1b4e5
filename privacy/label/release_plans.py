"""The releases every task's label-DP mechanism draws, as (ledger mechanism, parameters), from the config alone.

A plan is known before any follower connects (the budget is checked on it then) and is recorded entry by entry before
anything of an entry is drawn (privacy/label/ledger/recording.py, which also names each entry by its label set):

    binary      rr: one binary RR release; rr_prior (LP-2ST): its stage one, then stage two
    multiclass  rr: one k-ary RR release; rr_prior (LP-2ST): its stage one, then stage two
    regression  laplace: one release; rr_on_bins, unbiased: with `prior: dp_histogram` the DP histogram's release
                (eps x prior_eps_fraction, named by eps, clip and bins only, so rr_on_bins and unbiased at one eps
                share it), then the randomizer's at the rest of eps named by it (basic composition; Ghazi et al.
                2023 split eps the same way); with a uniform or file prior (named by its sha256), one release

LP-2ST's stage two (Ghazi et al. 2021, Alg. 3) is named by its stage-one release and the leader's `prior_epochs`,
never by the prior's values, which the followers' bottoms shape (the first prior is kept: vfl/labeldp/mechanisms.py).
Training (vfl/labeldp/mechanisms.py) and the standalone RegressionLabelDP plan here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from privacy.domains import eps_split_problem
from privacy.durable_files import file_sha256
from privacy.label.ledger.ledger_math import STAGE_ONE
from privacy.label.regression_mechanisms import LAPLACE_STEPS, UNBIASED_MAX_EPS, laplace_alpha, sampling_delta
from privacy.label.regression_prior import histogram_sampling_delta

Plan = list[tuple[str, dict]]  # the (ledger mechanism, parameters) of each release a run draws, in order
PRIOR_RELEASE = "dp_histogram_prior"  # the ledger's name of a regression prior's release


def binary_rr(eps: float) -> Plan:
    """Randomized response on 0/1 labels: one release."""
    return [("binary_rr", {"eps": eps, "labels": "binary"})]


def kary_rr(eps: float, num_classes: int) -> Plan:
    """K-ary randomized response on class ids: one release."""
    return [("kary_rr", {"eps": eps, "labels": "multiclass", "num_classes": num_classes})]


def lp2st(
    eps: float,
    prior_fraction: float,
    num_classes: int | None,
    prior_epochs: int,
    release_id_of: Callable[[str, dict], str],
) -> Plan:
    """LP-2ST's stage one (binary or k-ary RR on prior_fraction of the rows) and its stage two, named by the stage-one
    release (`release_id_of`, the id a plan entry records) and prior_epochs."""
    stage = {"eps": eps, "prior_fraction": prior_fraction, "labels": "binary"}
    if num_classes is not None:
        stage.update(labels="multiclass", num_classes=num_classes, prior="all parties")
    second = {**stage, "stage_one_release": release_id_of(STAGE_ONE, stage), "prior_epochs": prior_epochs}
    return [(STAGE_ONE, stage), ("rr_prior", second)]


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

    def plan(self, mechanism: str, eps: float, release_id_of: Callable[[str, dict], str]) -> Plan:
        """The (ledger mechanism, parameters) of each release, in the order they are drawn (module docstring)."""
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
