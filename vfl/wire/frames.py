"""Message framing: [magic+version, JSON header, *raw tensor buffers in frames of at most 1 MiB] and its strict decoder.

Who sent a message and that it was not altered is proven by the transport (CurveZMQ: every frame
is encrypted and authenticated under the sender's own key, see leader_channel.py), so the frames carry no
MAC of their own. Nothing from a peer is ever unpickled: the header is JSON, tensors are raw
little-endian buffers rebuilt with numpy.frombuffer after dtype, shape, byte count and finiteness
have been validated. Whatever bytes arrive, decode() either returns a Message or raises WireError.

No frame is larger than WIRE_FRAME_BYTES (a tensor's buffer travels in consecutive slices of at most
1 MiB, joined on arrival), so a socket can cap every frame it reads, before and after the CURVE handshake,
at MAX_WIRE_FRAME: libzmq allocates a frame's claimed size when its header arrives, and one socket
option (ZMQ_MAXMSGSIZE, fixed per listener at bind) is all that bounds what a stranger who has not yet
completed a handshake can make the leader hold.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROTOCOL_VERSION = 9  # v2: CurveZMQ transport, no frame HMAC, nonce-bound run ids; valid split (EVAL names
# its split), SNAPSHOT and RESTORE; v3: PSI messages (private set intersection of the ids) before HELLO;
# v4: tensor buffers travel in frames of at most WIRE_FRAME_BYTES (a small per-frame cap for strangers);
# v5: batch prediction's PREDICT_* (predict_messages.py) and online scoring's SERVE_* messages (serve_messages.py)
# v6: EVAL carries the digest of its range's ids, and EVAL's and PREDICT_ROWS' digests are range digests
# (vfl/session/cut_digest.py): a follower sends no cut of rows the leader cannot name; network.compression: HELLO's
# embedding_codec and gradient_codec, EMBEDDING's and GRADIENT's codec and aux (codecs.py); every id digest (HELLO,
# FORWARD, EVAL, PREDICT_ROWS) is keyed by the session, and GRADIENT carries no loss; LINK_PROBE / LINK_ECHO /
# LINK_REPORT between hello and welcome (link_messages.py)
# v7: every header carries `ack` (the last sequence number its sender received from the receiver; a sender keeps
# what was not acknowledged), and RESYNC (resync_messages.py) re-establishes the sequence after a lost connection
# (vfl/wire/resync.py); WELCOME names the sends per row of each split (sends_train, sends_valid, sends_test:
# embedding DP's plan)
# v8: REJOIN (resync_messages.py): the leader tells a follower under --resume auto to start again from its latest
# checkpoint at or below a step (vfl/session/rejoin.py)
# v9: HELLO's staleness_auto (train.staleness auto) and WELCOME's staleness (the K the leader chose, or the agreed one)
MAGIC_PREFIX = b"VFLW"
MAGIC = MAGIC_PREFIX + bytes([PROTOCOL_VERSION])
MAX_HEADER_BYTES = 1 << 16
MAX_TENSORS = 16
WIRE_FRAME_BYTES = 1 << 20  # the largest slice of a tensor buffer in one frame
MAX_WIRE_FRAME = max(WIRE_FRAME_BYTES, MAX_HEADER_BYTES) + 4096  # the per-frame cap (CURVE's box adds 33 bytes)
MAX_MESSAGE_BYTES = 1 << 30  # the largest message (all its tensors); channels pass tighter limits
MAX_FRAMES = 2 + MAX_TENSORS + MAX_MESSAGE_BYTES // WIRE_FRAME_BYTES
MAX_DIM = 1 << 31
ALLOWED_DTYPES = {
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "int64": np.dtype("<i8"),
    # the coded cuts and gradients of network.compression (codecs.py): fp16, bf16 bits, int8 levels and scales,
    # top-k indices; each message class admits only its own (messages.py), and codecs.decode checks every value
    "float16": np.dtype("<f2"),
    "uint16": np.dtype("<u2"),
    "uint8": np.dtype("|u1"),
}
MESSAGE_TYPES = (
    "PSI",
    "HELLO",
    "WELCOME",
    "FORWARD",
    "EMBEDDING",
    "GRADIENT",
    "EVAL",
    "SAVE",
    "SNAPSHOT",
    "RESTORE",
    "WAIT",
    "DONE",
    "BYE",
    "ABORT",
    "PRIOR",
    "SERVE_HELLO",
    "SERVE_WELCOME",
    "SERVE_IDS",
    "SERVE_CUT",
    "SERVE_REFUSED",
    "PREDICT_HELLO",
    "PREDICT_WELCOME",
    "PREDICT_ROWS",
    "PREDICT_CUT",
    "PREDICT_DONE",
    "LINK_PROBE",
    "LINK_ECHO",
    "LINK_REPORT",
    "RESYNC",
    "REJOIN",
)


class WireError(RuntimeError):
    """A message that must not be applied; the text names the peer and the field. `peer`: the authenticated party
    whose message broke the protocol, where the leader's channel knows it (None: no one party's fault)."""

    peer: str | None = None


@dataclass
class Message:
    """A decoded, validated message; `sender` is the party the transport authenticated."""

    type: str
    sender: str
    run: str
    seq: int
    meta: dict[str, Any] = field(default_factory=dict)
    tensors: list[np.ndarray] = field(default_factory=list)
    claimed: str = ""  # the header's "from" (a claim, checked against `sender` by the channel)
    ack: int = -1  # the last sequence number the sender received from us (-1: none); vfl/wire/resync.py


def short_repr(value: Any, limit: int = 60) -> str:
    """repr(value), cut to about `limit` characters (a peer's value in an error text)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def encode(
    type_: str,
    sender: str,
    run: str,
    seq: int,
    meta: dict | None = None,
    tensors: list[np.ndarray] | tuple = (),
    ack: int = -1,
) -> list:
    """Frames of one message; large tensor buffers are passed through without copying.

    Raises ValueError (before anything is sent) for an unknown type, a dtype that cannot travel,
    or meta that is not strict JSON (NaN or inf included).
    """
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
    try:
        header = json.dumps(
            {"type": type_, "from": sender, "run": run, "seq": seq, "ack": ack, "meta": meta or {}, "tensors": descr},
            separators=(",", ":"),
            allow_nan=False,
        ).encode()
    except ValueError as e:  # NaN / inf in meta
        raise ValueError(f"{type_} meta cannot be sent ({e}): {short_repr(meta, 200)}") from None
    return [MAGIC, header, *(piece for a in arrays for piece in _slices(a))]


def _slices(a: np.ndarray) -> list:
    """A tensor's buffer as consecutive frames of at most WIRE_FRAME_BYTES (one empty frame when it is empty);
    the slices are views, never copies."""
    if not a.size:
        return [b""]
    view = memoryview(a).cast("B")
    return [view[i : i + WIRE_FRAME_BYTES] for i in range(0, view.nbytes, WIRE_FRAME_BYTES)]


def frames_of(nbytes: int) -> int:
    """How many frames carry a tensor buffer of `nbytes` bytes."""
    return max(1, -(-nbytes // WIRE_FRAME_BYTES))


def _no_constants(name: str):
    raise ValueError(f"{name} is not allowed")


def decode(frames: list, peer: str) -> Message:
    """Validate a received message from the authenticated `peer`; raise WireError naming peer and field."""
    if not 2 <= len(frames) <= MAX_FRAMES:
        raise WireError(f"malformed message from {peer}: {len(frames)} frames, need 2..{MAX_FRAMES}")
    magic = bytes(frames[0])
    if magic != MAGIC:
        if magic.startswith(MAGIC_PREFIX) and len(magic) == len(MAGIC):
            raise WireError(
                f"protocol version mismatch with {peer}: peer speaks v{magic[-1]}, we speak v{PROTOCOL_VERSION}"
            )
        raise WireError(f"malformed message from {peer}: not a VFL frame (bad magic {magic[:8]!r})")
    raw_header = bytes(frames[1])
    if len(raw_header) > MAX_HEADER_BYTES:
        raise WireError(f"header from {peer} is {len(raw_header)} bytes (limit {MAX_HEADER_BYTES})")
    try:
        h = json.loads(raw_header, parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"header from {peer} is not valid JSON: {' '.join(str(e).split())[:200]}") from None
    except RecursionError:
        raise WireError(f"header from {peer} nests JSON too deeply") from None
    if not isinstance(h, dict):
        raise WireError(f"header from {peer} must be a JSON object")
    for k, typ in (("type", str), ("from", str), ("run", str), ("seq", int), ("meta", dict), ("tensors", list)):
        if not isinstance(h.get(k), typ) or isinstance(h.get(k), bool):
            raise WireError(f"header field {k!r} from {peer} must be {typ.__name__}, got {short_repr(h.get(k))}")
    ack = h.get("ack", -1)
    if isinstance(ack, bool) or not isinstance(ack, int) or ack < -1:
        raise WireError(f"header field 'ack' from {peer} must be an integer >= -1, got {short_repr(ack)}")
    if h["type"] not in MESSAGE_TYPES:
        raise WireError(
            f"unknown message type {short_repr(h['type'])} from {peer}; allowed: {', '.join(MESSAGE_TYPES)}"
        )
    buffers = _buffers(h["tensors"], frames[2:], f"{h['type']} from {peer}")
    tensors = [
        _tensor(d, buf, f"tensor {i} of {h['type']} from {peer}")
        for i, (d, buf) in enumerate(zip(h["tensors"], buffers))
    ]
    return Message(h["type"], peer, h["run"], h["seq"], h["meta"], tensors, claimed=h["from"], ack=ack)


def _buffers(descr: list, frames: list, where: str) -> list:
    """Each declared tensor's buffer, joined from its frames (each full but the last); WireError when the frames
    do not add up to what the descriptors declare."""
    if len(descr) > MAX_TENSORS:
        raise WireError(f"{where} declares {len(descr)} tensors (limit {MAX_TENSORS})")
    counts = []
    for i, d in enumerate(descr):
        if not isinstance(d, dict):
            raise WireError(f"tensor {i} of {where}: descriptor must be an object, got {short_repr(d)}")
        declared = d.get("nbytes")
        if isinstance(declared, bool) or not isinstance(declared, int) or not 0 <= declared <= MAX_MESSAGE_BYTES:
            raise WireError(
                f"tensor {i} of {where}: nbytes must be an integer in [0, {MAX_MESSAGE_BYTES}], got {short_repr(declared)}"
            )
        counts.append(frames_of(declared))
    if sum(counts) != len(frames):
        raise WireError(f"{where} declares {len(descr)} tensors in {sum(counts)} frames but carries {len(frames)}")
    buffers, at = [], 0
    for i, n in enumerate(counts):
        parts = frames[at : at + n]
        at += n
        sizes = [memoryview(p).nbytes for p in parts]
        if any(size != WIRE_FRAME_BYTES for size in sizes[:-1]):
            raise WireError(f"tensor {i} of {where}: a frame before its last is not {WIRE_FRAME_BYTES} bytes")
        buffers.append(parts[0] if n == 1 else b"".join(parts))
    return buffers


def _tensor(d: Any, buf, where: str) -> np.ndarray:
    if not isinstance(d, dict):
        raise WireError(f"{where}: descriptor must be an object, got {short_repr(d)}")
    name = d.get("dtype")
    dtype = ALLOWED_DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise WireError(f"{where}: dtype {short_repr(name)} not allowed; allowed: {list(ALLOWED_DTYPES)}")
    shape = d.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_DIM for s in shape)
    ):
        raise WireError(
            f"{where}: shape must be a list of at most 8 integers in [0, {MAX_DIM}], got {short_repr(shape)}"
        )
    if math.prod(s for s in shape if s) > MAX_DIM:
        raise WireError(f"{where}: shape {shape} spans more than {MAX_DIM} elements")
    nbytes = memoryview(buf).nbytes
    expected = math.prod(shape) * dtype.itemsize
    declared = d.get("nbytes")
    if isinstance(declared, bool) or declared != expected or nbytes != expected:
        raise WireError(
            f"{where}: declared nbytes {short_repr(declared)}, shape {shape} x {dtype.itemsize} B = {expected}, buffer {nbytes}"
        )
    arr = np.frombuffer(buf, dtype=dtype).reshape(shape) if expected else np.zeros(shape, dtype)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise WireError(f"{where}: contains non-finite values (NaN or inf)")
    return arr
