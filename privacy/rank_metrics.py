"""ROC AUC and cross-entropy in numpy: scikit-learn's values without its import (about 2 CPU-seconds per process).

Every party process that evaluates (the leader, the centralized reference, prediction, preparation with a truth file)
scores once per evaluation; loading scikit-learn for that cost more than a small run's training. These are the
textbook definitions, checked against scikit-learn to 1e-12 by tests/privacy/test_rank_metrics.py.

- `roc_auc`: the Mann-Whitney U statistic over (positive, negative) pairs, a tie counting one half (Hanley & McNeil
  1982, eq. 1), computed from tie-averaged ranks; scikit-learn's `roc_auc_score` is the trapezoid area under the same
  ROC curve, which equals it.
- `binary_cross_entropy` / `cross_entropy`: the mean negative log-likelihood of the labels (scikit-learn's
  `log_loss`), on probabilities the caller has clipped.
"""

from __future__ import annotations

import math

import numpy as np


def _scores(scores, n: int) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size != n:
        raise ValueError(f"{s.size} scores for {n} labels: one score per label")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"scores contain {int(np.sum(~np.isfinite(s)))} NaN or infinite value(s): all must be finite")
    return s


def tie_averaged_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of values (n,), equal values sharing the mean of their ranks (scipy's rankdata 'average')."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # first position of each run of equal values
    ends = np.r_[starts[1:], ordered.size]  # one past its last
    mean_rank = (starts + ends + 1) / 2.0  # the mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def roc_auc(positive, scores) -> float:
    """ROC AUC of scores (n,) for the boolean (or 0/1) labels `positive` (n,); NaN unless both classes occur.

    P(score of a random positive > score of a random negative) + P(equal) / 2, exactly (rank sums below 2**53)."""
    y = np.asarray(positive).reshape(-1)
    if y.dtype != np.bool_:
        if y.size and not np.all((y == 0) | (y == 1)):
            raise ValueError(f"labels {np.unique(y)[:5].tolist()} for a binary AUC: allowed 0 and 1 (or booleans)")
        y = y == 1
    s = _scores(scores, y.size)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    rank_sum = float(tie_averaged_ranks(s)[y].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def binary_cross_entropy(labels, probs) -> float:
    """Mean of -(y log p + (1 - y) log(1 - p)) over labels y in {0, 1} and click probabilities p in (0, 1)."""
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    p = _scores(probs, y.size)
    if y.size == 0:
        return math.nan
    return float(np.mean(-(y * np.log(p) + (1.0 - y) * np.log(1.0 - p))))


def cross_entropy(labels, probs) -> float:
    """Mean of -log p[y] over class ids y (n,) and rows of class probabilities (n, K), each row summing to 1."""
    y = np.asarray(labels, dtype=np.int64).reshape(-1)
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != y.size:
        raise ValueError(f"probabilities of shape {p.shape} for {y.size} labels: (n, K) with one row per label")
    if y.size and (y.min() < 0 or y.max() >= p.shape[1]):
        raise ValueError(f"class ids {y.min()}..{y.max()} for {p.shape[1]} classes: allowed 0..{p.shape[1] - 1}")
    if y.size == 0:
        return math.nan
    return float(np.mean(-np.log(p[np.arange(y.size), y])))
