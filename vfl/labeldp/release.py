"""The one place the leader's labels pass through before training: label DP releases plug in here.

Under label DP the leader opens the labelled dataset's store (privacy/label/store.py: secret key
and ledger, outside any shard directory), derives the release id from the mechanism's parameters,
draws the noisy labels with the leader's PRF, and records the release in the ledger. Nothing here
uses `train.seed` or any other value a follower knows.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privacy.label.release_draws import (
    randomize_binary_once, randomize_classes_once, rr_prior_classes_once, rr_prior_once, run_report, stage_one_mask,
)
from privacy.label.store import LabelDPStore, Release, dataset_id, default_store_dir, key_fingerprint, release_id
from vfl.config.schema import LabelDPConfig
from vfl.data.readers.criteo import DataError

PriorFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def task_classes(task: str, shard) -> int | None:
    """None for train.task binary, K for multiclass; a DataError when the task and the leader's labelled
    shard disagree. Checked before any follower connects: followers never learn K."""
    k = shard.num_classes
    if task == "binary" and k != 2:
        raise DataError(f"train.task is binary but the leader's shard {shard.path} holds {k}-class labels "
                        f"(class ids 0..{k - 1}); set train.task: multiclass")
    if task == "multiclass" and k < 3:
        raise DataError(f"train.task is multiclass but the leader's shard {shard.path} holds 0/1 labels; prepare a "
                        "K-class label column with `python -m vfl.data prepare --num-classes K` (K >= 3), or set train.task: binary")
    return None if task == "binary" else k


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


@dataclass
class LabelKey:
    """The leader's secret, the store holding its ledger, and the labelled dataset being randomized."""

    key: bytes
    store: LabelDPStore
    dataset: str
    source: dict

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key)


def open_label_key(label_dp: LabelDPConfig, manifest: dict) -> LabelKey:
    """The leader's key (created on first use) and ledger, for the dataset its shard was prepared from.
    Called before any follower connects, so that a store problem never reaches a follower."""
    source = manifest.get("source") or {}
    dataset = dataset_id(source.get("sha256"))
    store = LabelDPStore(label_dp.store_dir or default_store_dir(), label_dp.key_file)
    return LabelKey(store.key(), store, dataset, {"sha256": source.get("sha256"), "lines": source.get("lines")})


def release_of(label_key: LabelKey, mechanism: str, params: dict) -> str:
    return release_id(label_key.dataset, label_key.fingerprint, mechanism, params)


def _prior_digest(prior: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(prior, dtype="<f8").tobytes()).hexdigest()[:32]


def training_labels(labels: np.ndarray, sample_ids: np.ndarray, label_dp: LabelDPConfig | None,
                    label_key: LabelKey | None = None, prior_fn: PriorFn | None = None,
                    valid_labels: np.ndarray | None = None, valid_ids: np.ndarray | None = None,
                    num_classes: int | None = None) -> TrainingLabels:
    """True labels when label DP is off; otherwise the noisy labels of this parameter set's release.
    Validation labels (when given) are randomized in the same release, once per sample, so that model
    selection on them is post-processing; the ledger counts them with the training labels.
    num_classes K: class ids in [0, K), randomized by k-ary RR (keep p1 = e^eps/(K-1+e^eps))."""
    labels = np.asarray(labels).astype(np.int64)
    valid_labels = np.zeros(0, np.int64) if valid_labels is None else np.asarray(valid_labels).astype(np.int64)
    valid_ids = np.zeros(0, np.int64) if valid_ids is None else np.asarray(valid_ids).astype(np.int64)
    if label_dp is None:
        return TrainingLabels(labels.astype(np.float32), valid=valid_labels)
    if label_key is None:
        raise ValueError("label DP needs the leader's key (open_label_key)")
    eps, k = label_dp.eps, label_key.key
    if num_classes is not None and label_dp.mechanism == "rr_prior":
        # LP-2ST over K classes: stage one gets k-ary RR (its own release); a split model of ALL parties
        # trained on it gives the priors of stage two (vfl/labeldp/prior.py)
        if prior_fn is None:
            raise ValueError("privacy.label_dp.mechanism rr_prior needs a stage-one prior model")
        stage_params = {"eps": eps, "prior_fraction": label_dp.prior_fraction, "labels": "multiclass",
                        "num_classes": num_classes, "prior": "all parties"}
        stage_rel = release_of(label_key, "lp2st_stage_one", stage_params)
        first = stage_one_mask(sample_ids, k, stage_rel, label_dp.prior_fraction)
        noisy = randomize_classes_once(labels, sample_ids, num_classes, eps, k, stage_rel)
        valid_noisy = randomize_classes_once(valid_labels, valid_ids, num_classes, eps, k, stage_rel)
        prior = prior_fn(first, np.where(first, noisy, 0))
        second = ~first
        params = {**stage_params, "stage_one_release": stage_rel, "prior_sha256": _prior_digest(prior[second])}
        rel = release_of(label_key, "rr_prior", params)
        noisy2, k_star = rr_prior_classes_once(labels[second], sample_ids[second], prior[second], eps, k, rel)
        noisy[second] = noisy2
        collapse = float(np.mean(k_star == 1)) if k_star.size else 0.0
        extra = {"debias": False, "num_classes": num_classes, "stage_one_fraction": float(first.mean()),
                 "collapse_fraction": collapse, "collapsed": collapse > 0.5,
                 "mean_k_star": float(k_star.mean()) if k_star.size else 0.0,
                 "stage_two_kept_in_set": float(np.mean(noisy2 == labels[second])) if second.any() else 0.0,
                 "flipped_fraction_stage_two": float(np.mean(noisy2 != labels[second])) if second.any() else 0.0,
                 "prior": "all parties (LP-2ST stage one as a split model on the stage-one rows, Ghazi et al. 2021 Alg. 3)"}
        mechanism = "rr_prior"
    elif num_classes is not None:
        if label_dp.mechanism != "rr":
            raise ValueError(f"privacy.label_dp.mechanism {label_dp.mechanism} is not available for a "
                             f"{num_classes}-class task; use rr (k-ary randomized response) or rr_prior")
        params = {"eps": eps, "labels": "multiclass", "num_classes": num_classes}
        rel = release_of(label_key, "kary_rr", params)
        noisy = randomize_classes_once(labels, sample_ids, num_classes, eps, k, rel)
        valid_noisy = randomize_classes_once(valid_labels, valid_ids, num_classes, eps, k, rel)
        extra = {"debias": label_dp.debias, "correction": label_dp.correction if label_dp.debias else None,
                 "num_classes": num_classes}
        mechanism = "kary_rr"
    elif label_dp.mechanism == "rr":
        params = {"eps": eps, "labels": "binary"}
        rel = release_of(label_key, "binary_rr", params)
        noisy = randomize_binary_once(labels, sample_ids, eps, k, rel)
        valid_noisy = randomize_binary_once(valid_labels, valid_ids, eps, k, rel)
        extra = {"debias": label_dp.debias, "correction": label_dp.correction if label_dp.debias else None}
        mechanism = "binary_rr"
    else:
        # rr_prior: LP-2ST. Stage one gets plain RR (its own release); its model's predictions are the
        # priors of stage two, whose release id includes a digest of the prior.
        if prior_fn is None:
            raise ValueError("privacy.label_dp.mechanism rr_prior needs a stage-one prior model")
        stage_params = {"eps": eps, "prior_fraction": label_dp.prior_fraction, "labels": "binary"}
        stage_rel = release_of(label_key, "lp2st_stage_one", stage_params)
        first = stage_one_mask(sample_ids, k, stage_rel, label_dp.prior_fraction)
        noisy = randomize_binary_once(labels, sample_ids, eps, k, stage_rel)
        valid_noisy = randomize_binary_once(valid_labels, valid_ids, eps, k, stage_rel)  # plain RR, like stage one
        prior = prior_fn(first, np.where(first, noisy, 0))
        second = ~first
        params = {**stage_params, "stage_one_release": stage_rel, "prior_sha256": _prior_digest(prior[second])}
        rel = release_of(label_key, "rr_prior", params)
        noisy2, k_star = rr_prior_once(labels[second], sample_ids[second], prior[second], eps, k, rel)
        noisy[second] = noisy2
        collapse = float(np.mean(k_star == 1)) if k_star.size else 0.0
        extra = {"debias": False, "stage_one_fraction": float(first.mean()), "collapse_fraction": collapse,
                 "flipped_fraction_stage_two": float(np.mean(noisy2 != labels[second])) if second.any() else 0.0,
                 "prior": "leader-only columns (LP-2ST stage one, Ghazi et al. 2021 Alg. 3)", "collapsed": collapse > 0.5}
        mechanism = "rr_prior"
    released_ids = np.concatenate([np.asarray(sample_ids, np.int64), valid_ids])
    is_new, summary = label_key.store.record(Release(rel, label_key.dataset, mechanism, eps, params, int(released_ids.size)),
                                             k, released_ids, label_key.source)
    report = run_report(labels, noisy, eps, mechanism, **extra, release_id=rel, new_release=is_new,
                        key_fingerprint=label_key.fingerprint, dataset_id=label_key.dataset,
                        ledger=label_key.store.ledger_path, dataset_releases=summary["releases"],
                        dataset_total_eps=summary["total_eps"], overlapping_datasets=summary["overlapping_datasets"],
                        valid_rows=int(valid_ids.size), valid_flipped_fraction=float(np.mean(valid_noisy != valid_labels))
                        if valid_ids.size else 0.0)
    return TrainingLabels(noisy.astype(np.float32), report, rel, tuple(label_key.store.warnings), valid_noisy)


def leader_training_labels(label_dp: LabelDPConfig | None, shard, prior_fn: PriorFn | None = None,
                           label_key: LabelKey | None = None, num_classes: int | None = None) -> TrainingLabels:
    """The training labels of the leader's labelled shard (a PartyShard); opens the key unless given."""
    train, valid = shard.split("train"), shard.split("valid")
    if label_dp is not None and label_key is None:
        label_key = open_label_key(label_dp, shard.manifest)
    return training_labels(train.labels, train.ids, label_dp, label_key, prior_fn, valid.labels, valid.ids, num_classes)
