"""ECDH-PSI primitives over ristretto255 (RFC 9496), computed by libsodium.

The protocol is the Diffie-Hellman PSI of Huberman, Franklin and Hogg (EC'99, Sec. 3; Meadows 1986; the "DH-based
PSI" of Pinkas, Schneider and Zohner, USENIX Security 2014, Sec. 3): each side raises the hashes of its ids to a
secret exponent, the other side raises them again, and H(x)^(ab) = H(y)^(ab) exactly when x = y. Its security
argument needs exactly two things: H is a random oracle into a group of prime order, and the decisional
Diffie-Hellman assumption holds in that group. Then a value H(x)^a (or H(x)^(ab)) of an id the other side does not
hold is indistinguishable from a random group element, so nothing about non-matching ids is revealed.

Suite ``ecdh-psi/ristretto255-sha512/v2``; each choice and why:

- Group: ristretto255 (RFC 9496), the group of prime order L = 2^252 + 27742317777372353535851937790883648493
  (RFC 9496 Sec. 4) built on Curve25519/Edwards25519, where DDH is believed as hard as on the curve's prime-order
  subgroup. Its encoding is canonical (one 32-byte string per element, Sec. 4.3.2) and its decoder refuses every
  non-canonical or off-group string (Sec. 4.3.1), so there are no cofactor, twist or sign cases to handle: two
  values match exactly when the elements are equal. (Suite v1 worked on Curve25519's u-coordinates, equal up to
  sign, and cleared the cofactor by X25519's clamping.)
- Hash to the group: H(id) = ristretto255 element derivation (RFC 9496 Sec. 4.3.4, libsodium's
  crypto_core_ristretto255_from_hash) of the 64 bytes SHA-512(DOMAIN | int64 id, little-endian). The derivation
  maps each 32-byte half with the Elligator-based MAP and adds the two: the two-map random-oracle construction of
  RFC 9380 Sec. 3 (hash_to_curve, not the one-map encode_to_curve), which RFC 9380 Appendix B names
  hash_to_ristretto255; with SHA-512 modelled as a random oracle, H is a random oracle into the group. We feed it
  SHA-512 of a fixed-length, domain-separated input instead of RFC 9380's expand_message_xmd: every input has the
  same length (the 24-byte domain and 8 bytes), so there is no length-extension or ambiguity to guard against, and
  RFC 9496 Appendix A.3's test vectors use the same SHA-512-then-derive shape (tests check them).
- Exponentiation: crypto_scalarmult_ristretto255 with a scalar uniform in [1, L) (64 bytes from the OS reduced mod
  L, crypto_core_ristretto255_scalar_reduce). It decodes the peer's value (refusing a non-canonical or invalid
  encoding) and refuses an identity result; in a prime-order group the identity is the only degenerate element, so
  a peer cannot learn anything about the exponent from a crafted input. Exponentiations commute: (P^a)^b = P^(ab).
- Why it is faster than v1 (measured on this repository's machine, see docs/psi.md): v1 hashed with two
  crypto_core_ed25519_from_uniform calls, an Edwards addition (two decompressions) and a Python big-int inversion
  to reach the Montgomery u (66-70 us per id); ristretto255's derivation does the same two maps and addition in one C
  call (12 us). Its scalar multiplication (libsodium's generic ge25519 code, 38 us) costs a little more than
  X25519's ladder (32 us), which the hash saving repays many times over. A cheaper hash is deliberately not used:
  one map (RFC 9380 encode_to_curve; libsodium's crypto_core_ed25519_from_hash is one Elligator 2 map of the 64
  bytes reduced mod p) gives an output that is not indistinguishable from a random element, and the
  DDH-in-the-ROM argument above would no longer apply.
- Library: libsodium (>= 1.0.18, which added ristretto255), called through ctypes. PyNaCl 1.6 (this project's
  libsodium binding) neither binds nor ships the ristretto255 functions, so they are taken from a libsodium on the
  system (Debian/Ubuntu package libsodium23; macOS `brew install libsodium`), or from PyNaCl's bundled library
  once a release exports them; `cryptography` has no ristretto255. Without one, PSI stops with a one-line error.
- Batching: one ctypes call per id per operation, on addresses into numpy buffers (no per-id bytes objects), the
  SHA-512s in one hashlib loop; batches of PARALLEL_MIN values or more run in one forked worker per core. A
  worker's batch of 8192 points is 256 KiB pickled each way (about 0.1 ms against about 300 ms of arithmetic), so
  shared memory would not pay for itself.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import hashlib
import importlib.util
import multiprocessing as mp
import os
import secrets
import threading

import numpy as np

SUITE = "ecdh-psi/ristretto255-sha512/v2"
POINT_BYTES = 32
SCALAR_BYTES = 32
HASH_BYTES = 64
_DOMAIN = b"vfl-psi/ristretto255/v2\0"


class PointError(ValueError):
    """A peer's value is not the canonical encoding of a ristretto255 element other than the identity."""


class SodiumUnavailable(RuntimeError):
    """No libsodium with ristretto255 (>= 1.0.18) could be loaded."""


_lib = None
_LOAD_LOCK = threading.Lock()


def _candidates():
    try:  # the spec's path, not an import: parties load sodium from several threads at once
        spec = importlib.util.find_spec("nacl._sodium")
    except ImportError:
        spec = None
    if spec is not None and spec.origin:
        yield spec.origin
    found = ctypes.util.find_library("sodium")
    if found:
        yield found
    yield from ("libsodium.so.26", "libsodium.so.23", "libsodium.so", "libsodium.dylib")


_FUNCTIONS = (
    "crypto_core_ristretto255_from_hash",
    "crypto_scalarmult_ristretto255",
    "crypto_scalarmult_ristretto255_base",
    "crypto_core_ristretto255_add",
    "crypto_core_ristretto255_is_valid_point",
    "crypto_core_ristretto255_scalar_reduce",
    "crypto_core_ristretto255_scalar_mul",
    "crypto_core_ristretto255_scalar_sub",
    "sodium_init",
)


def sodium():
    """The loaded libsodium with its ristretto255 functions typed; SodiumUnavailable when there is none."""
    global _lib
    with _LOAD_LOCK:
        if _lib is None:
            _lib = _load()
        return _lib


def _load():
    """The first libsodium candidate that has every ristretto255 function, typed."""
    for name in _candidates():
        try:
            lib = ctypes.CDLL(name)
            for fn in _FUNCTIONS:  # AttributeError when the build lacks one of them
                getattr(lib, fn)
        except (OSError, AttributeError):
            continue
        if lib.sodium_init() < 0:
            continue
        vp = ctypes.c_void_p
        for fn, args in (
            ("crypto_core_ristretto255_from_hash", (vp, vp)),
            ("crypto_scalarmult_ristretto255", (vp, vp, vp)),
            ("crypto_scalarmult_ristretto255_base", (vp, vp)),
            ("crypto_core_ristretto255_add", (vp, vp, vp)),
            ("crypto_core_ristretto255_is_valid_point", (vp,)),
            ("crypto_core_ristretto255_scalar_reduce", (vp, vp)),
            ("crypto_core_ristretto255_scalar_mul", (vp, vp, vp)),
            ("crypto_core_ristretto255_scalar_sub", (vp, vp, vp)),
        ):
            getattr(lib, fn).argtypes, getattr(lib, fn).restype = args, ctypes.c_int
        for fn in ("reduce", "mul", "sub"):  # void in libsodium
            getattr(lib, f"crypto_core_ristretto255_scalar_{fn}").restype = None
        return lib
    raise SodiumUnavailable(
        f"PSI suite {SUITE} needs libsodium >= 1.0.18 with ristretto255, found none "
        "(install it: apt-get install libsodium23, or brew install libsodium)"
    )


def new_exponent() -> bytes:
    """A fresh secret scalar, uniform in [1, L): 64 bytes from the OS reduced mod L."""
    lib = sodium()
    while True:
        wide = secrets.token_bytes(64)
        out = ctypes.create_string_buffer(32)
        lib.crypto_core_ristretto255_scalar_reduce(out, wide)
        if any(out.raw):
            return out.raw


PARALLEL_MIN = 2048  # below this many values a batch runs in the calling process
_pool = None
_pool_pid = None  # the process that started _pool: a process forked later must not use its parent's pool (it hangs)
_pool_lock = threading.Lock()


def _workers():
    """This party's worker processes (one per core it may use, at most 8), started on first use by this very process (a process
    forked after PSI starts its own: its parent's pool hangs it; found by a hostile review); None on one core."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            sodium()  # loaded before the fork, so every worker has it
            n = min(_cores(), 8)
            _pool = mp.get_context("fork").Pool(n) if n > 1 else False
            _pool_pid = os.getpid()
            if _pool:
                atexit.register(_close_workers, _pool, _pool_pid)  # not left to Pool.__del__, which fails at exit
        return _pool or None


def _close_workers(pool, pid: int) -> None:
    """Stop the workers at exit, in the process that started them only (a forked child inherits the handler)."""
    if os.getpid() == pid:
        pool.terminate()


def _disown_parent_workers() -> None:
    """In a forked child: its parent's processes are not its children (left in multiprocessing's list, the child's
    exit would terminate the workers and hang its parent's next batch and exit), and a pool its parent was starting
    is not its own (the lock, held by the parent's starting thread, would never be released here). Found by hostile
    reviews; multiprocessing's own process start clears the list the same way."""
    global _pool_lock
    mp.process._children.clear()
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_disown_parent_workers)


def _cores() -> int:
    """The cores this process may run on (a rank pinned to one core starts no workers), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def _parallel(fn, arr: np.ndarray, *args) -> np.ndarray:
    pool = _workers() if arr.shape[0] >= PARALLEL_MIN else None
    if pool is None:
        return fn(arr, *args)
    parts = np.array_split(arr, pool._processes)
    return np.concatenate(pool.starmap(fn, [(p, *args) for p in parts]))


def slot_messages(ids: np.ndarray, real: np.ndarray | None = None) -> np.ndarray:
    """Each slot's 32-byte hash input, uint8 (n, 32): DOMAIN | int64 id (little-endian) in a real slot, 32 fresh random
    bytes where real is False (a padding slot, vfl/align/psi/buckets.py). Every slot then costs the same SHA-512 of
    32 bytes, element derivation and (when masked) scalar multiplication, in the same workers, so neither the values
    nor the timing count the padding. A padding element is the derivation of SHA-512 of 32 random bytes: uniform in
    the group (RFC 9496 Sec. 4.3.4), equal to an H(id) with probability 2^-192 (the domain's 24 bytes)."""
    ids = np.ascontiguousarray(ids, dtype="<i8")
    out = np.empty((ids.size, len(_DOMAIN) + 8), np.uint8)
    out[:, : len(_DOMAIN)] = np.frombuffer(_DOMAIN, np.uint8)
    out[:, len(_DOMAIN) :] = ids.view(np.uint8).reshape(-1, 8)
    if real is not None and not real.all():
        k = int((~real).sum())
        out[~real] = np.frombuffer(secrets.token_bytes(out.shape[1] * k), np.uint8).reshape(k, -1)
    return out


def hash_slots(messages: np.ndarray) -> np.ndarray:
    """The element of each slot_messages row (H(id) in a real slot): uint8 (n, 32) ristretto255 encodings."""
    return _parallel(_hash_messages, messages)


def mask_slots(messages: np.ndarray, exponent: bytes) -> np.ndarray:
    """Each slot_messages row's element raised to exponent, hashing and raising in the same worker."""
    _check_exponent(exponent)
    return _parallel(_mask_messages, messages, exponent)


def hash_ids(ids: np.ndarray) -> np.ndarray:
    """H(id) for int64 ids: uint8 (n, 32) ristretto255 encodings."""
    return hash_slots(slot_messages(ids))


def raise_to(points: np.ndarray, exponent: bytes) -> np.ndarray:
    """P^exponent for every encoded element (uint8 (n, 32)); PointError names the first invalid one."""
    _check_exponent(exponent)
    return _parallel(_raise_to, np.ascontiguousarray(points, dtype=np.uint8).reshape(-1, POINT_BYTES), exponent)


def mask_ids(ids: np.ndarray, exponent: bytes) -> np.ndarray:
    """H(id)^exponent for int64 ids, hashing and raising in the same worker."""
    return mask_slots(slot_messages(ids), exponent)


def _check_exponent(exponent) -> None:
    """libsodium reads 32 bytes from the exponent's buffer: anything else is a programming error, refused here."""
    if not isinstance(exponent, bytes) or len(exponent) != SCALAR_BYTES:
        raise TypeError(
            f"a PSI exponent is {SCALAR_BYTES} bytes, got {type(exponent).__name__} of {len(exponent) if isinstance(exponent, (bytes, str)) else '?'}"
        )


def digests(ids: np.ndarray) -> bytes:
    """SHA-512(DOMAIN | int64 id) of every id, concatenated: the 64 uniform bytes each H(id) is derived from."""
    return _sha512_rows(slot_messages(ids))


def _sha512_rows(messages: np.ndarray) -> bytes:
    raw, width, sha512 = np.ascontiguousarray(messages, np.uint8).tobytes(), messages.shape[1], hashlib.sha512
    return b"".join([sha512(raw[i : i + width]).digest() for i in range(0, len(raw), width)])


def random_points(k: int) -> np.ndarray:
    """k elements uniform in the group, each derived from SHA-512 of 32 fresh random bytes (as a padding slot's)."""
    return hash_slots(slot_messages(np.zeros(k, np.int64), np.zeros(k, bool)))


def from_digests(h: bytes) -> np.ndarray:
    """ristretto255 element derivation (RFC 9496 Sec. 4.3.4) of each 64-byte digest: uint8 (n, 32)."""
    n = len(h) // HASH_BYTES
    out = np.empty((n, POINT_BYTES), np.uint8)
    src = np.frombuffer(h, np.uint8)
    if n:
        derive, o, s = sodium().crypto_core_ristretto255_from_hash, out.ctypes.data, src.ctypes.data
        for i in range(n):
            derive(o + POINT_BYTES * i, s + HASH_BYTES * i)
    return out


def _hash_messages(messages: np.ndarray) -> np.ndarray:
    out = from_digests(_sha512_rows(messages))
    zero = ~out.any(axis=1)
    if zero.any():  # the identity: probability 2**-252 per slot
        i = int(np.argmax(zero))
        raise PointError(f"id {int(messages[i, len(_DOMAIN) :].view('<i8')[0])} hashes to the identity")
    return out


def _raise_to(points: np.ndarray, exponent: bytes) -> np.ndarray:
    points = np.ascontiguousarray(points, dtype=np.uint8).reshape(-1, POINT_BYTES)
    out = np.empty_like(points)
    lib = sodium()
    mult, o, s = lib.crypto_scalarmult_ristretto255, out.ctypes.data, points.ctypes.data
    for i in range(points.shape[0]):
        if mult(o + POINT_BYTES * i, exponent, s + POINT_BYTES * i):
            if lib.crypto_core_ristretto255_is_valid_point(s + POINT_BYTES * i):
                raise PointError(f"value {i} is the identity element (the result would be the identity)")
            raise PointError(f"value {i} is not the canonical encoding of a ristretto255 element")
    return out


def _mask_messages(messages: np.ndarray, exponent: bytes) -> np.ndarray:
    return _raise_to(_hash_messages(messages), exponent)


def _mask_ids(ids: np.ndarray, exponent: bytes) -> np.ndarray:
    """H(id)^exponent in the calling process (benchmarks/psi.py times it)."""
    return _mask_messages(slot_messages(ids), exponent)


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
