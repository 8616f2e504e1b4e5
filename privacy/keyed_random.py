"""The leader's secret keyed PRF per sample id: the only source of the draws that protect labels.

Two kinds of per-sample draws exist, and they must never be confused:

* `uniform_from_ids(ids, seed, salt)` (privacy/public_hash.py) is a *public* hash. Anyone who knows the seed can
  recompute it. It is right for decisions every party shares (the train/test split, simulated column drops) and
  wrong for anything that protects a label.
* `keyed_uniforms(key, release, purpose, ids)` is the leader's PRF. It is AES-256 applied to the
  16-byte block (sample id, purpose tag) under a per-(release, purpose) subkey
  HMAC-SHA256(key, "vfl/label-dp/prf/v1" | release | purpose). AES is a pseudorandom permutation
  (FIPS 197); on distinct blocks it is indistinguishable from a random function (PRP/PRF switching
  lemma, Bellare & Rogaway, "The security of triple encryption", Lemma 2 / "Introduction to Modern
  Cryptography" Sec. 3.6), so the uniforms look independent and uniform to anyone without the
  256-bit key. The release id goes into the subkey: two releases (different eps, mechanism, prior or
  key) draw independently, so their flips never nest.
Both are pure functions: the same inputs give the same draws, in any order and for any subset of ids.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

_U64 = np.uint64
KEY_BYTES = 32
PRF_DOMAIN = b"vfl/label-dp/prf/v1"


def _purpose_tag(purpose: str) -> int:
    return int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:8], "little")


def key_error(key) -> str | None:
    """None for a label-DP key (KEY_BYTES bytes), else the one-line error naming what was given."""
    if isinstance(key, (bytes, bytearray)) and len(key) == KEY_BYTES:
        return None
    got = f"{len(key)} bytes" if isinstance(key, (bytes, bytearray)) else type(key).__name__
    return f"key must be {KEY_BYTES} secret random bytes (secrets.token_bytes({KEY_BYTES})), got {got}"


def _check_key(key: bytes) -> bytes:
    err = key_error(key)
    if err:
        raise ValueError(f"the label-DP {err}")
    return bytes(key)


def prf_subkey(key: bytes, release: str, purpose: str) -> bytes:
    """HMAC-SHA256(key, domain | release | purpose): the AES key of one (release, purpose)."""
    msg = b"|".join([PRF_DOMAIN, release.encode(), purpose.encode()])
    return hmac.new(_check_key(key), msg, hashlib.sha256).digest()


def keyed_words(key: bytes, release: str, purpose: str, ids: np.ndarray) -> np.ndarray:
    """64 pseudorandom bits per id: the first half of AES-256_subkey(id || tag(purpose))."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be one-dimensional, got shape {ids.shape}")
    blocks = np.empty((ids.size, 2), dtype="<u8")
    blocks[:, 0] = ids.astype("<i8").view("<u8")
    blocks[:, 1] = _purpose_tag(purpose)
    # ECB over distinct blocks is the PRP evaluated pointwise (each (id, purpose) block is unique)
    enc = Cipher(algorithms.AES(prf_subkey(key, release, purpose)), modes.ECB()).encryptor()
    out = enc.update(blocks.tobytes()) + enc.finalize()
    return np.frombuffer(out, dtype="<u8").reshape(-1, 2)[:, 0].astype(np.uint64)


def keyed_uniforms(key: bytes, release: str, purpose: str, ids: np.ndarray) -> np.ndarray:
    """A secret U[0, 1) draw per id (53 bits), unpredictable without the leader's key."""
    return (keyed_words(key, release, purpose, ids) >> _U64(11)).astype(np.float64) * (1.0 / (1 << 53))
