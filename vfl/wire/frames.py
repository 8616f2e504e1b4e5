"""Message framing: [magic+version, JSON header, *raw tensor buffers, HMAC-SHA256] and its strict decoder.

Nothing from a peer is ever unpickled: the header is JSON, tensors are raw little-endian buffers
rebuilt with numpy.frombuffer after the MAC over every frame (buffers included) has been checked
in constant time, and after dtype, shape, byte count and finiteness have been validated.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROTOCOL_VERSION = 2  # 2: valid split (EVAL names its split), SNAPSHOT and RESTORE
MAGIC_PREFIX = b"VFLW"
MAGIC = MAGIC_PREFIX + bytes([PROTOCOL_VERSION])
MAX_HEADER_BYTES = 1 << 16
ALLOWED_DTYPES = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "int64": np.dtype("<i8")}
MESSAGE_TYPES = ("HELLO", "WELCOME", "FORWARD", "EMBEDDING", "GRADIENT", "EVAL", "SAVE", "SNAPSHOT", "RESTORE", "WAIT", "DONE",
                 "BYE", "ABORT")


class WireError(RuntimeError):
    """A message that must not be applied; the text names the peer and the field."""


@dataclass
class Message:
    """A decoded, validated message."""

    type: str
    sender: str
    run: str
    seq: int
    meta: dict[str, Any] = field(default_factory=dict)
    tensors: list[np.ndarray] = field(default_factory=list)


def _mac(key: bytes, frames: list) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for fr in frames:
        view = memoryview(fr)
        mac.update(view.nbytes.to_bytes(8, "little"))
        mac.update(view.cast("B") if view.ndim != 1 or view.format != "B" else view)
    return mac.digest()


def encode(key: bytes, type_: str, sender: str, run: str, seq: int, meta: dict | None = None,
           tensors: list[np.ndarray] | tuple = ()) -> list:
    """Frames of one message; large tensor buffers are passed through without copying."""
    if type_ not in MESSAGE_TYPES:
        raise ValueError(f"unknown message type {type_!r}")
    arrays = []
    descr = []
    for t in tensors:
        a = np.ascontiguousarray(t)
        name = next((k for k, v in ALLOWED_DTYPES.items() if v == a.dtype), None)
        if name is None:
            raise ValueError(f"dtype {a.dtype} cannot travel; allowed: {list(ALLOWED_DTYPES)}")
        if a.dtype.byteorder == ">":
            a = a.astype(ALLOWED_DTYPES[name])
        arrays.append(a)
        descr.append({"dtype": name, "shape": list(a.shape), "nbytes": int(a.nbytes)})
    header = json.dumps({"type": type_, "from": sender, "run": run, "seq": seq, "meta": meta or {}, "tensors": descr},
                        separators=(",", ":"), allow_nan=False).encode()
    frames = [MAGIC, header, *(memoryview(a).cast("B") if a.size else b"" for a in arrays)]
    return frames + [_mac(key, frames)]


def decode(key: bytes, frames: list, peer: str) -> Message:
    """Authenticate then validate a received message; raise WireError naming `peer` and the field."""
    if len(frames) < 3:
        raise WireError(f"malformed message from {peer}: {len(frames)} frames, need at least 3")
    magic = bytes(frames[0])
    if magic != MAGIC:
        if magic.startswith(MAGIC_PREFIX) and len(magic) == len(MAGIC):
            raise WireError(f"protocol version mismatch with {peer}: peer speaks v{magic[-1]}, we speak v{PROTOCOL_VERSION}")
        raise WireError(f"malformed message from {peer}: not a VFL frame (bad magic {magic[:8]!r})")
    body, mac = frames[:-1], bytes(frames[-1])
    if not hmac.compare_digest(_mac(key, body), mac):
        raise WireError(f"message from {peer} failed authentication (wrong shared secret or a tampered frame)")
    raw_header = bytes(frames[1])
    if len(raw_header) > MAX_HEADER_BYTES:
        raise WireError(f"header from {peer} is {len(raw_header)} bytes (limit {MAX_HEADER_BYTES})")
    try:
        h = json.loads(raw_header, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"header from {peer} is not valid JSON: {e}") from None
    if not isinstance(h, dict):
        raise WireError(f"header from {peer} must be a JSON object")
    for k, typ in (("type", str), ("from", str), ("run", str), ("seq", int), ("meta", dict), ("tensors", list)):
        if not isinstance(h.get(k), typ) or isinstance(h.get(k), bool):
            raise WireError(f"header field {k!r} from {peer} must be {typ.__name__}, got {h.get(k)!r}")
    if h["type"] not in MESSAGE_TYPES:
        raise WireError(f"unknown message type {h['type']!r} from {peer}")
    buffers = frames[2:-1]
    if len(h["tensors"]) != len(buffers):
        raise WireError(f"{h['type']} from {peer} declares {len(h['tensors'])} tensors but carries {len(buffers)} buffers")
    tensors = []
    for i, (d, buf) in enumerate(zip(h["tensors"], buffers)):
        tensors.append(_tensor(d, buf, f"tensor {i} of {h['type']} from {peer}"))
    return Message(h["type"], h["from"], h["run"], h["seq"], h["meta"], tensors)


def _tensor(d: Any, buf, where: str) -> np.ndarray:
    if not isinstance(d, dict):
        raise WireError(f"{where}: descriptor must be an object")
    dtype = ALLOWED_DTYPES.get(d.get("dtype"))
    if dtype is None:
        raise WireError(f"{where}: dtype {d.get('dtype')!r} not allowed; allowed: {list(ALLOWED_DTYPES)}")
    shape = d.get("shape")
    if not isinstance(shape, list) or len(shape) > 8 or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape):
        raise WireError(f"{where}: shape must be a list of at most 8 non-negative integers, got {shape!r}")
    nbytes = memoryview(buf).nbytes
    expected = math.prod(shape) * dtype.itemsize
    if d.get("nbytes") != expected or nbytes != expected:
        raise WireError(f"{where}: declared nbytes {d.get('nbytes')!r}, shape {shape} x {dtype.itemsize} B = {expected}, buffer {nbytes}")
    arr = np.frombuffer(buf, dtype=dtype).reshape(shape) if expected else np.zeros(shape, dtype)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise WireError(f"{where}: contains non-finite values (NaN or inf)")
    return arr
