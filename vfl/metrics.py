"""Evaluation metrics (scikit-learn) and the seed's loss-line format (the run log itself is vfl/logs.py)."""
from __future__ import annotations

import json
import math
import os

import numpy as np
from sklearn.metrics import log_loss, roc_auc_score

from vfl.logs import RunLog  # noqa: F401  (re-exported: callers import the run log from here)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC; NaN when only one class is present."""
    labels = np.asarray(labels)
    if labels.size == 0 or np.unique(labels).size < 2:
        return math.nan
    return float(roc_auc_score(labels, scores))


def logloss(labels: np.ndarray, probs: np.ndarray) -> float:
    """Binary cross-entropy of probabilities (clipped by scikit-learn's rule)."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return math.nan
    probs = np.clip(np.asarray(probs, dtype=np.float64), 1e-7, 1 - 1e-7)
    return float(log_loss(labels, probs, labels=[0, 1]))


def loss_line(epoch: int, step: int, steps: int, loss: float) -> str:
    """The seed's format: `epoch 0 step 100/2582 loss: 0.588637` (step counts from 1)."""
    return f"epoch {epoch} step {step}/{steps} loss: {loss:.6f}"


def write_json(path: str, doc: dict) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, allow_nan=True)
        f.write("\n")
    os.replace(tmp, path)
