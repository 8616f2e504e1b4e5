"""Synthetic data's truth file (its true probabilities) -> the labelled shard's Bayes-optimal test figures.

`python -m vfl.data synth` writes FILE.tsv.truth.npy beside its rows: P(click) per row (rows,), or P(y=c | x) per row
and class (rows, K). `TruthFile` is a hook of the one prepare path (vfl/data/prepare_table.py's ShardHook): it notes
which data rows land in the test split, then records in the manifest the test AUC of the true probabilities
(`bayes_test_auc`) or the Bayes classifier's test accuracy (`bayes_test_accuracy`), and the file (`truth_path`).
Training prints them beside its own figures: the best any model could reach on these rows.
"""

from __future__ import annotations

import os

import numpy as np

from privacy.rank_metrics import roc_auc
from vfl.data.errors import DataError

TEST = 2  # split_of's test split


def bayes_test_auc(truth_path: str, rows: np.ndarray, labels: np.ndarray) -> float | None:
    """The test AUC of the true click probabilities of data rows `rows` (labels 0/1), or None without both classes."""
    truth = _load(truth_path)
    if rows.size == 0 or rows.max(initial=-1) >= truth.shape[0] or len(np.unique(labels)) < 2:
        return None
    return roc_auc(labels, truth[rows])


def bayes_accuracy(truth_path: str, rows: np.ndarray, labels: np.ndarray, k: int) -> float | None:
    """Accuracy of the Bayes classifier argmax_c P(y=c | x) (the truth file holds P, shape (rows, k)) on `rows`."""
    truth = _load(truth_path)
    if truth.ndim != 2 or truth.shape[1] != k:
        raise DataError(f"truth file {truth_path} has shape {truth.shape}; a {k}-class set needs (rows, {k})")
    if rows.size == 0 or rows.max(initial=-1) >= truth.shape[0]:
        return None
    return float(np.mean(np.argmax(truth[rows], axis=1) == labels))


def _load(truth_path: str) -> np.ndarray:
    try:
        return np.load(truth_path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"truth file {truth_path} is not a readable .npy array: {e}") from None


class TruthFile:
    """The Bayes-optimal test figure of a labelled shard of `num_classes` classes, from the truth file at `path`."""

    def __init__(self, path: str, num_classes: int):
        if not os.path.exists(path):
            raise DataError(f"truth file not found: {path}")
        self.path, self.num_classes = os.path.abspath(path), num_classes
        self._ids: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []

    def observe(self, block, which: np.ndarray) -> None:
        test = which == TEST
        if test.any():
            self._ids.append(block.sample_id[test])
            self._rows.append(block.row_index[test])

    def annotate(self, manifest: dict, splits) -> None:
        """The figure of the test split as written: its labels are in ascending id order, so are the rows noted."""
        ids = np.concatenate(self._ids) if self._ids else np.empty(0, np.int64)
        rows = np.concatenate(self._rows) if self._rows else np.empty(0, np.int64)
        rows = rows[np.argsort(ids, kind="stable")]
        labels = splits.labels("test")
        if self.num_classes > 2:
            manifest["bayes_test_accuracy"] = bayes_accuracy(self.path, rows, labels, self.num_classes)
        else:
            manifest["bayes_test_auc"] = bayes_test_auc(self.path, rows, labels)
        manifest["truth_path"] = self.path
