"""ECDH-PSI primitives over Curve25519, computed by libsodium (through PyNaCl).

The protocol is the Diffie-Hellman PSI of Huberman, Franklin and Hogg (EC'99, Sec. 3; Meadows 1986):
each side raises the hashes of its ids to a secret exponent, the other side raises them again, and
H(x)^(ab) = H(y)^(ab) exactly when x = y. Under the decisional Diffie-Hellman assumption in the
random-oracle model a value H(x)^a (or H(x)^(ab)) of an id the other side does not hold is
indistinguishable from a random group element, so nothing about non-matching ids is revealed.

- Hash to the group: P = E(h[:32]) + E(h[32:]) on Edwards25519 with h = SHA-512(domain | int64 id) and E
  libsodium's Elligator 2 map with cofactor clearing (crypto_core_ed25519_from_uniform): the two-map
  random-oracle construction of RFC 9380, Sec. 3 (hash_to_curve), so P behaves as a random oracle into
  the prime-order subgroup. H(id) is P's Montgomery u-coordinate u = (1 + y) / (1 - y) (RFC 7748, Sec. 4.1).
- Exponentiation: X25519 (crypto_scalarmult, RFC 7748 Sec. 5) with a 32-byte secret from the OS. X25519
  clamps the scalar to a multiple of the cofactor 8, so a peer's point with a small-order component (or on
  the twist) reveals nothing about the secret; an all-zero result (small-order input) is refused, and so is
  a non-canonical u. X25519 is commutative on u-coordinates, and u identifies a point up to sign, so a
  match means H(x) = +-H(y): a collision of a 253-bit hash.
PyNaCl 1.6 does not bind libsodium's ristretto255 functions; its Ed25519 point multiplication (which
re-checks subgroup membership) measured 3x slower here than X25519, which is why the exponentiations
run on the Montgomery form.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import secrets

import numpy as np
from nacl import bindings as sodium
from nacl.exceptions import CryptoError
from nacl.exceptions import RuntimeError as NaclRuntimeError

SUITE = "ecdh-psi/x25519-elligator2x2-sha512/v1"
POINT_BYTES = 32
_DOMAIN = b"vfl-psi/ed25519/v1\0"
_P = 2**255 - 19


class PointError(ValueError):
    """A peer's value is not an encoding of a point of the prime-order group."""


def new_exponent() -> bytes:
    """A fresh 32-byte secret from the OS (X25519 clamps it)."""
    return secrets.token_bytes(32)


PARALLEL_MIN = 2048  # below this many values a batch runs in the calling process
_pool = None


def _workers():
    """This party's worker processes (one per core, at most 8), started on first use; None on one core."""
    global _pool
    if _pool is None:
        n = min(os.cpu_count() or 1, 8)
        _pool = mp.get_context("fork").Pool(n) if n > 1 else False
    return _pool or None


def _parallel(fn, arr: np.ndarray, *args) -> np.ndarray:
    pool = _workers() if arr.shape[0] >= PARALLEL_MIN else None
    if pool is None:
        return fn(arr, *args)
    parts = np.array_split(arr, pool._processes)
    return np.concatenate(pool.starmap(fn, [(p, *args) for p in parts]))


def hash_ids(ids: np.ndarray) -> np.ndarray:
    """H(id) for int64 ids: uint8 (n, 32) Montgomery u-coordinates of points of the prime-order subgroup."""
    return _parallel(_hash_ids, np.ascontiguousarray(ids, dtype="<i8"))


def raise_to(points: np.ndarray, exponent: bytes) -> np.ndarray:
    """X25519(exponent, u) for every u-coordinate (uint8 (n, 32)); PointError names the first invalid one."""
    return _parallel(_raise_to, np.ascontiguousarray(points, dtype=np.uint8).reshape(-1, POINT_BYTES), exponent)


def _hash_ids(ids: np.ndarray) -> np.ndarray:
    ids = np.ascontiguousarray(ids, dtype="<i8")
    out = np.empty((ids.size, POINT_BYTES), np.uint8)
    raw = ids.tobytes()
    from_uniform, add = sodium.crypto_core_ed25519_from_uniform, sodium.crypto_core_ed25519_add
    mask = (1 << 255) - 1
    for i in range(ids.size):
        h = hashlib.sha512(_DOMAIN + raw[8 * i : 8 * i + 8]).digest()
        y = int.from_bytes(add(from_uniform(h[:32]), from_uniform(h[32:])), "little") & mask
        if y == 1:  # the identity: probability 2**-252
            raise PointError(f"id {int(ids[i])} hashes to the identity")
        u = (1 + y) * pow(1 - y, -1, _P) % _P
        out[i] = np.frombuffer(u.to_bytes(32, "little"), np.uint8)
    return out


def _raise_to(points: np.ndarray, exponent: bytes) -> np.ndarray:
    points = np.ascontiguousarray(points, dtype=np.uint8).reshape(-1, POINT_BYTES)
    out = np.empty_like(points)
    raw = points.tobytes()
    mult = sodium.crypto_scalarmult
    for i in range(points.shape[0]):
        u = raw[POINT_BYTES * i : POINT_BYTES * (i + 1)]
        if int.from_bytes(u, "little") >= _P:
            raise PointError(f"value {i} is not a canonical u-coordinate (>= 2**255 - 19)")
        try:
            out[i] = np.frombuffer(mult(exponent, u), np.uint8)
        except (CryptoError, NaclRuntimeError, ValueError, TypeError):
            raise PointError(f"value {i} is a point of small order (the result would be zero)") from None
    return out


def mask_ids(ids: np.ndarray, exponent: bytes) -> np.ndarray:
    """H(id)^exponent for int64 ids."""
    return raise_to(hash_ids(ids), exponent)


def as_wire(points: np.ndarray) -> np.ndarray:
    """uint8 (n, 32) points -> int64 (n, 4), a dtype the frames carry (bytes unchanged)."""
    return np.ascontiguousarray(points, dtype=np.uint8).view("<i8").reshape(-1, POINT_BYTES // 8)


def from_wire(arr: np.ndarray) -> np.ndarray:
    """int64 (n, 4) from the frames -> uint8 (n, 32) points."""
    return np.ascontiguousarray(arr, dtype="<i8").view(np.uint8).reshape(-1, POINT_BYTES)


def point_set(points: np.ndarray) -> dict[bytes, int]:
    """{encoded point: its row} for exact matching."""
    raw = np.ascontiguousarray(points, dtype=np.uint8).tobytes()
    return {raw[POINT_BYTES * i : POINT_BYTES * (i + 1)]: i for i in range(len(raw) // POINT_BYTES)}
