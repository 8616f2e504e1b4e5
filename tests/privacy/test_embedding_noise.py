"""Keyed embedding-DP noise (privacy/embedding_noise.py): a repeat is the same bytes, anything else is fresh N(0, 1).

Statistical checks are seeded (the ids and values are fixed; the key is fixed) and each states its false-failure
bound under the hypothesis that the PRF's outputs are independent uniforms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.embedding_noise import (
    GRID_BITS,
    keyed_gaussian,
    keyed_release,
    ledger_key,
    noise_key,
    quantized_rows,
    row_digests,
)

KEY = noise_key(b"k" * 40)


def test_the_same_id_and_value_give_the_same_bytes_and_any_change_gives_other_noise():
    # Prepare
    ids = np.array([7, 7, 8])
    values = np.array([[0.5, -0.25], [0.5, -0.25], [0.5, -0.25]], np.float32)
    # Execute
    sent, digests = keyed_release(KEY, ids, values, 1.0, 2.0)
    again, _ = keyed_release(KEY, ids[:1], values[:1], 1.0, 2.0)
    moved, _ = keyed_release(KEY, ids[:1], values[:1] + 0.01, 1.0, 2.0)
    other_key, _ = keyed_release(noise_key(b"j" * 40), ids[:1], values[:1], 1.0, 2.0)
    # Assert: copies are bit-identical (averaging them removes nothing); another id, value or key is fresh noise
    assert np.array_equal(sent[0], sent[1]) and np.array_equal(again[0], sent[0])
    assert digests[0].tolist() == digests[1].tolist() != digests[2].tolist()
    assert not np.any(sent[2] == sent[0]) and not np.any(moved[0] == sent[0]) and not np.any(other_key[0] == sent[0])


def test_the_noise_and_ledger_keys_are_distinct_and_need_a_real_secret():
    assert noise_key(b"s" * 40) != ledger_key(b"s" * 40)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        noise_key(b"short")


def test_quantization_rounds_toward_zero_so_no_norm_grows():
    # Prepare
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(1000, 8)).astype(np.float32)
    rows /= np.maximum(1.0, np.linalg.norm(rows, axis=1, keepdims=True))  # clipped to 1
    # Execute
    q = quantized_rows(rows, 1.0)
    # Assert: never larger in any coordinate, within one grid step, on the grid
    assert np.all(np.abs(q) <= np.abs(rows)) and np.all(np.abs(rows - q) < 2.0**-GRID_BITS)
    assert np.all(np.linalg.norm(q, axis=1) <= 1.0)
    assert np.array_equal(q, quantized_rows(q, 1.0))


def test_row_digests_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="3 ids for values of shape"):
        row_digests(np.arange(3), np.zeros((2, 4), np.float32))


def test_keyed_gaussian_is_standard_normal_over_distinct_digests():
    """200k draws: mean within 6 sd (|mean| < 6/sqrt(n)), variance within 6 sd of 1 (sd of the sample variance
    sqrt(2/n)), the tail P(|z| > 2) within 6 sd of 0.0455: each bound fails with probability < 2e-9 for N(0, 1)."""
    # Prepare
    n = 200_000
    digests = row_digests(np.arange(n // 2), np.zeros((n // 2, 1), np.float32))
    # Execute
    z = keyed_gaussian(KEY, digests, 2).ravel()
    # Assert
    assert abs(z.mean()) < 6 / math.sqrt(n)
    assert abs(z.var() - 1.0) < 6 * math.sqrt(2 / n)
    p = 2 * (1 - 0.9772498680518208)
    assert abs(np.mean(np.abs(z) > 2) - p) < 6 * math.sqrt(p * (1 - p) / n)
    # Power: a planted bias (every draw shifted by 0.05 sd) fails the mean bound
    assert abs((z + 0.05).mean()) > 6 / math.sqrt(n)


def test_coordinates_of_one_row_are_uncorrelated():
    """Correlation of coordinate 0 and 1 over 100k rows: |r| < 6/sqrt(n) fails with probability < 2e-9."""
    digests = row_digests(np.arange(100_000), np.zeros((100_000, 1), np.float32))
    z = keyed_gaussian(KEY, digests, 3)
    r = np.corrcoef(z[:, 0], z[:, 1])[0, 1]
    assert abs(r) < 6 / math.sqrt(100_000)
