"""RegressionLabelDP: label DP for real-valued labels as a standalone API, drawing the release training draws.

`RegressionLabelDP(eps, lo, hi, mechanism="rr_on_bins", dataset="claims-2026-11")(labels, ids=sample_ids)` returns the
noisy labels of one release, from the leader's keyed PRF at (key, release, sample id), recorded in the ledger of the
leader's store (privacy/label/ledger/store.py; `store_dir`, `key_file`, or `key=` bytes and no ledger, as LabelDP); a new
release that would take the dataset's total eps over `budget` (8 by default, as training's; None: no cap) is refused
before anything is drawn or recorded. The
mechanisms are those of `privacy.label_dp` in training, with its names, defaults and limits:
* `laplace`: discrete Laplace on the clipped label (the two-sided geometric mechanism, Ghosh, Roughgarden and
  Sundararajan 2009, Def. 2.3), unbiased, variance `laplace_noise_variance(lo, hi, eps)`, no prior;
* `rr_on_bins` (the default): Ghazi et al., "Regression with Label Differential Privacy", ICLR 2023, Algorithm 1;
* `unbiased`: Badanidiyuru et al., "Optimal Unbiased Randomizers for Regression with Label Differential Privacy",
  NeurIPS 2023, Algorithm 1 (at most 48 bins).
The last two are optimised for a prior over `bins` grid points: `dp_histogram` (the labels' histogram with two-sided
geometric noise, a release of its own at eps x prior_eps_fraction; the randomizer spends the rest), `uniform`, or a
`value,weight` CSV (free, and it must not come from these labels). privacy/label/regression_mechanisms.py has the
maths, privacy/label/regression_release.py the releases and draws that training (vfl/labeldp/release.py) uses too.

The release is (dataset name, key, mechanism, eps, clip, bins, prior, label set): the label set is an HMAC under the
key of the (id, label) pairs, in id order, so the same labels replay the same noisy labels at no cost, in any row
order, and other labels (a corrected value, another subset of ids) are another release with independent draws,
charged again: a replay of one release's uniforms on other labels would reveal their difference (y1 - y2 under
Laplace). Pass the whole label set in one call. Training names its dataset by its source file and label encoding and
its label set by every split of its shard, so its release ids differ from a standalone call's on the same labels;
with the same dataset id and label set (vfl/labeldp/release.py's LabelKey) the two draw the same noisy labels, bit
for bit. The label set is digested on the clipped labels (`standalone_label_set`): labels that differ only beyond
the clip, or 0.0 and -0.0, are the same input to every mechanism and replay the same release.

Without ids, each call draws fresh noise (a new release each call, nothing recorded) under a key of 32 bytes of OS
entropy. An int seed or a numpy / torch Generator passed as `generator=` is refused unless `insecure_seed=True`
(tests and examples): whoever knows its seed replays the noise exactly and reads every label.
Labels: a numpy array or a torch tensor of real values, shape (N,) or (N, 1); the result has the same type, shape,
dtype and device (refused up front when that dtype cannot hold the mechanism's outputs). eps = inf returns the
clipped labels. `last_release` never holds statistics of the true labels (`LEADER_ONLY`: the noise's RMSE and MAE,
which training keeps in the leader's own metrics): it may be passed on like the noisy labels.
"""

from __future__ import annotations

import math
import os

import numpy as np

from privacy.domains import PRIOR_EPS_FRACTION, eps_split_problem
from privacy.field_types import domain_error, suggest
from privacy.label.label_dp import (
    KeyedLabels,
    _check_ids,
    _from_numpy,
    _to_numpy,
    checked_eps,
    fresh_key,
    key_source_error,
)
from privacy.label.ledger.budget import DEFAULT_BUDGET_ARG, budget_problem, over_budget
from privacy.label.ledger.recording import ReleaseLedger, ReleaseNames
from privacy.label.ledger.release_names import key_fingerprint, label_set_digest, named_dataset_id
from privacy.label.regression_mechanisms import UNBIASED_MAX_BINS, check_clip
from privacy.label.regression_prior import PRIOR_KINDS, file_prior
from privacy.label.regression_release import LEADER_ONLY, Drawn, draw_regression, store_matrices
from privacy.label.release_plans import RegressionSpec

MECHANISMS = ("laplace", "rr_on_bins", "unbiased")
# privacy.label_dp's defaults and domains in vfl/config/schema.py (LabelDPConfig; tests/privacy/test_regression_label_dp.py
# checks they agree): the mechanism a regression leader gets unset, bins in [2, 256]; prior_eps_fraction's default
# is privacy/domains.py's PRIOR_EPS_FRACTION, in (0, 1)
DEFAULT_MECHANISM = "rr_on_bins"
DEFAULT_BINS, BINS_RANGE = 32, (2, 256)
DEFAULT_PRIOR = "dp_histogram"
LABEL_SET_SPLIT = "labels"  # the split name the label-set digest gives a standalone call's labels


def real_labels(arr: np.ndarray) -> np.ndarray:
    """The labels as float64 (N,); ValueError naming the shape, the dtype or the first non-finite row."""
    if arr.ndim not in (1, 2) or (arr.ndim == 2 and arr.shape[1] != 1):
        raise ValueError(f"labels must have shape (N,) or (N, 1) (one real value per row), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"labels must be real values of a float dtype, got dtype {arr.dtype} (cast them to float)")
    y = arr.reshape(-1).astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(y))
    if bad.size:
        raise ValueError(f"labels must be finite; row {bad[0]} is {float(y[bad[0]])!r}")
    return y


def standalone_label_set(key: bytes, ids: np.ndarray, labels: np.ndarray, lo: float, hi: float) -> str:
    """The label-set digest of a standalone call: the clipped labels (+ 0.0: -0.0 is 0.0) in id order, so labels
    that every mechanism sees alike name one release."""
    order = np.argsort(ids, kind="stable")
    return label_set_digest(key, [(LABEL_SET_SPLIT, ids[order], np.clip(labels[order], lo, hi) + 0.0)])


def _plain(value):
    """A numpy scalar as the Python number it holds (the domain checks take int and float)."""
    return value.item() if isinstance(value, np.generic) else value


class RegressionLabelDP(KeyedLabels):
    """eps-label-DP randomizer of real labels; once per sample and release when given sample ids (keyed mode)."""

    def __init__(
        self,
        eps: float,
        lo: float,
        hi: float,
        mechanism: str = DEFAULT_MECHANISM,
        bins: int | None = None,
        prior: str | None = None,
        prior_eps_fraction: float | None = None,
        dataset: str | None = None,
        store_dir: str | None = None,
        key_file: str | None = None,
        key: bytes | None = None,
        budget: float | None = DEFAULT_BUDGET_ARG,
    ):
        self.eps = checked_eps(eps)
        self.lo, self.hi = check_clip(lo, hi)
        if mechanism not in MECHANISMS:
            raise ValueError(
                f"mechanism must be one of {list(MECHANISMS)}, got {mechanism!r}{suggest(mechanism, MECHANISMS)}"
            )
        if mechanism == "laplace":
            options = (("bins", bins), ("prior", prior), ("prior_eps_fraction", prior_eps_fraction))
            given = [name for name, value in options if value is not None]
            if given:
                raise ValueError(f"{given[0]} applies to rr_on_bins and unbiased (laplace uses no prior and no grid)")
        bins = DEFAULT_BINS if bins is None else _plain(bins)
        err = domain_error("bins", bins, *BINS_RANGE, integer=True)
        if err is None and mechanism == "unbiased" and bins > UNBIASED_MAX_BINS:
            err = f"bins must be at most {UNBIASED_MAX_BINS} for mechanism unbiased (a linear programme), got {bins}"
        prior = DEFAULT_PRIOR if prior is None else prior
        if not isinstance(prior, str) or (prior not in PRIOR_KINDS and not os.path.isfile(prior)):
            err = err or (
                f"prior must be dp_histogram, uniform or the path of a value,weight CSV file, got {prior!r} "
                "(not a file)"
            )
        if prior_eps_fraction is not None and prior != "dp_histogram":
            err = err or "prior_eps_fraction applies to prior dp_histogram only"
        fraction = PRIOR_EPS_FRACTION if prior_eps_fraction is None else _plain(prior_eps_fraction)
        err = err or domain_error("prior_eps_fraction", fraction, 0.0, 1.0, lo_open=True, hi_open=True)
        if err is None and mechanism != "laplace" and prior == "dp_histogram":
            err = eps_split_problem(self.eps, fraction, name="")
        err = err or key_source_error(key, store_dir, key_file) or budget_problem(budget, key)
        if err:
            raise ValueError(err)
        if dataset is not None:
            named_dataset_id(dataset)  # a bad name is refused before any store is created
        if mechanism != "laplace" and prior not in PRIOR_KINDS:
            file_prior(prior, self.lo, self.hi, int(bins))  # a bad CSV line likewise
        self.mechanism = mechanism
        self.spec = RegressionSpec((self.lo, self.hi), int(bins), prior, float(fraction))
        self.dataset = dataset
        self._keep_key(key, store_dir, key_file, budget)
        self._kept: dict[str, np.ndarray] = {}  # key= mode: the prior and design of each release, as a store keeps them
        self.last_release: dict | None = None  # keyed mode: the release and the ledger's totals of the last call

    # -- naming ---------------------------------------------------------------------------------------------------------
    def _naming(self, key: bytes, y: np.ndarray, ids: np.ndarray, dataset: str) -> tuple[ReleaseNames, list]:
        """(the names of this label set's releases, the plan), as training names its own (ReleaseNames)."""
        label_set = standalone_label_set(key, ids, y, self.lo, self.hi)
        names = ReleaseNames(named_dataset_id(dataset), key_fingerprint(key), label_set)
        return names, names.plan(self.spec.plan(self.mechanism, self.eps, names.id_of))

    def release_id(self, labels, ids) -> str:
        """The randomizer's release id for these labels and sample ids (public; names no key bit and no label)."""
        arr, _ = _to_numpy(labels)
        y = real_labels(arr)
        ids = _check_ids(ids, y.size)
        names, plan = self._naming(self._secret(), y, ids, self._dataset_name())
        return names.id_of(*plan[-1])

    def _dataset_name(self) -> str:
        if self.dataset is None:
            raise ValueError(
                "once-per-sample randomization (ids=...) needs RegressionLabelDP(..., dataset=NAME): the name of the "
                "label set, so that two label sets on the same ids never share coins"
            )
        return self.dataset

    # -- drawing ----------------------------------------------------------------------------------------------------------
    def _draw(self, key: bytes, y: np.ndarray, ids: np.ndarray, dataset: str, keyed: bool) -> Drawn:
        """draw_regression (training's) on one label set; keyed, its releases are recorded in the store's ledger and
        their prior and design kept there (key= bytes: in this object) and read back, as training does."""
        names, plan = self._naming(key, y, ids, dataset)
        store = self._store if keyed else None
        ledger = ReleaseLedger(
            store,
            key,
            ids,
            {"name": dataset},
            lambda mechanism, params: names.release(mechanism, params, int(ids.size)),
            self.budget,
            "RegressionLabelDP's budget",
        )
        kept, keep = (self._kept.get, self._kept.setdefault) if keyed else (lambda rel: None, lambda rel, m: None)
        if store is not None:
            kept, keep = store_matrices(store)
        empty = np.zeros(0)
        return draw_regression(
            self.spec, self.mechanism, self.eps, plan, y, ids, empty, empty.astype(np.int64), key, ledger.record,
            kept=kept, keep=keep, release_id_of=names.id_of,
        )  # fmt: skip

    def _check_dtype(self, arr: np.ndarray, kind) -> None:
        """ValueError when the labels' dtype cannot hold every output of the mechanism (float16 at a wide clip)."""
        import torch

        dtype = kind[1]
        largest = float(torch.finfo(dtype).max if isinstance(dtype, torch.dtype) else np.finfo(arr.dtype).max)
        bound = self.spec.output_bound(self.mechanism, self.eps)
        if bound > largest:
            raise ValueError(
                f"labels of dtype {str(dtype).replace('torch.', '')} hold at most {largest:.4g}, and {self.mechanism} "
                f"at eps {self.eps:g} on clip [{self.lo:g}, {self.hi:g}] outputs up to {bound:.4g}: pass float32 "
                "or float64 labels"
            )

    def __call__(self, labels, generator=None, ids=None, insecure_seed: bool = False):
        """The noisy labels: keyed once per sample with `ids=` (needs dataset=); else fresh noise under
        `fresh_key(generator, insecure_seed)` (OS entropy; a seed or a Generator only with insecure_seed=True, for
        tests and examples)."""
        arr, kind = _to_numpy(labels)
        y = real_labels(arr)
        keyed = ids is not None
        if keyed:
            ids = _check_ids(ids, y.size)
            if generator is not None:
                raise ValueError("pass ids (keyed, once per sample) or generator (fresh noise), not both")
            dataset = self._dataset_name()
        self._check_dtype(arr, kind)
        if keyed:
            key = self._secret()
            refused = over_budget(self.eps, self.budget, "RegressionLabelDP") if self._store is not None else None
            if refused is not None:
                raise refused
        elif self.budget_set:
            raise ValueError(
                "budget= caps the releases the ledger records (ids=...); fresh noise is recorded nowhere: "
                "call with ids=, or leave budget out"
            )
        else:  # fresh noise: a new release under a new key, drawn nowhere else and recorded nowhere
            ids, dataset = np.arange(y.size, dtype=np.int64), self.dataset or "fresh noise"
            key = fresh_key(generator, insecure_seed)
        if y.size == 0:
            return _from_numpy(arr.copy(), kind)
        d = self._draw(key, y, ids, dataset, keyed)
        if keyed:
            self.last_release = {
                "release_id": d.release,
                "eps": self.eps,
                "mechanism": d.mechanism,
                "params": d.params,
                **{k: v for k, v in d.extra.items() if k not in ("bin_values", *LEADER_ONLY)},
                "new_release": d.new_release,
            }
            if self._store is not None:
                self.last_release.update(dataset_total_eps=d.summary["total_eps"], ledger=self._store.ledger_path)
            self.last_release["warnings"] = self._new_warnings()
        return _from_numpy(d.noisy.reshape(arr.shape).astype(arr.dtype), kind)

    # -- cost ---------------------------------------------------------------------------------------------------------------
    def privacy_cost(self) -> dict:
        """(eps, delta) per label of one release, as the ledger adds it: eps in all, of which `prior_eps` the DP
        histogram's release (dp_histogram prior) and `randomizer_eps` the randomizer's (basic composition); delta is the
        sampling delta of the randomizer and of the DP histogram as drawn from 53-bit uniforms (regression_mechanisms.py,
        Granularity; regression_prior.py, histogram_sampling_delta), at most the value given (rr_on_bins has at most
        `bins` outputs, unbiased at most 3 bins + 1). Keyed, every call with the same labels repeats the release at
        no further cost; fresh noise is a new release every call."""
        eps_prior, eps_rand = self.spec.split(self.mechanism, self.eps)
        return {
            "eps": self.eps,
            "delta": self.spec.sampling_delta(self.mechanism, self.eps),
            "prior_eps": eps_prior,
            "randomizer_eps": eps_rand,
            "releases": len(self.spec.plan(self.mechanism, self.eps, lambda m, p: "")),
        }

    def __repr__(self) -> str:
        eps = "inf" if math.isinf(self.eps) else repr(self.eps)
        text = f"RegressionLabelDP(eps={eps}, lo={self.lo!r}, hi={self.hi!r}, mechanism={self.mechanism!r}"
        if self.mechanism != "laplace":
            text += f", bins={self.spec.bins}, prior={self.spec.prior!r}"
            if self.spec.prior == "dp_histogram":
                text += f", prior_eps_fraction={self.spec.prior_eps_fraction!r}"
        return text + (f", dataset={self.dataset!r})" if self.dataset is not None else ")")
