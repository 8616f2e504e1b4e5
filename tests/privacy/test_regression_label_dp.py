"""RegressionLabelDP, the standalone API for real-valued labels: exact at eps = inf, keyed replay bit for bit, any
change a new release with independent draws, the same noisy labels as the training path for the same release,
Laplace's mean and variance, torch in and out, one-line errors, and the ledger's count.

Statistical checks use z = 5.5 standard deviations (two-sided P < 4e-8 each under the normal approximation). There
are 9 (6 changes of a release, the DP histogram's noise across label sets, Laplace's mean and variance): 8 draw from
the fixed KEY on seeded labels, so they are deterministic (they pass or fail the same way on every run); only the
fresh `secrets` key of the "key" change draws anew each run, so the module fails by chance with probability < 4e-8
(and < 2^-100 more from two OS-entropy fresh-noise calls agreeing). The power checks (a replay, r = 1) and the
store-mode tests (the ledger's counts) are exact."""

from __future__ import annotations

import math
import secrets
import warnings

import numpy as np
import pytest
import torch

from privacy import LabelDP, RegressionLabelDP
from privacy.domains import PRIOR_EPS_FRACTION
from privacy.label.label_dp import fresh_key
from privacy.label.ledger.release_names import named_dataset_id
from privacy.label.ledger.store import LabelDPBudgetError, LabelDPStore
from privacy.label.regression_draws import dp_histogram_once
from privacy.label.regression_label_dp import (
    BINS_RANGE,
    DEFAULT_BINS,
    DEFAULT_MECHANISM,
    DEFAULT_PRIOR,
    standalone_label_set,
)
from privacy.label.regression_mechanisms import laplace_noise_variance, sampling_delta
from privacy.label.regression_prior import histogram_sampling_delta, label_histogram
from vfl.config.label_dp_rules import regression_label_dp_default
from vfl.config.schema import LabelDPConfig
from vfl.data.task import Task
from vfl.labeldp.release import LabelDPRelease, LabelKey, training_labels

Z = 5.5
KEY = bytes(range(32))
N = 4000


def _labels(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(20, 8, n), rng.permutation(10 * n)[:n].astype(np.int64)


def _laplace(**kw):
    args = {"eps": 1.0, "lo": 0.0, "hi": 40.0, "mechanism": "laplace", "dataset": "claims", "key": KEY, **kw}
    return RegressionLabelDP(**args)


def _uncorrelated(a, b) -> bool:
    """|Pearson r| < Z / sqrt(n): what independent draws give, except with probability < 4e-8."""
    return abs(np.corrcoef(a, b)[0, 1]) < Z / math.sqrt(a.size)


@pytest.mark.parametrize("mechanism", ["laplace", "rr_on_bins", "unbiased"])
def test_eps_inf_returns_the_clipped_labels_exactly(mechanism):
    # Prepare: labels beyond the clip on both sides
    y, ids = _labels(500)
    bins = None if mechanism == "laplace" else 8
    dp = RegressionLabelDP(math.inf, 5.0, 30.0, mechanism, bins=bins, dataset="claims", key=KEY)
    # Execute
    keyed, fresh = dp(y, ids=ids), dp(y)
    # Assert
    assert np.array_equal(keyed, np.clip(y, 5.0, 30.0)) and np.array_equal(fresh, np.clip(y, 5.0, 30.0))


def test_keyed_mode_replays_bit_for_bit_across_calls_instances_and_row_order():
    # Prepare
    y, ids = _labels()
    order = np.random.default_rng(1).permutation(N)
    # Execute
    first = _laplace()(y, ids=ids)
    again, other_instance = _laplace()(y, ids=ids), _laplace()(y[order], ids=ids[order])
    # Assert
    assert np.array_equal(again, first) and np.array_equal(other_instance, first[order])
    assert _laplace().release_id(y[order], ids[order]) == _laplace().release_id(y, ids)


def test_any_change_is_a_new_release_with_independent_draws():
    # Prepare: Laplace noise of the first release
    y, ids = _labels()
    base = _laplace()
    noise = base(y, ids=ids) - np.clip(y, 0, 40)
    changes = {
        "eps": _laplace(eps=2.0),
        "clip": _laplace(lo=-10.0, hi=50.0),
        "key": _laplace(key=secrets.token_bytes(32)),
        "dataset": _laplace(dataset="claims-v2"),
    }
    # Execute / Assert: another release id, noise uncorrelated with the first's
    for name, dp in changes.items():
        other = dp(y, ids=ids) - np.clip(y, dp.lo, dp.hi)
        assert dp.release_id(y, ids) != base.release_id(y, ids), name
        assert _uncorrelated(other, noise), name
    # another label on one row: another label set, another release
    y2 = y.copy()
    y2[0] += 1.0
    assert base.release_id(y2, ids) != base.release_id(y, ids)
    assert _uncorrelated(base(y2, ids=ids)[1:] - np.clip(y2, 0, 40)[1:], noise[1:])
    # another mechanism, on one constant label (the outputs vary with the pick uniform only): the two share the
    # PRF's pick purpose, and only the release id keeps their picks apart
    flat = np.full(N, 20.0)
    rr = RegressionLabelDP(1.0, 0, 40, "rr_on_bins", bins=8, prior="uniform", dataset="c", key=KEY)
    ub = RegressionLabelDP(1.0, 0, 40, "unbiased", bins=8, prior="uniform", dataset="c", key=KEY)
    assert _uncorrelated(rr(flat, ids=ids), ub(flat, ids=ids))
    # power: the same release (the noise of a replay) is perfectly correlated
    assert not _uncorrelated(base(y, ids=ids) - np.clip(y, 0, 40), noise)


@pytest.mark.parametrize(
    "mechanism, options",
    [("laplace", {}), ("rr_on_bins", {"bins": 16}), ("unbiased", {"bins": 8, "prior": "uniform"})],
)
def test_the_standalone_call_draws_the_training_paths_noisy_labels_for_the_same_release(tmp_path, mechanism, options):
    # Prepare: the training path's key and ledger, named by the standalone API's dataset id and label set
    store = LabelDPStore(str(tmp_path / "store"))
    key = store.key()
    y, ids = _labels(1000)
    label_set = standalone_label_set(key, ids, y, 0.0, 40.0)
    label_key = LabelKey(key, store, named_dataset_id("claims"), {}, label_set)
    cfg = LabelDPConfig(eps=2.0, mechanism=mechanism, clip=(0.0, 40.0), **options)
    release = LabelDPRelease.from_config(cfg, Task("regression"))
    dp = RegressionLabelDP(2.0, 0.0, 40.0, mechanism, dataset="claims", key=key, **options)
    # Execute
    trained = training_labels(y, ids, release, label_key, real_valued=True)
    standalone = dp(y, ids=ids)
    # Assert: one release id, the same noisy labels (training keeps them as float32)
    assert trained.release == dp.last_release["release_id"] == dp.release_id(y, ids)
    assert np.array_equal(trained.labels, standalone.astype(np.float32))
    assert not np.array_equal(standalone, np.clip(y, 0, 40))
    # one delta, the DP histogram's sampling delta included (rr_on_bins: the prior's release at eps 0.2)
    assert trained.report["sampling_delta"] <= dp.privacy_cost()["delta"]
    if mechanism == "rr_on_bins":
        assert trained.report["sampling_delta"] > histogram_sampling_delta(0.2)


def test_laplace_is_unbiased_with_the_documented_variance():
    # Prepare: 100k samples of one label between lattice points
    n, y0 = 100_000, 13.7
    ids = np.arange(n, dtype=np.int64)
    # Execute
    noisy = _laplace()(np.full(n, y0), ids=ids)
    # Assert: the mean within Z standard errors of the label; the variance within Z standard errors of
    # laplace_noise_variance, plus the randomized rounding's step^2 / 4 that it leaves out
    assert abs(noisy.mean() - y0) < Z * noisy.std() / math.sqrt(n)
    v = laplace_noise_variance(0, 40, 1.0)
    se_var = math.sqrt((np.mean((noisy - y0) ** 4) - v * v) / n)
    assert abs(np.var(noisy) - v) < Z * se_var + (40 / 4096) ** 2 / 4


def test_torch_in_torch_out_with_its_shape_dtype_and_the_same_values():
    # Prepare
    y, ids = _labels(300)
    t = torch.tensor(y, dtype=torch.float32).reshape(-1, 1)
    # Execute
    out = _laplace()(t, ids=torch.from_numpy(ids))
    # Assert
    assert isinstance(out, torch.Tensor) and out.shape == (300, 1) and out.dtype == torch.float32
    assert np.array_equal(out.numpy(), _laplace()(t.numpy(), ids=ids))


def test_fresh_noise_mode_reproduces_only_with_the_insecure_opt_in_and_records_nothing(tmp_path):
    # Prepare
    y, _ = _labels(500)
    dp = RegressionLabelDP(1.0, 0, 40, "laplace", store_dir=str(tmp_path / "store"))
    # Execute
    a, b = dp(y, generator=7, insecure_seed=True), dp(y, generator=7, insecure_seed=True)
    c, d, e = dp(y, generator=np.random.default_rng(8), insecure_seed=True), dp(y), dp(y)
    # Assert: an int seed replays (for tests only); OS entropy never repeats; nothing is recorded
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(d, e)
    assert dp.last_release is None and not (tmp_path / "store").exists()


@pytest.mark.parametrize("make", [lambda: RegressionLabelDP(0.1, 0, 40, "laplace"), lambda: LabelDP(0.1)])
def test_a_known_seed_is_refused_because_replaying_it_reads_the_labels(make):
    # Prepare: the attack the refusal prevents: the adversary knows every label but y[0] and the seed 7, and
    # replays the fresh-noise key of each candidate value of y[0]
    y = np.random.default_rng(123).integers(0, 2, 2000).astype(np.float64)
    ids = np.arange(y.size, dtype=np.int64)
    observed = make()(y, generator=7, insecure_seed=True)
    dp = make()
    replay = lambda guess: (
        dp._draw(fresh_key(7, True), guess, ids, "fresh noise", keyed=False).noisy
        if isinstance(dp, RegressionLabelDP)
        else dp(guess, generator=7, insecure_seed=True)
    )
    hits = [c for c in (0.0, 1.0) if np.array_equal(replay(np.r_[c, y[1:]]), observed)]
    # Execute / Assert: the seed alone is refused, in one line naming the way out; so is torch's default Generator,
    # whose seed is a public constant (the same replay reads the labels)
    with pytest.raises(ValueError, match="a seed others can know voids the DP guarantee.*ids=") as err:
        make()(y, generator=7)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="generator=Generator: a seed others can know"):
        make()(y, generator=torch.Generator())
    assert hits == [y[0]]  # power: with the opt-in, the replay finds the label at eps 0.1


def test_the_defaults_and_limits_are_the_training_configs():
    # Prepare
    fields = LabelDPConfig.model_fields
    doc = {"role": "leader", "train": {"task": "regression"}, "privacy": {"label_dp": {"eps": 1.0}}}
    # Execute
    regression_label_dp_default(doc)
    # Assert
    assert doc["privacy"]["label_dp"]["mechanism"] == DEFAULT_MECHANISM
    assert (fields["bins"].default, fields["prior"].default) == (DEFAULT_BINS, DEFAULT_PRIOR)
    assert fields["prior_eps_fraction"].default == PRIOR_EPS_FRACTION
    for bins in BINS_RANGE:
        LabelDPConfig(bins=bins)
        RegressionLabelDP(1.0, 0, 1, bins=bins)
    with pytest.raises(ValueError, match="bins must be an integer in \\[2, 256\\], got bins=257"):
        RegressionLabelDP(1.0, 0, 1, bins=BINS_RANGE[1] + 1)
    with pytest.raises(ValueError):
        LabelDPConfig(bins=BINS_RANGE[1] + 1)


@pytest.mark.parametrize(
    "kwargs, labels, ids, message",
    [
        ({"eps": 0.0}, None, None, r"eps must be in \[0.001, 50\], or inf for no noise, got eps=0.0"),
        ({"lo": 3.0, "hi": 3.0}, None, None, r"clip must be \[lo, hi\] of real .* got \[3.0, 3.0\]"),
        ({"lo": -1e308, "hi": 1e308}, None, None, r"finite lo < hi and hi - lo, got \[-1e\+308, 1e\+308\]"),
        ({"lo": "a"}, None, None, r"clip must be \[lo, hi\] of real numbers .* got \['a', 40.0\]"),
        ({"lo": None}, None, None, r"clip must be .* got \[None, 40.0\]"),
        ({"lo": True}, None, None, r"clip must be .* got \[True, 40.0\]"),
        ({"eps": True}, None, None, r"eps must be a real number in \[0.001, 50\], or inf .* got bool True"),
        ({"eps": "1"}, None, None, r"eps must be a real number .* got str '1'"),
        ({"hi": 1e6}, np.array([1.0, 2.0, 3.0], np.float16), None, r"labels of dtype float16 hold at most 6.55e\+04"),
        ({}, None, [0, 1, 2], "ids must be a numpy array or a torch tensor, got list"),
        ({"mechanism": "gauss"}, None, None, r"mechanism must be one of \['laplace', 'rr_on_bins', 'unbiased'\]"),
        ({"bins": 16}, None, None, "bins applies to rr_on_bins and unbiased"),
        ({"mechanism": "unbiased", "bins": 64}, None, None, "bins must be at most 48 for mechanism unbiased"),
        ({"mechanism": "rr_on_bins", "prior": "nope.csv"}, None, None, "prior must be dp_histogram, uniform or"),
        ({"mechanism": "rr_on_bins", "eps": 0.005}, None, None, "gives the DP-histogram prior eps 0.0005"),
        ({"key": b"short"}, None, None, "key must be 32 secret random bytes .* got 5 bytes"),
        ({"dataset": None}, None, None, r"needs RegressionLabelDP\(..., dataset=NAME\)"),
        ({}, np.array([1.0, np.nan, 2.0]), None, "labels must be finite; row 1 is nan"),
        ({}, np.ones((3, 2)), None, r"labels must have shape \(N,\) or \(N, 1\) .* got shape \(3, 2\)"),
        ({}, np.arange(3), None, "labels must be real values of a float dtype, got dtype int64"),
        ({}, None, np.array([0, 1, 1]), "ids must be unique"),
        ({}, None, np.array([0, 1]), "ids must be 3 integer sample ids"),
    ],
)
def test_bad_input_is_a_one_line_value_error_naming_the_value_and_the_domain(kwargs, labels, ids, message):
    # Prepare
    labels = np.array([1.0, 2.0, 3.0]) if labels is None else labels
    ids = np.arange(labels.shape[0]) if ids is None else ids
    # Execute / Assert
    with pytest.raises(ValueError, match=message) as err:
        _laplace(**kwargs)(labels, ids=ids)
    assert "\n" not in str(err.value)


@pytest.mark.filterwarnings("ignore:label DP. created a new key store")
def test_the_ledger_records_one_release_once_however_many_calls_and_a_second_eps_adds_its_cost(tmp_path):
    # Prepare: rr_on_bins with the DP-histogram prior: two ledger entries (the prior's and the randomizer's)
    y, ids = _labels(1000)
    store = str(tmp_path / "store")
    make = lambda eps: RegressionLabelDP(eps, 0, 40, "rr_on_bins", bins=16, dataset="claims", store_dir=store)
    dp = make(1.0)
    # Execute
    first = dp(y, ids=ids)
    again, other_instance = dp(y, ids=ids), make(1.0)(y, ids=ids)
    releases = len(LabelDPStore(store).ledger()["releases"])
    second = make(2.0)
    second(y, ids=ids)
    # Assert
    assert np.array_equal(first, again) and np.array_equal(first, other_instance)
    assert releases == dp.privacy_cost()["releases"] == 2 and dp.last_release["new_release"] is False
    assert dp.last_release["dataset_total_eps"] == pytest.approx(dp.privacy_cost()["eps"]) == pytest.approx(1.0)
    assert second.last_release["new_release"] is True
    assert second.last_release["dataset_total_eps"] == pytest.approx(3.0)
    assert len(LabelDPStore(store).ledger()["releases"]) == 4
    assert dp.privacy_cost()["prior_eps"] == pytest.approx(0.1) and "rr_on_bins" in repr(dp)


@pytest.mark.filterwarnings("ignore:label DP. created a new key store")
def test_a_release_over_the_budget_is_refused_with_its_prior_and_nothing_is_recorded(tmp_path):
    # Prepare: rr_on_bins at eps 3 (prior 0.3 + randomizer 2.7) under a budget of 5
    y, ids = _labels(1000)
    store = str(tmp_path / "store")
    make = lambda eps, **kw: RegressionLabelDP(
        eps, 0, 40, "rr_on_bins", bins=16, dataset="claims", store_dir=store, **kw
    )
    make(3.0, budget=5)(y, ids=ids)
    before = LabelDPStore(store).ledger()["releases"]
    # Execute / Assert: eps 2.5 (two new entries) would spend 5.5: refused, neither entry recorded
    with pytest.raises(LabelDPBudgetError) as e:
        make(2.5, budget=5)(y, ids=ids)
    assert "\n" not in str(e.value) and "to 5.5, over RegressionLabelDP's budget 5;" in str(e.value)
    assert LabelDPStore(store).ledger()["releases"] == before
    with pytest.raises(ValueError, match="budget must be > 0"):
        make(1.0, budget=-1)
    with pytest.raises(LabelDPBudgetError, match="RegressionLabelDP eps=inf is over its budget=8"):
        make(math.inf)(y, ids=ids)
    assert LabelDPStore(store).ledger()["releases"] == before
    with pytest.raises(ValueError, match="key= bytes keep no ledger"):
        RegressionLabelDP(1.0, 0, 40, "laplace", key=bytes(32), budget=5)
    with pytest.raises(ValueError, match="fresh noise is recorded nowhere"):
        RegressionLabelDP(1.0, 0, 40, "laplace", budget=5)(y)


def test_store_mode_charges_a_corrected_label_a_subset_and_another_dataset_name_on_the_same_ids(tmp_path):
    # Prepare: laplace (one ledger entry per release) on one store
    y, ids = _labels(1000)
    store = str(tmp_path / "store")
    make = lambda dataset="claims": RegressionLabelDP(1.0, 0, 40, "laplace", dataset=dataset, store_dir=store)
    corrected = y.copy()
    corrected[0] += 1.0
    calls = [("claims", y, ids), ("claims", y[:500], ids[:500]), ("claims", corrected, ids), ("claims-v2", y, ids)]
    # Execute: each call a new release, charged to the ids it shares with the earlier ones
    totals, fresh = [], []
    with pytest.warns(UserWarning):
        for dataset, labels, rows in calls:
            dp = make(dataset)
            dp(labels, ids=rows)
            totals.append(dp.last_release["dataset_total_eps"])
            fresh.append(dp.last_release["new_release"])
    # Assert
    assert fresh == [True, True, True, True] and totals == pytest.approx([1.0, 2.0, 3.0, 4.0])
    assert len(LabelDPStore(store).ledger()["releases"]) == 4


def test_the_stores_warnings_are_shown_and_listed_in_last_release(tmp_path):
    # Prepare
    y, ids = _labels(200)
    store = str(tmp_path / "store")
    first = RegressionLabelDP(1.0, 0, 40, "laplace", dataset="first", store_dir=store)
    second = RegressionLabelDP(1.0, 0, 40, "laplace", dataset="re-export", store_dir=store)
    # Execute
    with pytest.warns(UserWarning, match="created a new key store"):
        first(y, ids=ids)
    created = first.last_release["warnings"]
    with pytest.warns(UserWarning, match="shares sample ids with 1 dataset"):
        second(y, ids=ids)
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        first(y, ids=ids)  # the same release again: nothing new to say
    # Assert
    assert len(created) == 1 and "created a new key store" in created[0]
    assert len(second.last_release["warnings"]) == 1 and "shares sample ids" in second.last_release["warnings"][0]
    assert later == [] and first.last_release["warnings"] == []


def test_the_dp_histograms_noise_is_drawn_anew_for_another_label_set():
    # Prepare: two label sets differing in one label: two prior releases
    y, ids = _labels()
    y2 = y.copy()
    y2[0] += 1.0
    dp = RegressionLabelDP(1.0, 0, 40, "rr_on_bins", bins=256, dataset="claims", key=KEY)
    noise, rels = {}, {}
    for name, labels in (("a", y), ("b", y2)):
        names, plan = dp._naming(KEY, labels, ids, "claims")
        prior_rel = rels[name] = names.id_of(*plan[0])
        # Execute: the API keeps the prior it drew under the prior's release id
        dp(labels, ids=ids)
        prior, counts = dp_histogram_once(labels, 0, 40, 256, 0.1, KEY, prior_rel)
        # Assert: the prior the API drew is the DP histogram of that release
        assert np.array_equal(dp._kept[prior_rel], prior)
        noise[name] = counts - label_histogram(labels, 0, 40, 256)
    # Assert: two prior releases with uncorrelated noise (256 grid points); power: a replay of the first release on
    # the second label set reuses its noise, perfectly correlated
    replayed = dp_histogram_once(y2, 0, 40, 256, 0.1, KEY, rels["a"])[1] - label_histogram(y2, 0, 40, 256)
    assert rels["a"] != rels["b"] and len(dp._kept) == 4
    assert _uncorrelated(noise["a"], noise["b"]) and not _uncorrelated(noise["a"], replayed)


def test_last_release_holds_no_statistic_of_the_true_labels():
    # Prepare: one label: the noise's RMSE or MAE beside the noisy label would give the label away
    dp = _laplace(eps=0.5)
    # Execute
    dp(np.array([17.3]), ids=np.array([42]))
    # Assert
    assert not {"noise_rmse", "noise_mae"} & set(dp.last_release)
    assert dp.last_release["release_id"] and "sampling_delta" in dp.last_release


def test_privacy_cost_adds_the_dp_histograms_sampling_delta():
    # Prepare
    dp = RegressionLabelDP(1.0, 0, 40, "rr_on_bins", bins=16)
    # Execute
    cost = dp.privacy_cost()
    # Assert: the randomizer's (16 outputs at eps 0.9) plus the histogram's (4 geometrics at eps 0.1; top + 1
    # values each, alpha = e^-0.05)
    top = math.floor(math.log(2.0**-53) / -0.05)
    assert histogram_sampling_delta(0.1) == pytest.approx((1 + math.exp(0.1)) * 4 * (top + 1) * 2.0**-52)
    assert cost["delta"] == pytest.approx(sampling_delta(0.9, 16) + histogram_sampling_delta(0.1))
    assert _laplace().privacy_cost()["delta"] == sampling_delta(1.0)


def test_numpy_scalars_bfloat16_and_labels_beyond_the_clip_are_handled(tmp_path):
    # Prepare
    y, ids = _labels(300)
    beyond = y.copy()
    beyond[np.argmax(y)] = 1e9  # another value above the clip, and -0.0 for 0.0 below it
    low = np.argmin(y)
    beyond[low], y[low] = -1e9, -0.0
    # Execute
    dp = RegressionLabelDP(np.float64(1.0), np.float32(0), np.int64(40), bins=np.int64(16), dataset="c", key=KEY)
    dp_frac = RegressionLabelDP(1.0, 0, 40, prior_eps_fraction=np.float32(0.25), dataset="c", key=KEY)
    bf16 = _laplace()(torch.tensor(y, dtype=torch.bfloat16), ids=torch.from_numpy(ids))
    # Assert: the same labels as clipped are the same release
    assert dp.spec.bins == 16 and dp_frac.spec.prior_eps_fraction == pytest.approx(0.25)
    assert dp.release_id(beyond, ids) == dp.release_id(np.clip(y, 0, 40) + 0.0, ids) == dp.release_id(y, ids)
    assert bf16.dtype == torch.bfloat16 and bf16.shape == (300,)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"dataset": " "}, "dataset must name the label set"), ({"prior": "BAD"}, r"p.csv:2: '1,abc' is not")],
)
def test_bad_dataset_or_prior_file_is_refused_before_any_store_is_created(tmp_path, kwargs, message):
    # Prepare
    (tmp_path / "p.csv").write_text("v,w\n1,abc\n")
    if kwargs.get("prior") == "BAD":
        kwargs = {"prior": str(tmp_path / "p.csv")}
    store = tmp_path / "store"
    # Execute / Assert
    with pytest.raises(ValueError, match=message):
        RegressionLabelDP(1.0, 0, 40, "rr_on_bins", **{"dataset": "d", **kwargs}, store_dir=str(store))
    assert not store.exists()
