"""The streaming vocabulary counter: exact per-field counts whatever the chunking and merge schedule."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from vfl.data.transforms import MISSING_ID, OOV_ID, VocabularyCounter, vocabulary_ids


def _chunks(rng, n_chunks, rows, fields):
    """Zipf-like keys (a few frequent values, a long tail) with missing cells."""
    for _ in range(n_chunks):
        keys = (rng.zipf(1.3, size=(rows, fields)) % 5000).astype(np.uint64) * np.uint64(2654435761)
        yield keys, rng.random((rows, fields)) < 0.1


@pytest.mark.parametrize("merge_min", [1, 64, 1 << 20])
def test_counts_equal_a_plain_counter_whatever_the_merge_schedule(monkeypatch, merge_min):
    # Prepare: merges as soon as the pending pairs outnumber the totals (1), once they also reach 64, or only at
    # the end (2^20)
    monkeypatch.setattr(VocabularyCounter, "MERGE_MIN", merge_min)
    rng = np.random.default_rng(5)
    chunks = list(_chunks(rng, 40, 257, 3))
    reference = [Counter() for _ in range(3)]
    for keys, missing in chunks:
        for j in range(3):
            reference[j].update(keys[~missing[:, j], j].tolist())
    counter = VocabularyCounter(3)
    # Execute
    for keys, missing in chunks:
        counter.update(keys, missing)
    vocabs = {m: counter.vocabularies(m) for m in (1, 3, 10)}
    # Assert: the keys seen at least m times, sorted, per field; asking twice changes nothing
    for m, per_field in vocabs.items():
        for j in range(3):
            expected = sorted(k for k, c in reference[j].items() if c >= m)
            assert per_field[j].dtype == np.uint64 and per_field[j].tolist() == expected
    assert [v.tolist() for v in counter.vocabularies(3)] == [v.tolist() for v in vocabs[3]]


def test_merges_are_amortised_not_one_per_chunk(monkeypatch):
    # Prepare: every chunk brings only new keys, the worst case for the totals' growth; count the merges
    monkeypatch.setattr(VocabularyCounter, "MERGE_MIN", 100)
    merges = []
    real_merge = VocabularyCounter._merge
    monkeypatch.setattr(VocabularyCounter, "_merge", lambda self, j: (merges.append(j), real_merge(self, j)))
    counter = VocabularyCounter(1)
    chunks = 256
    # Execute
    for i in range(chunks):
        keys = np.arange(i * 50, (i + 1) * 50, dtype=np.uint64)[:, None]
        counter.update(keys, np.zeros_like(keys, dtype=bool))
    during = len(merges)
    vocab = counter.vocabularies(1)
    # Assert: the totals at least double between merges, so log2(chunks) + 2 merges bound it (one merge per
    # chunk, the old behaviour, would be 256); the final call merges what waits; every key counted once
    assert during <= np.log2(chunks) + 2, during
    assert vocab[0].tolist() == list(range(chunks * 50))


def test_updates_after_a_vocabulary_was_read_keep_counting():
    # Prepare
    counter = VocabularyCounter(1)
    keys = np.array([[3], [3], [4]], np.uint64)
    none_missing = np.zeros((3, 1), bool)
    counter.update(keys, none_missing)
    first = counter.vocabularies(2)[0].tolist()
    # Execute
    counter.update(keys, none_missing)
    second = counter.vocabularies(2)[0].tolist()
    # Assert: 3 seen 2 then 4 times, 4 seen 1 then 2 times
    assert first == [3] and second == [3, 4]


def test_keys_of_another_dtype_are_refused_not_silently_turned_into_floats():
    # Prepare / Execute / Assert
    with pytest.raises(TypeError, match="must be uint64.*int64"):
        VocabularyCounter(1).update(np.array([[1]], np.int64), np.zeros((1, 1), bool))


def test_vocabulary_ids_give_frequent_values_their_own_id_and_rare_ones_oov():
    # Prepare: value 7 seen 3 times, value 9 once, one missing cell
    counter = VocabularyCounter(1)
    keys = np.array([[7], [7], [9], [7], [0]], np.uint64)
    missing = np.array([[False], [False], [False], [False], [True]])
    counter.update(keys, missing)
    # Execute
    ids = vocabulary_ids(keys, missing, counter.vocabularies(2))
    # Assert
    assert ids[:, 0].tolist() == [2, 2, OOV_ID, 2, MISSING_ID]
