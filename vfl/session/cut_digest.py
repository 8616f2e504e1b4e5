"""The keyed digests that name ids on the wire.

HELLO's per-split `id_digest`, FORWARD's batch digest, EVAL's and PREDICT_ROWS' range digest.

A follower sends the cut of rows only when the leader's request names the digest of exactly the ids of those rows,
as the follower holds them; a leader that made the follower accept ids it does not hold (a forged PSI match) cannot
name them, so their cut never leaves (docs/security.md, "Cuts only of ids the leader names"). And the leader checks
that a follower's HELLO digest of each split equals its own (the intersections agree).

Every digest is HMAC-SHA-256 (RFC 2104) over int64 little-endian ids behind a header of int64s (a tag per kind, and
the range's scope, start and stop), cut to its first 128 bits (32 hex digits), under a key fresh in every session, so
a digest is no hash of the ids alone: a party cannot have computed a dictionary of id sets' digests before the
session, the same ids give unrelated digests in two sessions (nothing links them), and a digest shown to anyone
without the key (a log line, an ABORT's text) says nothing about the ids.

- `SessionDigests(run, nonce)`: FORWARD, EVAL and PREDICT_ROWS (leader -> follower). The key is derived from the
  run id, which hashes the leader's own nonce (never sent) with every follower's, and this follower's HELLO nonce:
  both parties' fresh entropy, known to neither before the WELCOME, and one key per follower (the run id alone is
  written in logs and checkpoints; the nonce is not).
- `hello_digests(nonce, ids per split)`: HELLO's (follower -> leader), sent before the leader's nonce exists. Its key
  is derived from the follower's nonce in the same HELLO: the receiver, the leader, learns it only with the digest,
  so it cannot have prepared a dictionary; the follower chooses it, but this digest is of its own ids and goes only
  to the leader (the leader's own digests never leave it), so a chosen key gains it nothing.

The header keeps the kinds apart under one key: the range digest of a whole split is not the batch digest of its
ids, so no request can be named by echoing another digest the follower sent or received.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

from vfl.splits import SPLITS

SCOPES = (*SPLITS, "predict")  # training's splits (EVAL), prediction's intersection (PREDICT_ROWS)
DIGEST_HEX = 32  # a digest's hex digits (128 bits)
RANGE_TAG = int.from_bytes(b"vflcut\x01\x00", "little")  # the header's first int64: a request for a range's cut
BATCH_TAG = int.from_bytes(b"vflbat\x01\x00", "little")  # a training batch (FORWARD)
SPLIT_TAG = int.from_bytes(b"vflspl\x01\x00", "little")  # a whole split (HELLO)
SESSION_KEY_LABEL = b"vfl/session-digest-key/v1"
HELLO_KEY_LABEL = b"vfl/hello-digest-key/v1"


def _digest(key: bytes, header: list[int], ids: np.ndarray) -> str:
    mac = hmac.new(key, np.array(header, dtype="<i8").tobytes(), hashlib.sha256)
    mac.update(np.ascontiguousarray(ids, dtype="<i8").data)
    return mac.hexdigest()[:DIGEST_HEX]


def _key(label: bytes, *parts: str) -> bytes:
    if not all(parts):
        raise ValueError("a digest key needs the session's run id and the follower's nonce, got an empty one")
    return hmac.new(label, "\0".join(parts).encode(), hashlib.sha256).digest()


class SessionDigests:
    """The digests of one session between the leader and one follower, keyed by (run id, the follower's nonce)."""

    def __init__(self, run: str, nonce: str):
        self._key = _key(SESSION_KEY_LABEL, run, nonce)

    def batch(self, ids: np.ndarray) -> str:
        """FORWARD's digest of a training batch whose ids are `ids` (in batch order)."""
        return _digest(self._key, [BATCH_TAG], ids)

    def range(self, scope: str, start: int, stop: int, ids: np.ndarray) -> str:
        """The digest that names rows [start, stop) of `scope` whose ids are `ids` (in row order): EVAL's, and
        PREDICT_ROWS' (scope "predict")."""
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
        if not 0 <= start < stop or len(ids) != stop - start:
            raise ValueError(f"range {start}..{stop} must be non-empty, from 0, and hold len(ids)={len(ids)} rows")
        return _digest(self._key, [RANGE_TAG, SCOPES.index(scope), start, stop], ids)


def hello_digests(nonce: str, ids: dict[str, np.ndarray]) -> dict[str, str]:
    """HELLO's `id_digest`: per split, the digest of its ids (ascending) under the key of the HELLO's `nonce`."""
    key = _key(HELLO_KEY_LABEL, nonce)
    return {s: _digest(key, [SPLIT_TAG, SPLITS.index(s)], ids[s]) for s in SPLITS}
