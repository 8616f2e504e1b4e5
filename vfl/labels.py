"""The one place the leader's training labels pass through before training (label DP plugs in here)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vfl.config import LabelDPConfig


@dataclass
class TrainingLabels:
    """Labels the model trains on, with a report for metrics.json (None when no label DP)."""

    labels: np.ndarray  # float32 (n,)
    report: dict | None = None
    extra: dict = field(default_factory=dict)


def training_labels(labels: np.ndarray, sample_ids: np.ndarray, label_dp: LabelDPConfig | None, seed: int) -> TrainingLabels:
    """True labels when label DP is off; otherwise one randomized label per sample for the whole run."""
    labels = np.asarray(labels)
    if label_dp is None:
        return TrainingLabels(labels.astype(np.float32))
    from privacy.label_dp_run import randomize_training_labels

    noisy, report = randomize_training_labels(labels, sample_ids, label_dp, seed)
    return TrainingLabels(noisy.astype(np.float32), report)
