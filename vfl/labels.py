"""The one place the leader's training labels pass through before training (label DP plugs in here)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privacy.label_dp_run import randomize_binary_once, rr_prior_once, run_report, stage_one_mask
from vfl.config import LabelDPConfig

PriorFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass
class TrainingLabels:
    """Labels the model trains on, with a report for metrics.json (None when no label DP)."""

    labels: np.ndarray  # float32 (n,)
    report: dict | None = None


def training_labels(labels: np.ndarray, sample_ids: np.ndarray, label_dp: LabelDPConfig | None, seed: int,
                    prior_fn: PriorFn | None = None) -> TrainingLabels:
    """True labels when label DP is off; otherwise one randomized label per sample for the whole run."""
    labels = np.asarray(labels).astype(np.int64)
    if label_dp is None:
        return TrainingLabels(labels.astype(np.float32))
    eps = label_dp.eps
    if label_dp.mechanism == "rr":
        noisy = randomize_binary_once(labels, sample_ids, eps, seed)
        report = run_report(labels, noisy, eps, "binary_rr", debias=label_dp.debias)
        return TrainingLabels(noisy.astype(np.float32), report)
    # rr_prior: LP-2ST. Stage one gets plain RR; its model's predictions are the priors of stage two.
    if prior_fn is None:
        raise ValueError("privacy.label_dp.mechanism rr_prior needs a stage-one prior model")
    first = stage_one_mask(sample_ids, seed, label_dp.prior_fraction)
    noisy = randomize_binary_once(labels, sample_ids, eps, seed)
    prior = prior_fn(first, np.where(first, noisy, 0))
    second = ~first
    noisy2, k_star = rr_prior_once(labels[second], sample_ids[second], prior[second], eps, seed)
    noisy[second] = noisy2
    collapse = float(np.mean(k_star == 1)) if k_star.size else 0.0
    report = run_report(labels, noisy, eps, "rr_prior", debias=False, stage_one_fraction=float(first.mean()),
                        collapse_fraction=collapse,
                        flipped_fraction_stage_two=float(np.mean(noisy2 != labels[second])) if second.any() else 0.0,
                        prior="leader-only columns (LP-2ST stage one, Ghazi et al. 2021 Alg. 3)",
                        collapsed=collapse > 0.5)
    return TrainingLabels(noisy.astype(np.float32), report)
