"""privacy/rank_metrics.py: the numpy ROC AUC and cross-entropies equal scikit-learn's, ties and edge cases included."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from privacy.rank_metrics import binary_cross_entropy, cross_entropy, roc_auc, tie_averaged_ranks


@pytest.mark.parametrize("distinct", [3, 50, 100_000])
def test_roc_auc_equals_scikit_learns_with_and_without_ties(distinct):
    # Prepare: 20k scores drawn from `distinct` values (3: nearly every score tied), labels correlated with them
    rng = np.random.default_rng(distinct)
    s = rng.integers(0, distinct, 20_000) / distinct
    y = (rng.random(20_000) < 0.2 + 0.5 * s).astype(np.int8)
    # Execute
    ours = roc_auc(y, s)
    # Assert
    assert ours == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert roc_auc(y.astype(bool), s) == ours and roc_auc(y, -s) == pytest.approx(1 - ours, abs=1e-12)


def test_roc_auc_of_small_cases_by_hand():
    # Prepare / Execute / Assert: pairs (pos, neg) counted, a tie counting one half
    assert roc_auc([0, 1], [0.1, 0.9]) == 1.0
    assert roc_auc([1, 0], [0.1, 0.9]) == 0.0
    assert roc_auc([0, 1, 1], [0.5, 0.5, 0.9]) == 0.75
    assert math.isnan(roc_auc([1, 1], [0.1, 0.2])) and math.isnan(roc_auc([], []))


def test_bad_inputs_are_refused_naming_the_problem():
    # Prepare / Execute / Assert
    with pytest.raises(ValueError, match="NaN or infinite"):
        roc_auc([0, 1], [0.1, float("nan")])
    with pytest.raises(ValueError, match="allowed 0 and 1"):
        roc_auc([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="one score per label"):
        roc_auc([0, 1], [0.1])
    with pytest.raises(ValueError, match="allowed 0..2"):
        cross_entropy([0, 3], np.full((2, 3), 1 / 3))


def test_tie_averaged_ranks_are_scipys():
    # Prepare
    from scipy.stats import rankdata

    v = np.random.default_rng(0).integers(0, 7, 1000).astype(float)
    # Execute / Assert
    np.testing.assert_array_equal(tie_averaged_ranks(v), rankdata(v, method="average"))


def test_cross_entropies_equal_scikit_learns_log_loss():
    # Prepare
    rng = np.random.default_rng(1)
    p = np.clip(rng.random(5000), 1e-7, 1 - 1e-7)
    y = (rng.random(5000) < p).astype(np.int64)
    q = rng.random((5000, 4))
    q /= q.sum(axis=1, keepdims=True)
    k = rng.integers(0, 4, 5000)
    # Execute / Assert
    assert binary_cross_entropy(y, p) == pytest.approx(log_loss(y, p, labels=[0, 1]), rel=1e-12)
    assert cross_entropy(k, q) == pytest.approx(log_loss(k, q, labels=[0, 1, 2, 3]), rel=1e-12)
    assert math.isnan(binary_cross_entropy([], []))
