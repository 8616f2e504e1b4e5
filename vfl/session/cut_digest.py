"""The digest that binds a request for a range's cut to the ids of its rows: EVAL and PREDICT_ROWS carry it.

A follower sends the cut of a range of rows only when the leader's request names the digest of exactly the ids of
those rows, as the follower holds them; a leader that made the follower accept ids it does not hold (a forged PSI
match) cannot name them, so their cut never leaves (docs/security.md, "Cuts only of ids the leader names").

The hash is FORWARD's `batch_digest` (the first 128 bits of SHA-256 over int64 little-endian ids), over the ids
behind a header of four int64s: a tag, the scope (a split, or prediction's intersection), start and stop. The header
keeps it apart from every other digest of the same ids: HELLO's per-split `id_digest` is SHA-256 of a split's ids in
the same ascending order, so a bare digest of a whole split's range would equal its first 32 hex digits, which a
leader could echo from the follower's own HELLO without knowing a single id.
"""

from __future__ import annotations

import numpy as np

from vfl.data.shards import batch_digest
from vfl.splits import SPLITS

SCOPES = (*SPLITS, "predict")  # training's splits (EVAL), prediction's intersection (PREDICT_ROWS)
RANGE_TAG = int.from_bytes(b"vflcut\x01\x00", "little")  # the header's first int64: a request for a range's cut


def range_digest(scope: str, start: int, stop: int, ids: np.ndarray) -> str:
    """The 32 hex digits that name rows [start, stop) of `scope` whose ids are `ids` (in row order)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    if not 0 <= start < stop or len(ids) != stop - start:
        raise ValueError(f"range {start}..{stop} must be non-empty, from 0, and hold len(ids)={len(ids)} rows")
    header = np.array([RANGE_TAG, SCOPES.index(scope), start, stop], dtype="<i8")
    return batch_digest(np.concatenate([header, np.asarray(ids, dtype="<i8")]))
