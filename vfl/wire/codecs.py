"""Wire codecs for cut embeddings and cut gradients: pure encode/decode pairs with a stated error, strictly decoded.

`network.compression` names one codec per direction (embedding: follower -> leader; gradient: leader -> follower).
A codec turns a float32 (rows, cols) tensor into one or two wire tensors (`encode`) and back (`decode`); the message
carries the codec's name in its `codec` field (absent: none) and the payload as `cut`/`grad` plus `aux`.

| codec | wire tensors | bytes a row | error of one entry |
|---|---|---|---|
| none | float32 (rows, cols) | 4 cols | exact (the float32 tensor itself) |
| fp16 | float16 (rows, cols), int64 (1,) power-of-two exponent | 2 cols | relative <= 2^-11 (round to nearest) for every |x| >= max|x| 2^-29 |
| bf16 | uint16 (rows, cols): the top half of each float32 | 2 cols | relative <= 2^-8 (round to nearest even) |
| int8 | uint8 (rows, ceil(cols bits / 8)) packed levels, uint16 (rows, 2) bf16 (lo, step) | cols bits / 8 + 4 | < step, unbiased |
| topk | float32 (rows, k) values, uint16 (rows, k) strictly increasing column indices | 6 k | the dropped entries (error feedback) |

int8 is per-row min-max quantization to 2^bits levels with stochastic rounding, as MindSpore Federated's vertical
`min_max` compression with `bit_num` (here 2..8 bits, packed) and unbiased in the sense of QSGD (Alistarh et al.
2017, Sec. 3.1 stochastic quantization): an entry x between grid points g_q <= x < g_{q+1} is sent as q + 1 with
probability (x - g_q) / step, so E[decode] = x. The row's grid is lo' + q step' with lo' the row minimum rounded down
to bfloat16 and step' = (max - lo') / (2^bits - 1) rounded up to bfloat16 (4 bytes a row); the error of one entry is
below step' <= ((max - min) + 2^-8 |min|) (1 + 2^-7) / (2^bits - 1). The uniforms come from the sender's own generator
(`rng`): the follower's own entropy for embeddings, OS entropy at the leader for gradients (never labels).

topk keeps the k = max(1, ceil(topk_fraction cols)) entries of largest magnitude of each row; what it drops is kept
by the sender and added to the same sample's next gradient (error feedback: Stich, Cordonnier, Jaggi 2018,
"Sparsified SGD with Memory", Alg. 1; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD", Alg. 2 EF-SGD),
see vfl/training/error_feedback.py.

`decode` reads nothing it has not checked: the dtypes and shapes against the agreed codec and the expected
(rows, cols), finite scales and exponents, packing bits beyond the last entry zero, indices in range and strictly
increasing, and a finite result. Anything else is a WireError naming `where`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vfl.wire.frames import WireError

EMBEDDING_CODECS = ("none", "fp16", "bf16", "int8")
GRADIENT_CODECS = ("none", "fp16", "bf16", "int8", "topk")
WIRE_NAMES = ("fp16", "bf16", "int8", "topk")  # a message's `codec` field (absent: none)
MIN_BITS, MAX_BITS = 2, 8
MAX_TOPK_FRACTION = 0.5  # above it top-k's (value, index) pairs would carry more bytes than the float32 row
FP16_TOP_EXPONENT = 14  # fp16 encoding scales a tensor's largest magnitude into [2^14, 2^15) (fp16's max is 65504)
MAX_EXPONENT = 300  # |the fp16 scale's exponent|: float32 spans 2^-149 .. 2^128, so any useful one is far inside


@dataclass(frozen=True)
class Codec:
    """One direction's codec: its name and its parameter (bits for int8, topk_fraction for topk)."""

    name: str = "none"
    bits: int = 8
    topk_fraction: float = 0.25

    def __post_init__(self):
        if self.name not in GRADIENT_CODECS:
            raise ValueError(f"codec must be one of {', '.join(GRADIENT_CODECS)}, got {self.name!r}")
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not MIN_BITS <= self.bits <= MAX_BITS:
            raise ValueError(f"bits must be an integer in [{MIN_BITS}, {MAX_BITS}], got {self.bits!r}")
        f = self.topk_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= MAX_TOPK_FRACTION:
            raise ValueError(f"topk_fraction must be a number in (0, {MAX_TOPK_FRACTION}], got {f!r}")

    @property
    def is_none(self) -> bool:
        return self.name == "none"

    @property
    def wire_name(self) -> str | None:
        """The message's `codec` field: None (absent) for none."""
        return None if self.is_none else self.name

    @property
    def agreement(self) -> str | None:
        """What HELLO announces: the name with its parameter ('int8:6', 'topk:0.25'); None (absent) for none."""
        if self.is_none:
            return None
        if self.name == "int8":
            return f"int8:{self.bits}"
        if self.name == "topk":
            return f"topk:{float(self.topk_fraction)!r}"
        return self.name

    def k(self, cols: int) -> int:
        """topk: the entries kept of a row of `cols`."""
        return max(1, math.ceil(self.topk_fraction * cols))

    def row_bytes(self, cols: int) -> int:
        """The payload bytes of one row of `cols` entries (without a message's fixed part)."""
        return {
            "none": 4 * cols,
            "fp16": 2 * cols,
            "bf16": 2 * cols,
            "int8": -(-cols * self.bits // 8) + 4,
            "topk": 6 * self.k(cols),
        }[self.name]


NONE = Codec()


def describe(agreement: str | None) -> str:
    """A HELLO's codec agreement in words: 'none', 'int8 (bits 6)', 'topk (topk_fraction 0.25)'."""
    if agreement is None:
        return "none"
    name, _, param = agreement.partition(":")
    return f"{name} ({'bits' if name == 'int8' else 'topk_fraction'} {param})" if param else name


# -- bfloat16 as the top 16 bits of a float32 ---------------------------------------------------------------
def bf16_nearest(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest, ties to even."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)  # finite: + 0x8000 stays below 2^32
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def bf16_value(h: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32, exactly."""
    return (np.asarray(h, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _bf16_down(x: np.ndarray) -> np.ndarray:
    """The largest bfloat16 <= x (finite float32), as bits."""
    x = np.ascontiguousarray(x, np.float32)
    h = (x.view(np.uint32) >> 16).astype(np.uint16)  # toward zero: down for x >= 0, up for x < 0
    return np.where((x < 0) & (bf16_value(h) != x), h + np.uint16(1), h).astype(np.uint16)


def _bf16_up(x: np.ndarray) -> np.ndarray:
    """The smallest bfloat16 >= x (finite float32 >= 0), as bits."""
    x = np.ascontiguousarray(x, np.float32)
    h = (x.view(np.uint32) >> 16).astype(np.uint16)
    return np.where(bf16_value(h) < x, h + np.uint16(1), h).astype(np.uint16)


# -- encode ---------------------------------------------------------------------------------------------------
def encode(codec: Codec, x: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, ...]:
    """The wire tensors of a finite float32 (rows, cols) tensor; int8 draws its rounding from `rng`."""
    x = np.ascontiguousarray(x, np.float32)
    if x.ndim != 2:
        raise ValueError(f"a codec encodes a (rows, cols) tensor, got shape {x.shape}")
    if codec.is_none:
        return (x,)
    if not np.isfinite(x).all():
        raise ValueError(f"{codec.name} cannot encode non-finite values (NaN or inf)")
    if codec.name == "fp16":
        return _encode_fp16(x)
    if codec.name == "bf16":
        h = bf16_nearest(x)
        if not np.isfinite(bf16_value(h)).all():
            raise ValueError("bf16: a value rounds beyond bfloat16's range (3.39e38)")
        return (h,)
    if codec.name == "int8":
        if rng is None:
            raise ValueError("int8's stochastic rounding needs the sender's generator (rng)")
        return _encode_int8(x, codec.bits, rng)
    return _encode_topk(x, codec.k(x.shape[1]))


def _encode_fp16(x: np.ndarray) -> tuple[np.ndarray, ...]:
    peak = float(np.abs(x).max()) if x.size else 0.0
    e = 0 if peak == 0.0 else FP16_TOP_EXPONENT - math.frexp(peak)[1] + 1  # peak 2^e in [2^14, 2^15)
    return np.ldexp(x, np.int32(e)).astype(np.float16), np.array([e], np.int64)  # 2^e: exact up to fp16's rounding


def _encode_int8(x: np.ndarray, bits: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    rows, cols = x.shape
    levels = (1 << bits) - 1
    if cols == 0:
        return np.zeros((rows, 0), np.uint8), np.zeros((rows, 2), np.uint16)
    lo_h = _bf16_down(x.min(axis=1))
    lo = bf16_value(lo_h)
    hi = x.max(axis=1)
    with np.errstate(over="ignore"):
        step_h = _bf16_up(((hi.astype(np.float64) - lo) / levels).astype(np.float32))
        for _ in range(4):  # the decoder's float32 top of the grid must reach the row's maximum
            short = (lo + np.float32(levels) * bf16_value(step_h)) < hi
            if not short.any():
                break
            step_h = np.where(short, step_h + np.uint16(1), step_h).astype(np.uint16)
        step = bf16_value(step_h)
        if not (
            np.isfinite(lo).all() and np.isfinite(step).all() and np.isfinite(lo + np.float32(levels) * step).all()
        ):
            raise ValueError("int8: a row's range exceeds float32 (values near 3.4e38)")
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(step[:, None] > 0, (x - lo[:, None]) / step[:, None], np.float32(0.0))
    floor = np.floor(t)
    q = np.clip(floor + (rng.random(t.shape, dtype=np.float32) < (t - floor)), 0, levels).astype(np.uint8)
    return _pack(q, bits), np.stack([lo_h, step_h], axis=1)


def _pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Levels (rows, cols) of `bits` bits each -> rows of ceil(cols bits / 8) bytes, big-endian bit order."""
    if bits == 8:
        return q
    rows, cols = q.shape
    b = np.unpackbits(q[:, :, None], axis=2)[:, :, 8 - bits :]
    return np.packbits(b.reshape(rows, cols * bits), axis=1)


def _encode_topk(x: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    rows, cols = x.shape
    if k >= cols:
        idx = np.broadcast_to(np.arange(cols), (rows, cols))
    else:
        idx = np.sort(np.argpartition(-np.abs(x), k - 1, axis=1)[:, :k], axis=1)
    return np.ascontiguousarray(np.take_along_axis(x, idx, axis=1)), np.ascontiguousarray(idx, np.uint16)


def densify_topk(values: np.ndarray, indices: np.ndarray, cols: int) -> np.ndarray:
    """The dense (rows, cols) tensor that top-k's (values, indices) stand for (zeros elsewhere)."""
    out = np.zeros((values.shape[0], cols), np.float32)
    np.put_along_axis(out, indices.astype(np.int64), values, axis=1)
    return out


# -- decode ---------------------------------------------------------------------------------------------------
def layout(codec_name: str | None, main: np.ndarray, aux: np.ndarray | None) -> str | None:
    """What is wrong with a message's payload tensors for its `codec` field (None: none), before any agreement
    or shape is known: their count, dtypes and ranks; None when they fit."""
    want = {
        None: (("float32", 2), None),
        "fp16": (("float16", 2), ("int64", 1)),
        "bf16": (("uint16", 2), None),
        "int8": (("uint8", 2), ("uint16", 2)),
        "topk": (("float32", 2), ("uint16", 2)),
    }.get(codec_name)
    if want is None:
        return f"codec {str(codec_name)[:20]!r} is not one of {', '.join(WIRE_NAMES)}"
    label = codec_name or "none"
    for what, arr, spec in (("first", main, want[0]), ("second", aux, want[1])):
        if spec is None:
            if arr is not None:
                return f"the {label} payload has one tensor, got a second ({arr.dtype} {tuple(arr.shape)})"
            continue
        if arr is None:
            return f"the {label} payload has two tensors, got one"
        if arr.dtype != np.dtype(spec[0]) or arr.ndim != spec[1]:
            return (
                f"the {label} payload's {what} tensor must be {spec[0]} with {spec[1]} dimension(s), "
                f"got {arr.dtype} {tuple(arr.shape)}"
            )
    return None


def decode(codec: Codec, codec_name: str | None, tensors: tuple, shape: tuple[int, int], where: str) -> np.ndarray:
    """The float32 tensor of `shape` that a message's payload stands for, every byte checked against the agreed
    `codec` (codec_name: the message's `codec` field, None for none); WireError names `where` and what is wrong."""
    rows, cols = shape
    main, aux = (tuple(tensors) + (None, None))[:2]
    if codec_name != codec.wire_name:
        raise WireError(f"{where}: coded {codec_name or 'none'}, but this run agreed {codec.name}")
    wrong = layout(codec_name, main, aux)
    if wrong:
        raise WireError(f"{where}: {wrong}")
    name = codec.name
    want_main = (
        (rows, codec.k(cols)) if name == "topk" else (rows, -(-cols * codec.bits // 8)) if name == "int8" else shape
    )
    if tuple(main.shape) != want_main:
        raise WireError(
            f"{where}: expected {name} payload {want_main} for a ({rows}, {cols}) tensor, got {tuple(main.shape)}"
        )
    if name == "none":
        if main.dtype.kind == "f" and not np.isfinite(main).all():
            raise WireError(f"{where}: the none payload holds non-finite values")
        return main
    if name == "fp16":
        e = int(aux[0]) if aux.shape == (1,) else None
        if e is None or not -MAX_EXPONENT <= e <= MAX_EXPONENT:
            raise WireError(
                f"{where}: fp16 scale must be one exponent in [-{MAX_EXPONENT}, {MAX_EXPONENT}], got {aux[:2]!r}"
            )
        with np.errstate(over="ignore", under="ignore"):
            out = np.ldexp(main.astype(np.float32), np.int32(-e))
    elif name == "bf16":
        out = bf16_value(main)
    elif name == "int8":
        out = _decode_int8(main, aux, rows, cols, codec.bits, where)
    else:
        out = _decode_topk(main, aux, rows, cols, where)
    if not np.isfinite(out).all():
        raise WireError(f"{where}: the {name} payload decodes to non-finite values")
    return out


def _decode_int8(packed: np.ndarray, params: np.ndarray, rows: int, cols: int, bits: int, where: str) -> np.ndarray:
    if params.shape != (rows, 2):
        raise WireError(f"{where}: int8 row scales must be uint16 ({rows}, 2), got {tuple(params.shape)}")
    lo, step = bf16_value(params[:, 0]), bf16_value(params[:, 1])
    if not (np.isfinite(lo).all() and np.isfinite(step).all()) or (params[:, 1] & 0x8000).any():
        raise WireError(f"{where}: int8 row scales must be finite with a step >= 0")
    if bits == 8:
        q = packed
    else:
        b = np.unpackbits(packed, axis=1)
        if b[:, cols * bits :].any():
            raise WireError(f"{where}: int8 packing bits beyond the last entry must be zero")
        wide = np.zeros((rows, cols, 8), np.uint8)
        wide[:, :, 8 - bits :] = b[:, : cols * bits].reshape(rows, cols, bits)
        q = np.packbits(wide, axis=2)[:, :, 0]
    with np.errstate(over="ignore", invalid="ignore"):
        return lo[:, None] + q.astype(np.float32) * step[:, None]


def _decode_topk(values: np.ndarray, indices: np.ndarray, rows: int, cols: int, where: str) -> np.ndarray:
    if indices.shape != values.shape:
        raise WireError(f"{where}: topk indices {tuple(indices.shape)} must match its values {tuple(values.shape)}")
    if indices.size and (int(indices.max()) >= cols or (np.diff(indices.astype(np.int64), axis=1) <= 0).any()):
        raise WireError(f"{where}: topk indices must be strictly increasing in each row and below {cols}")
    return densify_topk(values, indices, cols)


# -- agreement -------------------------------------------------------------------------------------------------
def codecs_of(compression) -> tuple[Codec, Codec]:
    """(embedding codec, gradient codec) of a config's network.compression section (vfl/config/schema.py)."""
    params = {"bits": compression.bits, "topk_fraction": compression.topk_fraction}
    return Codec(compression.embedding, **params), Codec(compression.gradient, **params)


def agreement_problems(peer: str, theirs: dict[str, str | None], ours: dict[str, str | None]) -> list[str]:
    """A follower's HELLO codecs against the leader's, per direction ({'embedding': agreement, 'gradient': ...}), as
    one sentence per disagreement naming both values."""
    return [
        f"{peer} has network.compression.{d}={describe(theirs[d])} but the leader has "
        f"network.compression.{d}={describe(ours[d])}: set the same network.compression on every party"
        for d in ("embedding", "gradient")
        if theirs[d] != ours[d]
    ]
