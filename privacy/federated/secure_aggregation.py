"""Pairwise-mask secure aggregation (PW_ENCRYPT).

After Bonawitz et al. 2017 ("Practical Secure Aggregation for Privacy-Preserving Machine Learning", the masking layer of
Sec. 4, without its Shamir-based dropout recovery).

Every pair of clients (u, v) agrees on a key with X25519 and derives a 256-bit PRG seed with
HKDF-SHA256 (RFC 5869) bound to the round; client u adds +mask_uv when u < v and -mask_uv otherwise.
Updates are encoded in fixed point as integers modulo 2^64, so the masks cancel exactly in the
server's sum and the result equals the plain sum up to the quantisation step 2^-frac_bits.
A client that masked but did not upload leaves its masks in the sum: the server detects the missing
uploads and refuses the round with a clear error naming the dropped clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

FRAC_BITS = 24  # quantisation step 2^-24 ~ 6e-8


class SecureAggregationError(RuntimeError):
    """A round whose masked sum cannot be trusted."""


def encode_fixed(x: np.ndarray, frac_bits: int = FRAC_BITS, n_clients: int = 1) -> np.ndarray:
    """Real values -> two's-complement integers mod 2^64 (uint64), with room for n_clients summands."""
    x = np.asarray(x, dtype=np.float64)
    limit = 2.0 ** (63 - frac_bits) / max(n_clients, 1)
    if not np.all(np.isfinite(x)) or np.any(np.abs(x) >= limit):
        raise SecureAggregationError(
            f"values must be finite with |x| < {limit:.3g} to sum {n_clients} clients in fixed point"
        )
    return np.round(x * (1 << frac_bits)).astype(np.int64).view(np.uint64)


def decode_fixed(v: np.ndarray, frac_bits: int = FRAC_BITS) -> np.ndarray:
    """uint64 mod 2^64 -> real values."""
    return np.asarray(v, dtype=np.uint64).view(np.int64).astype(np.float64) / (1 << frac_bits)


def public_bytes(key: X25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def pair_seed(private: X25519PrivateKey, peer_public: bytes, u: int, v: int, round_id: int) -> bytes:
    """A 256-bit seed shared by clients u and v for this round (X25519 + HKDF-SHA256)."""
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    lo, hi = min(u, v), max(u, v)
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=f"vfl-pw-mask/round={round_id}/pair={lo}-{hi}".encode()
    ).derive(shared)


def mask_stream(seed: bytes, d: int) -> np.ndarray:
    """d uint64 words from a PRG keyed by all 256 bits of the seed (no 32-bit folding)."""
    bits = np.random.Philox(np.random.SeedSequence(int.from_bytes(seed, "little")))
    return bits.random_raw(d).astype(np.uint64)


@dataclass
class MaskingClient:
    """One client's key pair and its masking of an update for a round."""

    client_id: int
    private: X25519PrivateKey = field(default_factory=X25519PrivateKey.generate)

    @property
    def public(self) -> bytes:
        return public_bytes(self.private.public_key())

    def mask(
        self, update: np.ndarray, peers: dict[int, bytes], round_id: int, n_clients: int, frac_bits: int = FRAC_BITS
    ) -> np.ndarray:
        """fixed(update) + sum_{v > u} mask_uv - sum_{v < u} mask_vu  (mod 2^64)."""
        y = encode_fixed(update, frac_bits, n_clients).copy()
        for v, pub in peers.items():
            if v == self.client_id:
                continue
            m = mask_stream(pair_seed(self.private, pub, self.client_id, v, round_id), y.size)
            y = y + m if self.client_id < v else y - m  # uint64 arithmetic wraps mod 2^64
        return y


def aggregate_masked(uploads: dict[int, np.ndarray], participants: list[int], frac_bits: int = FRAC_BITS) -> np.ndarray:
    """Sum of the clients' real-valued updates; refuses the round if a participant did not upload."""
    missing = sorted(set(participants) - set(uploads))
    if missing:
        raise SecureAggregationError(
            f"round refused: clients {missing} masked their updates but did not upload "
            f"(dropped); their pairwise masks would not cancel"
        )
    unknown = sorted(set(uploads) - set(participants))
    if unknown:
        raise SecureAggregationError(f"uploads from clients {unknown} that did not take part in the key agreement")
    total = np.zeros_like(next(iter(uploads.values())))
    for y in uploads.values():
        total = total + y
    return decode_fixed(total, frac_bits)
