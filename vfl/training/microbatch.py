"""train.microbatches: cut each batch into M micro-batches, accumulate their gradients, step once per batch.

Every party cuts a batch the same way (micro_slices is a function of the batch's row count and M only),
so no index travels except the micro-batch number j that EMBEDDING and GRADIENT carry and each side checks.
Each micro-batch's mean loss is weighted by its share of the batch rows, so the accumulated gradient is
the full batch's mean-loss gradient up to float summation order (and exactly the same computation at M = 1).
The follower sends all M embeddings before it waits for the first gradient: the leader runs the top of
micro-batch j while the follower still computes j + 1. So while the leader waits for one follower's embedding j,
another may already have sent j .. M-1: the leader's channel reads every party's messages off one socket, in arrival
order, and must hold up to M unread messages per follower during a step (pipelined), one outside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import torch


class _Inbox(Protocol):
    ahead: int  # unread messages a party may have queued at the leader (vfl/wire/leader_channel.py)
    ahead_bytes: int | None  # the most bytes a message queued behind another may hold (None: the channel's limit)


def micro_slices(n_rows: int, microbatches: int) -> list[slice]:
    """Consecutive slices of a batch of n_rows: min(M, n_rows) parts whose sizes differ by at most one."""
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"train.microbatches must be an integer >= 1, got {microbatches!r}")
    if n_rows < 1:
        raise ValueError(f"a batch must hold at least one row, got {n_rows}")
    m = min(microbatches, n_rows)
    q, r = divmod(n_rows, m)
    out, start = [], 0
    for j in range(m):
        stop = start + q + (1 if j < r else 0)
        out.append(slice(start, stop))
        start = stop
    return out


def weighted_loss(loss: torch.Tensor, part_rows: int, batch_rows: int) -> torch.Tensor:
    """A micro-batch's mean loss scaled to its share of the batch (untouched when it is the whole batch)."""
    return loss if part_rows == batch_rows else loss * (part_rows / batch_rows)


def check_micro(got: int | None, expected: int, what: str, error: type[Exception]) -> None:
    """A peer's EMBEDDING or GRADIENT must name the micro-batch this side expects next (`got`: its micro field)."""
    if isinstance(got, bool) or not isinstance(got, int) or got != expected:
        raise error(
            f"{what}: expected micro-batch {expected} (an integer in [0, train.microbatches)), "
            f"got micro {str(got)[:20]!r}"
        )


@contextmanager
def pipelined(channel: _Inbox, depth: int, ahead_bytes: int | None = None) -> Iterator[None]:
    """Within: each party may be up to `depth` messages ahead at the leader's channel (a step's M embeddings), and a
    message queued behind another may hold at most `ahead_bytes` (one micro-batch's embedding), so a follower cannot
    pin M messages of the channel's full size; one message and no byte bound again afterwards, also when the step
    fails. A party ahead by more is refused by the channel."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"a pipelined depth must be an integer of at least 1, got {depth!r}")
    if ahead_bytes is not None and (
        isinstance(ahead_bytes, bool) or not isinstance(ahead_bytes, int) or ahead_bytes < 1
    ):
        raise ValueError(f"a pipelined byte bound must be a positive integer or None, got {ahead_bytes!r}")
    channel.ahead, channel.ahead_bytes = depth, ahead_bytes
    try:
        yield
    finally:
        channel.ahead, channel.ahead_bytes = 1, None


def embedding_bytes_bound(micro_rows: int, cut_dims) -> int:
    """The most bytes one micro-batch's EMBEDDING of `micro_rows` rows may take on the wire: its float32 cut of the
    widest follower, plus 64 KiB for the frames' headers."""
    return int(micro_rows) * max(cut_dims, default=1) * 4 + 65_536
