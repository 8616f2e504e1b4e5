"""The knobs of `python -m vfl.data prepare` (PrepareOptions, checked in one place) and the public split rule.

A sample's split (train, valid or test) is a public function of its id (`split_of`: uniform_from_ids with the
options' seed and SPLIT_SALT), so after the private set intersection every party's splits agree without a message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privacy.public_hash import uniform_from_ids
from vfl.data.errors import DataError
from vfl.data.task import MAX_CLASSES

SPLIT_SALT = 0x5B1175


@dataclass(frozen=True)
class PrepareOptions:
    """Knobs of `python -m vfl.data prepare`."""

    test_fraction: float = 0.1
    valid_fraction: float = 0.1
    seed: int = 0
    strict: bool = False
    hash_buckets: int = 100_000
    vocab_min_count: int | None = None  # None: hash mode
    truth_path: str | None = None
    force: bool = False
    num_classes: int = 2  # 2: a 0/1 label; K > 2: class ids 0..K-1 (a multi-class label column)


def validate_options(opts: PrepareOptions) -> None:
    """DataError naming every option outside its domain."""
    errors = []
    if not 0.0 <= opts.test_fraction < 1.0:
        errors.append(f"test_fraction must be in [0, 1), got {opts.test_fraction}")
    if not 0.0 <= opts.valid_fraction < 1.0 or opts.test_fraction + opts.valid_fraction >= 1.0:
        errors.append(
            f"valid_fraction must be in [0, 1) with test_fraction + valid_fraction < 1, "
            f"got valid_fraction={opts.valid_fraction} (test_fraction={opts.test_fraction})"
        )
    if opts.hash_buckets < 3 or opts.hash_buckets > 2**31 - 1:
        errors.append(f"hash_buckets must be in [3, 2**31-1], got {opts.hash_buckets}")
    if (
        isinstance(opts.num_classes, bool)
        or not isinstance(opts.num_classes, int)
        or not 2 <= opts.num_classes <= MAX_CLASSES
    ):
        errors.append(f"num_classes must be an integer in [2, {MAX_CLASSES}], got {opts.num_classes!r}")
    if opts.vocab_min_count is not None and opts.vocab_min_count < 1:
        errors.append(f"vocab_min_count must be >= 1, got {opts.vocab_min_count}")
    if errors:
        raise DataError("; ".join(errors))


def split_of(ids: np.ndarray, opts: PrepareOptions) -> np.ndarray:
    """0 train, 1 valid, 2 test: a public function of the id, identical at every party."""
    u = uniform_from_ids(ids, opts.seed, SPLIT_SALT)
    return np.where(u < opts.test_fraction, 2, np.where(u < opts.test_fraction + opts.valid_fraction, 1, 0))
