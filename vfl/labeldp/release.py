"""The label-DP release: the one place that reads `privacy.label_dp` and the one path the leader's labels take.

`LabelDPRelease.from_config` turns the leader's config (and the task's class count) into numbers: eps, the
mechanism, the flip probability or k-ary transition, the correction, the LP-2ST prior's share and epochs, and the
store. Everything downstream takes the release, never the config: the loss (`training_loss`), the loop (`eps` for the
debiased validation metrics), the prior (`flip_probability`, `transition`, `prior_epochs`) and the ranks (`store_dir`,
`key_file`). `draw` opens nothing: given the leader's key (`open_label_key`) it derives the release id from the
mechanism's parameters and the label set (a keyed digest of the labelled shard's ids and labels as prepared, so the
same file with another label column or encoding is another release: privacy/label/ledger/release_names.py), and its
mechanism records each release in the ledger and only then draws the noisy training and validation labels with the
leader's PRF (one ReleaseLedger.record_and_draw per release, privacy/label/ledger/recording.py; refused, with nothing
written, when it would take the dataset over `privacy.label_dp.budget`). Nothing here uses `train.seed` or any other
value a follower knows.

The mechanism is looked up by (task, `privacy.label_dp.mechanism`) in the registry of vfl/labeldp/mechanisms.py
(binary RR, k-ary RR and LP-2ST for class labels; laplace, rr_on_bins and unbiased for real-valued labels), which
draws the releases privacy/label/release_plans.py plans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privacy.label.ledger.recording import ReleaseLedger
from privacy.label.ledger.release_names import label_set_digest
from privacy.label.ledger.store import LabelDPStore, dataset_id, default_store_dir
from privacy.label.randomized_response import flip_probability, kary_transition, keep_probability
from privacy.label.release_draws import run_report
from privacy.label.release_plans import Plan, RegressionSpec
from vfl.config.schema import LabelDPConfig
from vfl.data.task import Task
from vfl.labeldp.label_key import LabelKey
from vfl.labeldp.losses import corrected_loss
from vfl.labeldp.mechanisms import MECHANISMS, DrawRequest, LabelDPMechanism, PriorFn, mechanism_for

__all__ = [  # MECHANISMS, LabelKey, Plan and PriorFn (the registry's, key's and plans') named here for their callers
    "MECHANISMS",
    "LabelDPRelease",
    "LabelKey",
    "Plan",
    "PriorFn",
    "TrainingLabels",
    "bayes_accuracy_of",
    "leader_task",
    "leader_training_labels",
    "open_label_key",
    "training_labels",
]
DEFAULT_BUDGET = LabelDPConfig.model_fields["budget"].default


def leader_task(task: str, shard) -> Task:
    """The Task of `train.task`, checked against the leader's labelled shard (a DataError when they disagree).
    Checked before any follower connects: followers never learn the task or K."""
    return Task.of(task, shard.task, f"the leader's shard {shard.path}")


def bayes_accuracy_of(manifest: dict) -> dict:
    """{"bayes_test_accuracy": a} when the leader's manifest knows the Bayes classifier's test accuracy, else {}."""
    value = manifest.get("bayes_test_accuracy")
    return {} if value is None else {"bayes_test_accuracy": value}


@dataclass
class TrainingLabels:
    """Labels the model trains on, with a report for metrics.json (None when no label DP)."""

    labels: np.ndarray  # float32 (n,)
    report: dict | None = None
    release: str | None = None  # the release id under label DP
    warnings: tuple[str, ...] = ()
    valid: np.ndarray | None = None  # int64 validation labels for model selection: randomized under label DP
    # (float64 real values for a regression)
    valid_noise_var: float | None = None  # regression: E[Var(noisy | true)] of an unbiased mechanism, else None


def prepared_labels(shard_path: str):
    """(split, sample ids, labels) of a labelled shard as prepared on disk, all splits: what PSI later restricts."""
    from vfl.data.shards import PartyShard
    from vfl.splits import SPLITS

    shard = PartyShard(shard_path, in_memory=False)
    for name in SPLITS:
        split = shard.split(name)
        yield name, split.ids, split.labels


def open_label_key(store_dir: str | None, key_file: str | None, shard) -> LabelKey:
    """The leader's key (created on first use) and ledger, for the labelled dataset of its shard (a PartyShard).
    The dataset is named by its source file and its label column and encoding (the manifest's label entry), and its
    labels by an HMAC under the key of the shard's ids and labels as prepared, all splits, read from disk (so a shard
    already restricted by PSI gives the same digest). Called before any follower connects, so that a store problem
    never reaches a follower."""
    manifest = getattr(shard, "manifest", None)
    if not isinstance(manifest, dict) or not isinstance(getattr(shard, "path", None), str):
        raise TypeError(
            f"open_label_key needs the leader's labelled shard (a PartyShard), got {type(shard).__name__}: a release "
            "names the labels it randomizes"
        )
    source = manifest.get("source") or {}
    dataset = dataset_id(source.get("sha256"), manifest.get("label"))
    store = LabelDPStore(store_dir or default_store_dir(), key_file)
    key = store.key()
    label_set = label_set_digest(key, prepared_labels(shard.path))
    return LabelKey(key, store, dataset, {"sha256": source.get("sha256"), "lines": source.get("lines")}, label_set)


@dataclass(frozen=True)
class LabelDPRelease:
    """Everything a run derives from `privacy.label_dp`, as numbers (see the module docstring)."""

    eps: float
    # the config's name: "rr" (binary or k-ary randomized response), "rr_prior" (LP-2ST); regression: "laplace",
    # "rr_on_bins", "unbiased"
    mechanism: str
    num_classes: int | None  # None: 0/1 labels; K: class ids in [0, K)
    debias: bool
    correction: str  # with debias: "forward" | "posterior"
    prior_fraction: float
    prior_epochs: int
    store_dir: str | None = None
    key_file: str | None = None
    budget: float = DEFAULT_BUDGET  # the most eps the dataset's most exposed sample id may reach
    regression: RegressionSpec | None = None  # a real-valued label's clip, grid and prior

    @classmethod
    def from_config(cls, label_dp: LabelDPConfig | None, task: Task | None = None) -> LabelDPRelease | None:
        """None when label DP is off; the mechanism must be registered for the task (task None: binary)."""
        if label_dp is None:
            return None
        task = task or Task("binary")
        if label_dp.mechanism not in task.label_dp_mechanisms:
            raise ValueError(
                f"privacy.label_dp.mechanism {label_dp.mechanism} does not apply to {task.kind} labels "
                f"(allowed: {list(task.label_dp_mechanisms) or 'none yet'})"
            )
        return cls(
            float(label_dp.eps),
            label_dp.mechanism,
            task.classes,
            bool(label_dp.debias) and not task.is_regression,
            label_dp.correction,
            float(label_dp.prior_fraction),
            int(label_dp.prior_epochs),
            label_dp.store_dir,
            label_dp.key_file,
            float(label_dp.budget),
            RegressionSpec.of(label_dp, task.clip) if task.is_regression else None,
        )

    @property
    def task_kind(self) -> str:
        if self.regression is not None:
            return "regression"
        return "binary" if self.num_classes is None else "multiclass"

    @property
    def entry(self) -> LabelDPMechanism:
        """This release's mechanism in the registry (vfl/labeldp/mechanisms.py)."""
        return mechanism_for(self.task_kind, self.mechanism)

    @property
    def flip_probability(self) -> float:
        """P(noisy label != true label) of randomized response: 1/(1+e^eps) binary, 1 - e^eps/(K-1+e^eps) K-ary."""
        if self.num_classes is None:
            return flip_probability(self.eps)
        return 1.0 - keep_probability(self.eps, self.num_classes)

    @property
    def transition(self) -> np.ndarray:
        """The K x K channel of k-ary RR, T[i, j] = P(noisy j | true i) (2 x 2 for binary labels)."""
        return kary_transition(self.num_classes or 2, self.eps)

    @property
    def uses_prior(self) -> bool:
        return self.mechanism == "rr_prior"

    def training_loss(self):
        """The noise-corrected loss with `debias`, else None (the caller's plain loss)."""
        if not self.debias:
            return None
        if self.num_classes is None:
            return corrected_loss(self.correction, rho=self.flip_probability)
        return corrected_loss(self.correction, transition=self.transition)

    def draw(
        self,
        labels: np.ndarray,
        sample_ids: np.ndarray,
        label_key: LabelKey,
        prior_fn: PriorFn | None = None,
        valid_labels: np.ndarray | None = None,
        valid_ids: np.ndarray | None = None,
    ) -> TrainingLabels:
        """The noisy labels of this release. Validation labels (when given) are randomized in the same release,
        once per sample, so that model selection on them is post-processing; the ledger counts them with the
        training labels."""
        entry = self.entry
        dtype = np.float64 if entry.real_valued else np.int64
        labels = np.asarray(labels).astype(dtype)
        valid_labels = np.zeros(0, dtype) if valid_labels is None else np.asarray(valid_labels).astype(dtype)
        valid_ids = np.zeros(0, np.int64) if valid_ids is None else np.asarray(valid_ids).astype(np.int64)
        if label_key is None:
            raise ValueError("label DP needs the leader's key (open_label_key)")
        if self.uses_prior and prior_fn is None:
            raise ValueError("privacy.label_dp.mechanism rr_prior needs a stage-one prior model")
        ids = np.asarray(sample_ids, np.int64)
        released_ids = np.concatenate([ids, valid_ids])
        rows = int(released_ids.size)
        ledger = ReleaseLedger(
            label_key.store,
            label_key.key,
            released_ids,
            label_key.source,
            lambda mechanism, params: label_key.names.release(mechanism, params, rows),
            self.budget,
        )
        d = entry.draw(self, DrawRequest(labels, ids, valid_labels, valid_ids, label_key, prior_fn, ledger))
        is_new, summary = d.new_release, d.summary
        if entry.real_valued:  # the noise is measured from the clipped label, which the mechanisms randomize
            labels, valid_labels = (np.clip(y, *self.regression.clip) for y in (labels, valid_labels))
        report = run_report(
            labels,
            d.noisy,
            self.eps,
            d.mechanism,
            task=self.task_kind,
            **d.extra,
            release_id=d.release,
            new_release=is_new,
            key_fingerprint=label_key.fingerprint,
            dataset_id=label_key.dataset,
            ledger=label_key.store.ledger_path,
            dataset_releases=summary["releases"],
            dataset_total_eps=summary["total_eps"],
            overlapping_datasets=summary["overlapping_datasets"],
            valid_rows=int(valid_ids.size),
            **_valid_noise(d.valid_noisy, valid_labels, entry.real_valued),
        )
        return TrainingLabels(
            d.noisy.astype(np.float32),
            report,
            d.release,
            tuple(label_key.store.warnings),
            d.valid_noisy,
            d.noise_variance,
        )

    def plan(self, label_key: LabelKey) -> Plan:
        """The releases this config draws, as (ledger mechanism, parameters): known from the leader's config alone,
        before any follower connects. Each release's parameters name the label set (LabelKey.label_set)."""
        return self.entry.named_plan(self, label_key)

    def check_budget(self, label_key: LabelKey) -> None:
        """LabelDPBudgetError when this config's new releases would take the dataset over the budget, as far as the
        ledger knows before PSI (draw checks again with the intersection's ids)."""
        first, *later = (label_key.names.release(m, p, 0) for m, p in self.plan(label_key))
        label_key.store.check_budget(first, tuple(later), self.budget)


def training_labels(
    labels: np.ndarray,
    sample_ids: np.ndarray,
    release: LabelDPRelease | None,
    label_key: LabelKey | None = None,
    prior_fn: PriorFn | None = None,
    valid_labels: np.ndarray | None = None,
    valid_ids: np.ndarray | None = None,
    real_valued: bool = False,
) -> TrainingLabels:
    """True labels when label DP is off (release None); otherwise the noisy labels of the release. A real-valued
    (regression) label is float32 for training, float64 for selection."""
    if real_valued and release is None:
        valid = np.zeros(0) if valid_labels is None else np.asarray(valid_labels)
        return TrainingLabels(np.asarray(labels, dtype=np.float32), valid=valid.astype(np.float64))
    if release is None:
        valid = np.zeros(0, np.int64) if valid_labels is None else np.asarray(valid_labels).astype(np.int64)
        return TrainingLabels(np.asarray(labels).astype(np.int64).astype(np.float32), valid=valid)
    return release.draw(labels, sample_ids, label_key, prior_fn, valid_labels, valid_ids)


def leader_training_labels(
    release: LabelDPRelease | None, shard, prior_fn: PriorFn | None = None, label_key: LabelKey | None = None
) -> TrainingLabels:
    """The training labels of the leader's labelled shard (a PartyShard); opens the key unless given."""
    train, valid = shard.split("train"), shard.split("valid")
    if release is not None and label_key is None:
        label_key = open_label_key(release.store_dir, release.key_file, shard)
    real = shard.task is not None and shard.task.is_regression
    return training_labels(train.labels, train.ids, release, label_key, prior_fn, valid.labels, valid.ids, real)


def _valid_noise(noisy: np.ndarray, labels: np.ndarray, real_valued: bool) -> dict:
    """How far the noise moved the validation labels: their RMSE (real values, all of which change) or the share
    flipped (classes)."""
    if real_valued:
        err = np.asarray(noisy, np.float64) - np.asarray(labels, np.float64)
        return {"valid_noise_rmse": float(np.sqrt(np.mean(err * err))) if err.size else 0.0}
    return {"valid_flipped_fraction": float(np.mean(noisy != labels)) if labels.size else 0.0}
