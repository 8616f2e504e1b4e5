"""Rank slices of a global batch and of an evaluation split, and the loss weights that make N ranks equal one.

Every rank derives the same global batch order from the shared seed (vfl/data/shards.py batch_order) and
takes the contiguous slice r of each batch, so that the leader's rank r and each follower's rank r hold
the same rows. With mean losses L_r over n_r rows of a global batch of B rows, rank r back-propagates
w_r L_r with w_r = N n_r / B: DistributedDataParallel averages gradients over the N ranks, so the
result is sum_r n_r grad(L_r) / B, the gradient of the global-batch mean even when the slices differ in size.
"""

from __future__ import annotations

import numpy as np


def slice_bounds(n: int, rank: int, ranks: int) -> tuple[int, int]:
    """[lo, hi) of rank's contiguous share of n items (sizes differ by at most one, larger first)."""
    base, extra = divmod(n, ranks)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def rank_rows(rows: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """This rank's rows of one global batch."""
    lo, hi = slice_bounds(len(rows), rank, ranks)
    return rows[lo:hi]


def loss_weight(local_rows: int, global_rows: int, ranks: int) -> float:
    """w_r = N n_r / B (see the module docstring); 1 for one rank."""
    return ranks * local_rows / global_rows


def smallest_batch(n_train: int, batch_size: int) -> int:
    """Rows of the smallest global batch of an epoch (the last one may be partial)."""
    return min(batch_size, n_train - (-(-n_train // batch_size) - 1) * batch_size) if n_train else 0


def check_batches(n_train: int, batch_size: int, ranks: int) -> None:
    """Every rank must hold at least one row of every global batch (a mean over no rows is undefined)."""
    small = smallest_batch(n_train, batch_size)
    if ranks > 1 and small < ranks:
        raise ValueError(
            f"with {ranks} ranks every global batch needs at least {ranks} rows, but the last batch of an "
            f"epoch of {n_train} training rows at train.batch_size={batch_size} has {small}; "
            f"change train.batch_size"
        )
