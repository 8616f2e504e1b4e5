"""Keyed noise for embedding DP: a cut row's noise is a PRF of the follower's key, the row's id and the value released.

Sending the same value again is then the same bytes, and tells the leader nothing new.

Why keyed. With fresh noise per send, a leader that asks for one row's cut R times (R copies in one serving request,
R prediction runs, a resumed training) averages the noise down by sqrt(R). Here the noise of a release is
`keyed_gaussian(key, row_digest(id, value))`: a pseudorandom function of a secret only the follower holds (derived
from its CurveZMQ secret key by `noise_key`, HMAC-SHA256, RFC 2104) and of what is released. So:

- the same row id with the same clipped value (same weights, same features) gives the same noise: a repeat or a
  replay is bit-identical to the first send and is post-processing of that one release (free);
- any other value (new weights, a training step, changed features) or any other id gets noise independent of every
  earlier draw (the PRF's outputs on distinct inputs are indistinguishable from independent uniforms), so each is one
  Gaussian-mechanism release, and is charged as one by the send ledger (privacy/embedding_ledger.py).

The released value is fixed before it is hashed: the clipped row is rounded toward zero onto a grid of clip * 2^-12
(`quantized_rows`), which never raises its norm (so the L2 sensitivity stays 2 * clip) and makes two computations of
the same row that differ in the last float bits (another batch size, the ONNX engine) hash alike almost always; when
they do not, the value is a new release with fresh noise, charged like any other. Scoring goes one step further
(vfl/session/cut_release.py): a value within REUSE_STEPS grid steps of one the ledger already released for the id is
replaced by it, so two engines (torch, ONNX) or batch layouts re-send the first release's bytes.

What a repeat reveals: that the row's value did not change (or moved less than the reuse tolerance). The guarantee is
for replace-one neighbours of a table that stays the same for one model's scoring; a row whose features change is a
new release (charged), and that it changed is visible to the leader (docs/label-dp.md, the follower's side).

The PRF is keyed BLAKE2b (RFC 7693, section 2.5: keyed hashing is a PRF/MAC) in counter mode over the row digest;
its 64-bit words become uniforms in (0, 1) and Box-Muller (Box & Muller 1958) turns pairs of them into N(0, 1). This
is computational DP: against an adversary who cannot tell the PRF from random, the mechanism is the Gaussian one of
privacy/embedding_dp.py. Pure functions; no global random state.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

NOISE_KEY_DOMAIN = b"vfl/embedding-dp/noise-key/v1"
LEDGER_KEY_DOMAIN = b"vfl/embedding-dp/ledger-key/v1"
ROW_DOMAIN = b"vfl/embedding-dp/row/v1|"
GRID_BITS = 12  # the released clipped value lies on a grid of clip * 2^-GRID_BITS
REUSE_STEPS = 4  # scoring: a value this many grid steps (L-inf) from an earlier release of the id re-sends that one
_BLOCK = 64  # BLAKE2b's largest digest: 8 uniforms a call


def noise_key(secret: bytes) -> bytes:
    """The follower's noise key: HMAC-SHA256(its CurveZMQ secret key, a fixed domain); 32 bytes no other party has."""
    if len(secret) < 16:
        raise ValueError(f"embedding DP: the secret key must be at least 16 bytes, got {len(secret)}")
    return hmac.new(secret, NOISE_KEY_DOMAIN, hashlib.sha256).digest()


def ledger_key(secret: bytes) -> bytes:
    """The key that MACs the follower's send ledger (independent of the noise key)."""
    if len(secret) < 16:
        raise ValueError(f"embedding DP: the secret key must be at least 16 bytes, got {len(secret)}")
    return hmac.new(secret, LEDGER_KEY_DOMAIN, hashlib.sha256).digest()


def quantized_rows(clipped: np.ndarray, clip: float) -> np.ndarray:
    """float32 rows rounded toward zero onto the grid clip * 2^-GRID_BITS (no coordinate grows, so no norm does)."""
    step = float(clip) * 2.0**-GRID_BITS
    return (np.trunc(np.asarray(clipped, np.float64) / step) * step).astype(np.float32)


def row_digests(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One 16-byte digest per row of (int64 id, float32 released value), as a (n, 2) uint64 array (hi, lo)."""
    ids = np.ascontiguousarray(ids, "<i8").ravel()
    values = np.ascontiguousarray(values, "<f4")
    if values.ndim != 2 or values.shape[0] != ids.size:
        raise ValueError(f"row_digests: {ids.size} ids for values of shape {values.shape}")
    out = np.empty((ids.size, 2), np.uint64)
    raw_ids, raw_values = ids.tobytes(), values.tobytes()
    width = values.shape[1] * 4
    for i in range(ids.size):
        h = hashlib.blake2b(ROW_DOMAIN, digest_size=16)
        h.update(raw_ids[8 * i : 8 * i + 8])
        h.update(raw_values[width * i : width * (i + 1)])
        out[i] = np.frombuffer(h.digest(), "<u8")
    return out


def keyed_uniforms(key: bytes, digests: np.ndarray, count: int) -> np.ndarray:
    """(n, count) float64 uniforms in (0, 1): keyed BLAKE2b(digest || block counter) in counter mode, 53 bits each."""
    digests = np.ascontiguousarray(digests, "<u8")
    blocks = -(-count // 8)
    raw = bytearray()
    for row in digests:
        base = row.tobytes()
        for b in range(blocks):
            raw += hashlib.blake2b(base + b.to_bytes(4, "little"), key=key, digest_size=_BLOCK).digest()
    words = np.frombuffer(bytes(raw), "<u8").reshape(len(digests), blocks * 8)[:, :count]
    return ((words >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def keyed_gaussian(key: bytes, digests: np.ndarray, dim: int) -> np.ndarray:
    """(n, dim) float64 N(0, 1) draws, a function of (key, each row's digest) only (Box-Muller on keyed uniforms)."""
    pairs = -(-dim // 2)
    u = keyed_uniforms(key, digests, 2 * pairs)
    radius = np.sqrt(-2.0 * np.log(u[:, :pairs]))
    angle = 2.0 * np.pi * u[:, pairs:]
    return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)], axis=1)[:, :dim]


def keyed_release(key: bytes, ids: np.ndarray, clipped: np.ndarray, clip: float, std: float):
    """The released rows of clipped cut rows with their ids: (float32 quantized + keyed noise, the rows' digests)."""
    return keyed_noised(key, ids, quantized_rows(clipped, clip), std)


def keyed_noised(key: bytes, ids: np.ndarray, values: np.ndarray, std: float):
    """Quantized rows plus their keyed noise: (float32 released rows, the rows' digests)."""
    digests = row_digests(ids, values)
    noise = keyed_gaussian(key, digests, values.shape[1])
    return (values.astype(np.float64) + std * noise).astype(np.float32), digests
