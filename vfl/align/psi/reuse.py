"""Reusing an agreed intersection: a per-peer cache sealed by this party's key, and the proofs both HELLOs compare.

After a PSI that both sides checked (vfl/align/psi/protocol.py), the leader draws a 32-byte ticket T from the OS and
sends it to that follower over their CurveZMQ channel (encrypted, and authenticated by both parties' keys). Each side
then writes one cache file per peer and rank, `<data.path>/psi_cache/<me>--<peer>-<key hint>.rank<r>of<N>.psi` (the
hint: 12 hex digits of SHA-256 of the peer's public key):

    T | own = HMAC(k, "own-set" | binding | this party's ids, sorted) | S, the ids both sides hold (sorted)
    sealed with HMAC(k, everything before), k = HMAC(this party's CurveZMQ secret key, "vfl-psi-cache/v1")

where the binding names the suite, both parties, the peer's public key, the rank and whether this party checked the
peer's proofs (data.psi_verify: a verifying party reuses only what a verified PSI agreed). The next run offers reuse only
when its own ids give the same `own` (so any change on this side runs the PSI again): the follower's PSI hello
carries id(T) = HMAC(T, "id") and proof_F = HMAC(T, "follower" | SHA-256(S)); the leader accepts only when its own
cache for that follower is intact, names the same T, its own ids are unchanged, and proof_F equals its own
computation; its hello then carries proof_L = HMAC(T, "leader" | SHA-256(S)), which the follower checks. Either side
whose ids changed, or whose cache is missing, damaged or sealed by another key, sends no offer or declines, and the
PSI runs in full (and a new T is issued). With several followers the leader intersects the reused S with the other
followers' results and names the final ids to each reusing follower as indices into its S.

Why this keeps the protocol's guarantees (the threat model: a stranger reaches any port, a follower is malicious):
- Nothing new is learned. A party reuses only the S it wrote itself after a checked PSI with this very peer key:
  ids it had already learned. The final ids a reusing follower receives are indices into its own S, checked to be
  strictly increasing and in range, so it trains only on ids it verified before, exactly as in a fresh run. Skipping
  the PSI cannot reveal membership of any id: a party that changed its set and lies "unchanged" gets its old S back.
- No forged intersection. The leader uses its own sealed S, never one the follower sends; a follower uses its own S.
  A malicious follower can make the leader reuse only a result it could already forge in the fresh protocol (the
  known gap in protocol.py, closed where the leader checks proofs: data.psi_verify); reuse adds no new way.
- A tampered cache is refused: its seal needs k, which needs the party's CurveZMQ secret key (0600); a cache sealed
  by another key, for another peer key, suite or rank, is refused the same way (the PSI runs in full).
- The digests say nothing about ids. `own` is keyed by k and never leaves the party; id(T) and the proofs are HMACs
  under T, a random key only the two parties hold, of values both already know. What each side learns from them is
  one bit per run (under N ranks too: a party's ranks offer and accept together, vfl/align/psi/buckets.py): whether
  the other's set (and cache) is unchanged since their last agreed PSI (a full PSI would show the other's set size,
  which usually tells as much), and that the other kept that agreement (both took part in that PSI, so each already
  knows it happened). The bit is the other's to choose: a malicious party can always
  decline, or offer a stale ticket, which only makes the PSI run in full.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass

import numpy as np

from privacy.durable_files import remove_stale_temporaries, write_bytes
from vfl.align.psi.ecdh import SUITE

TICKET_BYTES = 32
_MAGIC = b"VFLPSIC1"
_TAG = 32
_MAX_HEADER = 4096
CACHE_DIR = "psi_cache"


@dataclass(frozen=True)
class Agreement:
    """What one side cached after a checked PSI with one peer: the ticket and the ids both sides hold."""

    ticket: bytes
    shared: np.ndarray  # int64, ascending

    @property
    def ticket_id(self) -> bytes:
        return _mac(self.ticket, b"vfl-psi-reuse/id")

    def proof(self, role: str) -> bytes:
        """HMAC(T, role | SHA-256(S)): this side holds T and the same S."""
        return _mac(
            self.ticket, b"vfl-psi-reuse/" + role.encode() + b"|" + hashlib.sha256(self.shared.tobytes()).digest()
        )

    def offer(self, role: str) -> np.ndarray:
        """id(T) and this side's proof as the PSI hello's payload: int64 (2, 4)."""
        return np.frombuffer(self.ticket_id + self.proof(role), "<i8").reshape(2, 4).copy()

    def matches(self, payload: np.ndarray | None, role: str) -> bool:
        """The peer's hello payload names this ticket and proves the same S (constant-time comparisons)."""
        if payload is None or payload.shape != (2, 4):
            return False
        raw = np.ascontiguousarray(payload, "<i8").tobytes()
        return hmac.compare_digest(raw[:32], self.ticket_id) & hmac.compare_digest(raw[32:], self.proof(role))


def new_ticket() -> bytes:
    return secrets.token_bytes(TICKET_BYTES)


def ticket_wire(ticket: bytes) -> np.ndarray:
    return np.frombuffer(ticket, "<i8").reshape(1, 4).copy()


def ticket_from_wire(payload: np.ndarray) -> bytes:
    return np.ascontiguousarray(payload, "<i8").tobytes()


def _mac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


class PSICache:
    """One party's cache of its agreement with one peer on one rank (None of it leaves the party)."""

    def __init__(
        self, directory: str, secret_key: bytes, me: str, peer: str, peer_key: bytes, rank=0, ranks=1, verified=False
    ):
        """verified: this party checks the peer's proofs (data.psi_verify), so it reuses only an agreement that a
        verified PSI wrote (the binding says so), never one an unverified run left."""
        self.directory = directory
        key_hint = hashlib.sha256(peer_key).hexdigest()[:12]  # two peers of one name (two leaders) keep two files
        self.path = os.path.join(directory, f"{me}--{peer}-{key_hint}.rank{rank}of{ranks}.psi")
        self._k = _mac(secret_key, b"vfl-psi-cache/v1")
        binding = {"suite": SUITE, "me": me, "peer": peer, "peer_key": peer_key.hex(), "rank": rank, "ranks": ranks}
        if verified:  # absent otherwise: an unverifying party's caches keep their bytes
            binding["verified"] = True
        self._binding = json.dumps(binding, sort_keys=True).encode()
        self.refused: str | None = None  # why the last load found nothing usable (for the log)

    def own_digest(self, ids: np.ndarray) -> bytes:
        """HMAC(k, "own-set" | binding | this party's ids, sorted): equal exactly when the set is."""
        return _mac(self._k, b"own-set|" + self._binding + b"|" + np.sort(np.asarray(ids, "<i8")).tobytes())

    def load(self, ids: np.ndarray) -> Agreement | None:
        """The cached agreement when the file is intact, sealed by this party's key for this peer and rank, and this
        party's ids are those it was written for; else None, with the reason in self.refused."""
        self.refused = None
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            self.refused = "no earlier PSI with this peer"
            return None
        except OSError as e:
            self.refused = f"{self.path} cannot be read ({e.strerror})"
            return None
        body, tag = raw[:-_TAG], raw[-_TAG:]
        if (
            len(raw) < len(_MAGIC) + 4 + _TAG
            or not raw.startswith(_MAGIC)
            or not hmac.compare_digest(_mac(self._k, body), tag)
        ):
            self.refused = f"{self.path} is damaged, modified, or sealed by another key: refused"
            return None
        h = int.from_bytes(body[8:12], "little")
        binding, rest = body[12 : 12 + h], body[12 + h :]
        if binding != self._binding or (len(rest) - 2 * TICKET_BYTES) % 8:
            self.refused = f"{self.path} was written for another peer key, suite, rank or data.psi_verify: refused"
            return None
        ticket, own = rest[:TICKET_BYTES], rest[TICKET_BYTES : 2 * TICKET_BYTES]
        if not hmac.compare_digest(own, self.own_digest(ids)):
            self.refused = "this party's ids changed since the last PSI"
            return None
        return Agreement(ticket, np.frombuffer(rest[2 * TICKET_BYTES :], "<i8").copy())

    def store(self, ticket: bytes, ids: np.ndarray, shared: np.ndarray, log=None) -> None:
        """Write the agreement durably (privacy/durable_files.py: a temporary file in the same directory, fsync, rename,
        fsync of the directory), mode 0600 in a directory of mode 0700; an error on the way (a read-only shard, a full
        disk) only means no reuse next time, said in one log line, and leaves no temporary file. Temporary files that a
        killed run left over an hour ago are removed."""
        if len(ticket) != TICKET_BYTES:
            raise ValueError(f"a PSI ticket is {TICKET_BYTES} bytes, got {len(ticket)}")
        if len(self._binding) > _MAX_HEADER:
            raise ValueError(
                f"the PSI cache's binding (party names) is {len(self._binding)} bytes, above {_MAX_HEADER}"
            )
        shared = np.sort(np.asarray(shared, "<i8"))
        body = (
            b"".join((_MAGIC, len(self._binding).to_bytes(4, "little"), self._binding, ticket, self.own_digest(ids)))
            + shared.tobytes()
        )
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            _private(self.directory)
            write_bytes(self.path, body + _mac(self._k, body), mode=0o600)
            remove_stale_temporaries(self.directory, _STALE_S)
        except OSError as e:
            if log is not None:
                log(
                    f"PSI reuse cache {self.path} cannot be written ({e.strerror or e}); the next run runs the PSI again"
                )


_STALE_S = 3600.0  # a temporary file older than this belongs to no running write


def _private(directory: str) -> None:
    """Mode 0700 for a cache directory made earlier with another mode (where this process may change it)."""
    try:
        if os.stat(directory).st_mode & 0o077:
            os.chmod(directory, 0o700)
    except OSError:
        pass
