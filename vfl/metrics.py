"""Evaluation metrics (scikit-learn) and the run log that writes the seed's loss lines."""
from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np
from sklearn.metrics import log_loss, roc_auc_score


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


class RunLog:
    """Writes each line to stdout and to the party's log file, flushed at once."""

    def __init__(self, path: str | None):
        self._f = open(path, "a", buffering=1) if path else None
        self.t0 = time.perf_counter()

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        if self._f:
            self._f.write(line + "\n")

    def error(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if self._f:
            self._f.write(line + "\n")

    def file_only(self, text: str) -> None:
        """Details for the log file only (a traceback), never the one-line console error."""
        if self._f:
            self._f.write(text.rstrip("\n") + "\n")

    def close(self) -> None:
        if self._f:
            self._f.close()


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
