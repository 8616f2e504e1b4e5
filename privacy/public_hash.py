"""Public hashes of sample ids: splitmix64 and a U[0, 1) draw per id that anyone who knows the seed can recompute.

Right for decisions every party shares and may replay (the train/valid/test split, hash buckets of categorical
values, simulated column drops, synthetic data); wrong for anything that protects a label, which draws from the
leader's keyed PRF (privacy/keyed_random.py). The label-leakage attacks replay these hashes to show that.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64
_MASK64 = 0xFFFFFFFFFFFFFFFF


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective, well-mixing 64-bit hash."""
    z = np.asarray(x, dtype=np.uint64) + _U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def uniform_from_ids(ids: np.ndarray, seed: int, salt: int = 0) -> np.ndarray:
    """A public U[0, 1) draw per id (53 bits); a pure function of (id, seed, salt) that anyone can replay."""
    key = splitmix64(np.asarray([(seed ^ (salt * 0x9E3779B97F4A7C15)) & _MASK64], dtype=np.uint64))[0]
    h = splitmix64(np.asarray(ids).astype(np.int64).view(np.uint64) ^ key)
    return (h >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))
