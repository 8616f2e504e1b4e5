"""Batched DLEQ proofs over ristretto255 (RFC 9497 Sec. 2.2), composed from libsodium's group operations.

A proof that every D[i] is C[i] raised to the one secret scalar k behind a public key B = k * G (G the ristretto255
generator): Chaum and Pedersen's proof of equal discrete logarithms (CRYPTO'92), made non-interactive by Fiat-Shamir
and batched by a random linear combination whose coefficients are hashes of the statement, exactly as RFC 9497
(OPRFs using prime-order groups) specifies it for the VOPRF mode:

- ComputeComposites (Sec. 2.2.1): seed = Hash(I2OSP(len(Bm), 2) || Bm || I2OSP(len(seedDST), 2) || seedDST),
  seedDST = "Seed-" || contextString; d_i = HashToScalar(I2OSP(len(seed), 2) || seed || I2OSP(i, 2) ||
  I2OSP(len(Ci), 2) || Ci || I2OSP(len(Di), 2) || Di || "Composite"); M = sum d_i C_i, Z = sum d_i D_i. The prover,
  who knows k, computes Z = k M instead (ComputeCompositesFast).
- GenerateProof (Sec. 2.2.1): r random, t2 = r G, t3 = r M, c = HashToScalar(I2OSP(len(Bm), 2) || Bm || ... M ... Z
  ... t2 ... t3 || "Challenge"), s = r - c k; the proof is c || s (64 bytes).
- VerifyProof (Sec. 2.2.2): recompute M and Z, t2 = s G + c B, t3 = s M + c Z, and accept when the challenge is c.
- The suite ristretto255-SHA512 (Sec. 4.1): contextString = "OPRFV1-" || I2OSP(mode, 1) || "-ristretto255-SHA512"
  (mode 0x01, VOPRF); HashToScalar = expand_message_xmd with SHA-512 (RFC 9380 Sec. 5.3.1) to 64 bytes under DST
  "HashToScalar-" || contextString, read little-endian and reduced mod the group order; HashToGroup = the same
  expansion under "HashToGroup-" || contextString into RFC 9496's element derivation (hash_to_ristretto255).

Soundness (RFC 9497 Sec. 2.2 and its references: Chaum-Pedersen; the batching of Henry's thesis, Sec. 3.3.2, and
Ryan Henry and Ian Goldberg's batch DLEQ): if some D[i] != k C[i], the d_i, fixed by the hash of that very D[i]
before the challenge, make Z != k M except with probability about 1/L per hash query, and then no (c, s) passes.
Every group operation is libsodium's (crypto_scalarmult_ristretto255[_base], crypto_core_ristretto255_add, its scalar
arithmetic), which refuses a non-canonical or invalid encoding; a refusal while verifying is a failed proof.
tests/align/test_psi_dleq.py checks this module against RFC 9497 Appendix A.1 (ristretto255-SHA512: DeriveKeyPair, the
blinded and evaluated elements, and the VOPRF proofs of batch size 1 and 2 with their fixed ProofRandomScalar).

The proof scalar r is fresh from the OS (libsodium's scalar reduction of 64 random bytes) unless a test passes the
RFC's fixed one. Composites of PARALLEL_MIN items or more run on the PSI's worker processes (ecdh.py), each a
contiguous part of the items with its own indices i, whose partial sums are then added: the same M and Z.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import secrets

import numpy as np

from vfl.align.psi import ecdh

MODE_OPRF, MODE_VOPRF = 0x00, 0x01
IDENTIFIER = b"ristretto255-SHA512"
GENERATOR = bytes.fromhex("e2f2ae0a6abc4e71a884a961c500515f58e30b6aa582dd8db6a65945e08d2d76")  # RFC 9496 Sec. 4.4
ORDER = 2**252 + 27742317777372353535851937790883648493  # L, RFC 9496 Sec. 4
PROOF_BYTES = 64  # c || s
MAX_BATCH = 1 << 16  # the composite's index is I2OSP(i, 2)


class ProofError(ValueError):
    """A group operation refused its input (an invalid encoding, or an identity result) while composing a proof."""


def context_string(mode: int = MODE_VOPRF) -> bytes:
    """RFC 9497 Sec. 3.1: "OPRFV1-" || I2OSP(mode, 1) || "-" || identifier."""
    return b"OPRFV1-" + bytes([mode]) + b"-" + IDENTIFIER


CONTEXT = context_string(MODE_VOPRF)


def _i2osp(x: int, n: int) -> bytes:
    return x.to_bytes(n, "big")


def _lv(b: bytes) -> bytes:
    """I2OSP(len(b), 2) || b, as every RFC 9497 transcript frames its parts."""
    return _i2osp(len(b), 2) + b


def expand_message_xmd(msg: bytes, dst: bytes, length: int) -> bytes:
    """RFC 9380 Sec. 5.3.1 with SHA-512 (b_in_bytes 64, s_in_bytes 128)."""
    ell = -(-length // 64)
    if ell > 255 or length > 65535 or len(dst) > 255:
        raise ValueError(f"expand_message_xmd: length {length} or DST of {len(dst)} bytes out of range")
    dst_prime = dst + _i2osp(len(dst), 1)
    b0 = hashlib.sha512(bytes(128) + msg + _i2osp(length, 2) + b"\x00" + dst_prime).digest()
    out = [hashlib.sha512(b0 + b"\x01" + dst_prime).digest()]
    for i in range(2, ell + 1):
        out.append(hashlib.sha512(bytes(x ^ y for x, y in zip(b0, out[-1])) + _i2osp(i, 1) + dst_prime).digest())
    return b"".join(out)[:length]


def reduce_wide(wide: bytes) -> bytes:
    """A 64-byte little-endian integer mod L, as a 32-byte scalar (libsodium's scalar_reduce)."""
    out = ctypes.create_string_buffer(32)
    ecdh.sodium().crypto_core_ristretto255_scalar_reduce(out, wide)
    return out.raw


def hash_to_scalar(msg: bytes, dst: bytes | None = None) -> bytes:
    """RFC 9497 Sec. 4.1 HashToScalar for ristretto255-SHA512 (DST "HashToScalar-" || contextString unless given)."""
    return reduce_wide(expand_message_xmd(msg, b"HashToScalar-" + CONTEXT if dst is None else dst, 64))


def hash_to_group(msg: bytes, context: bytes = CONTEXT) -> bytes:
    """RFC 9497 Sec. 4.1 HashToGroup: hash_to_ristretto255 (RFC 9380) with expand_message_xmd SHA-512."""
    return bytes(ecdh.from_digests(expand_message_xmd(msg, b"HashToGroup-" + context, 64))[0])


def derive_key_pair(seed: bytes, info: bytes, context: bytes = CONTEXT) -> tuple[bytes, bytes]:
    """RFC 9497 Sec. 3.2.1 DeriveKeyPair: (skS, pkS)."""
    derive_input = seed + _lv(info)
    for counter in range(256):
        sk = hash_to_scalar(derive_input + _i2osp(counter, 1), b"DeriveKeyPair" + context)
        if any(sk):
            return sk, base_mult(sk)
    raise ValueError("DeriveKeyPair: no nonzero scalar in 256 tries")


def is_scalar(s: bytes) -> bool:
    """A canonical 32-byte scalar (below L), as DeserializeScalar requires."""
    return len(s) == 32 and int.from_bytes(s, "little") < ORDER


def random_scalar() -> bytes:
    """A uniform nonzero scalar from the OS: 64 random bytes reduced mod L."""
    while True:
        s = reduce_wide(secrets.token_bytes(64))
        if any(s):
            return s


def mult(k: bytes, p: bytes) -> bytes:
    out = ctypes.create_string_buffer(32)
    if ecdh.sodium().crypto_scalarmult_ristretto255(out, k, p):
        raise ProofError("a scalar multiplication refused its point (invalid encoding or an identity result)")
    return out.raw


def base_mult(k: bytes) -> bytes:
    out = ctypes.create_string_buffer(32)
    if ecdh.sodium().crypto_scalarmult_ristretto255_base(out, k):
        raise ProofError("a base-point multiplication gave the identity")
    return out.raw


def add(p: bytes, q: bytes) -> bytes:
    out = ctypes.create_string_buffer(32)
    if ecdh.sodium().crypto_core_ristretto255_add(out, p, q):
        raise ProofError("an addition refused its point (invalid encoding)")
    return out.raw


def _scalar_op(fn: str, x: bytes, y: bytes) -> bytes:
    out = ctypes.create_string_buffer(32)
    getattr(ecdh.sodium(), f"crypto_core_ristretto255_scalar_{fn}")(out, x, y)
    return out.raw


def _seed(b: bytes) -> bytes:
    return hashlib.sha512(_lv(b) + _lv(b"Seed-" + CONTEXT)).digest()


def _composite_part(c: np.ndarray, d: np.ndarray, seed: bytes, offset: int, both: bool) -> tuple[bytes, bytes | None]:
    """sum d_i C_i (and sum d_i D_i when both) over rows offset.. of one part of a batch (uint8 (n, 32) each)."""
    lib = ecdh.sodium()
    dst = b"HashToScalar-" + CONTEXT
    dst_prime = dst + _i2osp(len(dst), 1)
    head = hashlib.sha512(bytes(128) + _lv(seed))  # expand_message_xmd's Z_pad || the transcript's first part
    tail = b"Composite" + _i2osp(64, 2) + b"\x00" + dst_prime
    craw, draw = c.tobytes(), d.tobytes()
    wide, di, prod = ctypes.create_string_buffer(64), ctypes.create_string_buffer(32), ctypes.create_string_buffer(32)
    acc = [None, None]
    for j in range(c.shape[0]):
        ci, dj = craw[32 * j : 32 * j + 32], draw[32 * j : 32 * j + 32]
        h = head.copy()
        h.update(_i2osp(offset + j, 2) + b"\x00\x20" + ci + b"\x00\x20" + dj + tail)
        wide.raw = hashlib.sha512(h.digest() + b"\x01" + dst_prime).digest()
        lib.crypto_core_ristretto255_scalar_reduce(di, wide)
        for slot, point in enumerate((ci, dj) if both else (ci,)):
            if lib.crypto_scalarmult_ristretto255(prod, di, point):
                raise ProofError(f"value {offset + j} is not the canonical encoding of a ristretto255 element")
            if acc[slot] is None:
                acc[slot] = prod.raw
            elif lib.crypto_core_ristretto255_add(prod, prod, acc[slot]):
                raise ProofError("an addition refused its point")
            else:
                acc[slot] = prod.raw
    return acc[0], acc[1]


def _sum(points) -> bytes:
    total = None
    for p in points:
        total = p if total is None else add(total, p)
    return total


def compute_composites(b: bytes, c: np.ndarray, d: np.ndarray, k: bytes | None = None) -> tuple[bytes, bytes]:
    """(M, Z) of RFC 9497 ComputeComposites, or ComputeCompositesFast (Z = k M) when the prover's k is given."""
    c = np.ascontiguousarray(c, np.uint8).reshape(-1, 32)
    d = np.ascontiguousarray(d, np.uint8).reshape(-1, 32)
    if not 0 < c.shape[0] == d.shape[0] <= MAX_BATCH:
        raise ValueError(f"a DLEQ batch holds 1..{MAX_BATCH} pairs, got {c.shape[0]} and {d.shape[0]}")
    seed, both = _seed(b), k is None
    pool = ecdh._workers() if c.shape[0] >= ecdh.PARALLEL_MIN else None
    if pool is None:
        parts = [_composite_part(c, d, seed, 0, both)]
    else:
        bounds = np.linspace(0, c.shape[0], pool._processes + 1).astype(int)
        jobs = [(c[s:e], d[s:e], seed, int(s), both) for s, e in zip(bounds[:-1], bounds[1:]) if e > s]
        parts = pool.starmap(_composite_part, jobs)
    m = _sum(p[0] for p in parts)
    return m, (_sum(p[1] for p in parts) if both else mult(k, m))


def _challenge(b: bytes, m: bytes, z: bytes, t2: bytes, t3: bytes) -> bytes:
    return hash_to_scalar(_lv(b) + _lv(m) + _lv(z) + _lv(t2) + _lv(t3) + b"Challenge")


def generate_proof(k: bytes, b: bytes, c: np.ndarray, d: np.ndarray, r: bytes | None = None) -> bytes:
    """RFC 9497 GenerateProof(k, G, B, C, D) with B = k G: c || s. r: the proof's random scalar (fresh from the OS
    unless given, which only a known-answer test does)."""
    m, z = compute_composites(b, c, d, k)
    r = random_scalar() if r is None else r
    c_ = _challenge(b, m, z, base_mult(r), mult(r, m))
    return c_ + _scalar_op("sub", r, _scalar_op("mul", c_, k))


def verify_proof(b: bytes, c: np.ndarray, d: np.ndarray, proof: bytes) -> bool:
    """RFC 9497 VerifyProof(G, B, C, D, proof): True when every D[i] is C[i] raised to the k of B = k G."""
    if len(proof) != PROOF_BYTES or not (is_scalar(proof[:32]) and is_scalar(proof[32:])):
        return False
    c_, s = proof[:32], proof[32:]
    try:
        m, z = compute_composites(b, c, d)
        t2 = add(base_mult(s), mult(c_, b))
        t3 = add(mult(s, m), mult(c_, z))
    except ProofError:
        return False
    return hmac.compare_digest(_challenge(b, m, z, t2, t3), c_)


def public_key(k: bytes) -> bytes:
    """B = k G, the key a prover commits to before its proofs."""
    return base_mult(k)
