"""Feature transforms: dense log transform, per-field hashing of categoricals, min-count vocabularies."""

from __future__ import annotations

import numpy as np

from privacy.public_hash import splitmix64

MISSING_ID = 0  # id 0 of every categorical field means "value missing"
OOV_ID = 1  # with a vocabulary, id 1 means "seen fewer than min_count times"

DENSE_TRANSFORM_DOC = (
    "signed log: v = sign(x) * log(1 + |x|) as float32; a missing value becomes v = 0 "
    "with dense_missing = 1 (the model sees the flag)"
)

_U64 = np.uint64


def dense_transform(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """sign(x) * log1p(|x|), 0 where missing (the flag is stored separately)."""
    out = np.log1p(np.abs(values).astype(np.float32))
    np.copysign(out, values.astype(np.float32), out=out)
    out[missing] = 0.0
    return out


def hash_bucket(keys: np.ndarray, missing: np.ndarray, field_salts: np.ndarray, buckets: int) -> np.ndarray:
    """Map raw keys (n, fields) to ids in [2, buckets) per field; MISSING_ID where missing.

    Id 1 is left unused in hash mode so that ids mean the same thing in vocabulary mode.
    """
    h = splitmix64(keys ^ field_salts[None, :])
    ids = (h % _U64(buckets - 2)).astype(np.int64) + 2
    ids[missing] = MISSING_ID
    return ids.astype(np.int32)


def field_salts(names: list[str]) -> np.ndarray:
    """A fixed 64-bit salt per column name, so C1 and C2 hash the same value differently."""
    import hashlib

    return np.array([int.from_bytes(hashlib.sha256(n.encode()).digest()[:8], "little") for n in names], dtype=np.uint64)


class VocabularyCounter:
    """Counts raw keys per field over a stream of chunks (memory grows with distinct values).

    Each chunk's (key, count) pairs wait in a pending list; they are merged into the sorted totals only when
    the pending pairs outnumber the totals (at least MERGE_MIN), so a merge costs at most about twice the pairs
    that waited for it and the whole count is O(n log n); a merge per 1 MiB chunk made a 45M-row file quadratic
    in its distinct values. Memory: 16 bytes per distinct value and per pending pair (at most as many as the
    totals), and a merge of a field briefly needs ~8x its pairs' 16 bytes in temporaries.
    """

    MERGE_MIN = 1 << 20

    def __init__(self, n_fields: int):
        self._keys = [np.empty(0, np.uint64) for _ in range(n_fields)]
        self._counts = [np.empty(0, np.int64) for _ in range(n_fields)]
        self._pending: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(n_fields)]
        self._pending_size = [0] * n_fields

    def update(self, keys: np.ndarray, missing: np.ndarray) -> None:
        if keys.dtype != np.uint64:
            raise TypeError(f"VocabularyCounter.update: keys must be uint64 (the reader's raw keys), got {keys.dtype}")
        for j in range(keys.shape[1]):
            u, c = np.unique(keys[~missing[:, j], j], return_counts=True)
            self._pending[j].append((u, c.astype(np.int64)))
            self._pending_size[j] += u.size
            if self._pending_size[j] >= max(self._keys[j].size, self.MERGE_MIN):
                self._merge(j)

    def _merge(self, j: int) -> None:
        if not self._pending[j]:
            return
        allk = np.concatenate([self._keys[j]] + [u for u, _ in self._pending[j]])
        allc = np.concatenate([self._counts[j]] + [c for _, c in self._pending[j]])
        uk, inv = np.unique(allk, return_inverse=True)
        self._keys[j] = uk
        self._counts[j] = np.bincount(inv, weights=allc, minlength=uk.size).astype(np.int64)
        self._pending[j], self._pending_size[j] = [], 0

    def vocabularies(self, min_count: int) -> list[np.ndarray]:
        """Sorted keys seen at least min_count times, per field."""
        for j in range(len(self._keys)):
            self._merge(j)
        return [k[c >= min_count] for k, c in zip(self._keys, self._counts)]


def vocabulary_ids(keys: np.ndarray, missing: np.ndarray, vocabs: list[np.ndarray]) -> np.ndarray:
    """Ids 2.. for in-vocabulary keys, OOV_ID for rare ones, MISSING_ID for missing.

    A key's id is 2 + its position in the sorted vocabulary; a hash index of each vocabulary (built once, kept while
    the vocabulary lives) finds it ~5x faster than a binary search."""
    out = np.empty(keys.shape, np.int32)
    for j, vocab in enumerate(vocabs):
        col = keys[:, j]
        index = _vocab_index(vocab)
        if index is not None:
            pos = index.get_indexer(col)
            out[:, j] = np.where(pos >= 0, pos + 2, OOV_ID)
            continue
        pos = np.searchsorted(vocab, col)
        pos_c = np.minimum(pos, max(vocab.size - 1, 0))
        found = (vocab.size > 0) & (vocab[pos_c] == col) if vocab.size else np.zeros(col.shape, bool)
        out[:, j] = np.where(found, pos_c + 2, OOV_ID)
    out[missing] = MISSING_ID
    return out


_VOCAB_INDEX: dict[int, tuple] = {}


def _vocab_index(vocab: np.ndarray):
    """A pandas Index of a sorted, distinct uint64 vocabulary (None otherwise: the binary search decides)."""
    hit = _VOCAB_INDEX.get(id(vocab))
    if hit is not None and hit[0] is vocab:
        return hit[1]
    if vocab.dtype != np.uint64 or vocab.size == 0 or (vocab.size > 1 and not bool(np.all(vocab[1:] > vocab[:-1]))):
        return None
    import pandas as pd

    if len(_VOCAB_INDEX) >= 64:
        _VOCAB_INDEX.clear()
    index = pd.Index(vocab)
    _VOCAB_INDEX[id(vocab)] = (vocab, index)
    return index
