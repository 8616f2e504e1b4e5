"""Wire codecs (vfl/wire/codecs.py): each round-trips within its stated error, int8's stochastic rounding is unbiased
(and a biased rounding is caught), top-k's error feedback loses nothing over a run, the payloads are as small as
stated, and the decoder refuses any malformed payload with the wire's own error (fuzzed).

Statistical test (int8 unbiased): N = 20000 encodings of the same 64 entries; each decoded entry lies in
[g_q, g_q + step], so by Hoeffding P(|mean - x| >= t) <= 2 exp(-2 N t^2 / step^2). With t = step sqrt(ln(2 M / 1e-7)
/ (2 N)) for the M = 64 entries of one bit width, the union bound keeps a false failure below 1e-7 per width, 3e-7
for the three widths. A rounding to nearest or down (a fixed 'uniform') is off by up to step / 2 and fails it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.training.error_feedback import ErrorFeedback
from vfl.wire.codecs import (
    GRADIENT_CODECS,
    Codec,
    bf16_nearest,
    bf16_value,
    decode,
    densify_topk,
    encode,
)
from vfl.wire.frames import WireError

ROWS = np.random.default_rng(11).standard_normal((300, 32)).astype(np.float32) * np.float32(3.0)


def _rows_of_scales() -> np.ndarray:
    """Rows whose magnitudes span 1e-9 .. 1e4 (gradients of a mean loss are tiny), one sign-constant row, one
    constant row and one of zeros."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 16)) * np.logspace(-9, 4, 64)[:, None]
    x[3] = np.abs(x[3]) + 100.0
    x[4] = 0.75  # a bfloat16: the row comes back exactly
    x[5] = 0.0
    return x.astype(np.float32)


def _round_trip(codec: Codec, x: np.ndarray, seed: int = 0) -> np.ndarray:
    payload = encode(codec, x, np.random.default_rng(seed))
    return decode(codec, codec.wire_name, payload, x.shape, "test")


def test_none_is_the_float32_tensor_itself_bit_for_bit():
    # Prepare
    x = _rows_of_scales()
    # Execute
    payload = encode(Codec(), x)
    out = decode(Codec(), None, payload, x.shape, "test")
    # Assert
    assert len(payload) == 1 and payload[0].dtype == np.float32
    assert out.tobytes() == x.tobytes()


def test_fp16_round_trips_within_half_precision_relative_to_each_value():
    # Prepare: values over 13 orders of magnitude, and one tensor far beyond fp16's 65504
    x = _rows_of_scales()
    big = ROWS * np.float32(1e7)
    for t in (x, big):
        peak = float(np.abs(t).max())
        # Execute
        out = _round_trip(Codec("fp16"), t)
        # Assert: relative 2^-11 for every value fp16 holds as a normal number after the scale (>= peak 2^-29)
        normal = np.abs(t) >= peak * 2.0**-29
        np.testing.assert_array_less(np.abs(out - t)[normal], np.abs(t)[normal] * 2.0**-11 + 1e-45)
        assert np.all(np.abs(out - t)[~normal] <= peak * 2.0**-40)


def test_bf16_round_trips_to_the_nearest_bfloat16():
    # Prepare
    x = _rows_of_scales()
    # Execute
    out = _round_trip(Codec("bf16"), x)
    # Assert: relative error at most 2^-8, and each value is a bfloat16 (its low 16 bits are zero)
    assert np.all(np.abs(out - x) <= np.abs(x) * 2.0**-8)
    assert not np.any(out.view(np.uint32) & 0xFFFF)
    assert bf16_value(bf16_nearest(np.float32([1.0 + 2**-8]))).item() == 1.0  # a tie goes to even


@pytest.mark.parametrize("bits", [2, 5, 8])
def test_int8_round_trips_within_one_step_of_its_row(bits):
    # Prepare
    x = _rows_of_scales()
    levels = 2**bits - 1
    # Execute
    payload = encode(Codec("int8", bits=bits), x, np.random.default_rng(1))
    out = decode(Codec("int8", bits=bits), "int8", payload, x.shape, "test")
    # Assert: every entry within its row's step, and the step as small as stated
    step = bf16_value(payload[1][:, 1]).astype(np.float64)
    lo, hi = x.min(axis=1).astype(np.float64), x.max(axis=1).astype(np.float64)
    assert np.all(np.abs(out - x) <= step[:, None] * (1 + 1e-6))
    assert np.all(step <= ((hi - lo) + 2.0**-8 * np.abs(lo)) * (1 + 2.0**-7) / levels + 1e-44)
    assert np.array_equal(out[4], x[4]) and np.array_equal(out[5], x[5])  # a constant bfloat16 row: exactly


def _mean_error_over_trials(bits: int, rng) -> tuple[np.ndarray, float]:
    """|mean of N decodes - x| for one row of 64 entries tiled N times, and the Hoeffding threshold t."""
    n, m = 20_000, 64
    row = np.random.default_rng(3).uniform(-2.0, 3.0, m).astype(np.float32)
    x = np.tile(row, (n, 1))
    payload = encode(Codec("int8", bits=bits), x, rng)
    out = decode(Codec("int8", bits=bits), "int8", payload, x.shape, "test").astype(np.float64)
    step = float(bf16_value(payload[1][0, 1]))
    t = step * math.sqrt(math.log(2 * m / 1e-7) / (2 * n))
    return np.abs(out.mean(axis=0) - row), t


@pytest.mark.parametrize("bits", [3, 6, 8])
def test_int8_stochastic_rounding_is_unbiased(bits):
    # Prepare / Execute: a seeded generator, as the sender's own would be (false failure < 1e-7 per width)
    err, t = _mean_error_over_trials(bits, np.random.default_rng(2026 + bits))
    # Assert
    assert err.max() <= t, (err.max(), t)


class _FixedUniforms:
    """A 'generator' whose uniforms are all `u`: u = 0.5 rounds to the nearest level, u -> 1 rounds down."""

    def __init__(self, u: float):
        self.u = u

    def random(self, shape, dtype=np.float64):
        return np.full(shape, self.u, dtype=dtype)


@pytest.mark.parametrize("u", [0.5, 1.0 - 1e-12])
def test_the_unbiasedness_test_fails_a_biased_rounding(u):
    # Prepare / Execute: the same test with rounding to nearest (MindSpore-style round) or down
    err, t = _mean_error_over_trials(3, _FixedUniforms(u))
    # Assert: the power of the test above
    assert err.max() > 5 * t


@pytest.mark.parametrize("fraction, k", [(0.25, 8), (0.5, 16), (0.01, 1)])
def test_topk_keeps_the_k_largest_entries_of_each_row_and_exactly_them(fraction, k):
    # Prepare
    codec = Codec("topk", topk_fraction=fraction)
    # Execute
    values, indices = encode(codec, ROWS)
    out = decode(codec, "topk", (values, indices), ROWS.shape, "test")
    # Assert
    assert values.shape == indices.shape == (ROWS.shape[0], k) and codec.k(32) == k
    kept = out != 0
    assert np.array_equal(out[kept], ROWS[kept]) and np.all(kept.sum(axis=1) == k)
    smallest_kept = np.where(kept, np.abs(ROWS), np.inf).min(axis=1)
    largest_dropped = np.where(kept, -np.inf, np.abs(ROWS)).max(axis=1)
    assert np.all(smallest_kept >= largest_dropped)


def test_error_feedback_sends_over_a_run_all_that_top_k_dropped():
    # Prepare: 40 samples of 6 columns, 5 epochs of shuffled batches of 8, k = 1 a row
    rng = np.random.default_rng(7)
    codec = Codec("topk", topk_fraction=0.1)
    ef = ErrorFeedback(40, 6)
    true_sum, sent_sum = np.zeros((40, 6)), np.zeros((40, 6))
    # Execute
    for _ in range(5):
        for batch in rng.permutation(40).reshape(5, 8):
            g = rng.standard_normal((8, 6)).astype(np.float32)
            values, indices = ef.send(codec, g, batch)
            true_sum[batch] += g
            sent_sum[batch] += densify_topk(values, indices, 6)
    # Assert: per sample, what was sent plus what is still owed is exactly what was computed (float rounding aside)
    np.testing.assert_allclose(sent_sum + ef.memory, true_sum, atol=1e-4)
    assert np.abs(ef.memory).max() > 0  # something is owed: the memory is in use
    ef.reset()
    assert ef.memory is None


def test_error_feedback_adds_a_samples_residual_to_that_samples_next_gradient_only():
    # Prepare: sample 2's first gradient drops 0.5 in column 1
    ef = ErrorFeedback(4, 2)
    codec = Codec("topk", topk_fraction=0.5)
    ef.send(codec, np.float32([[3.0, 0.5]]), np.array([2]))
    # Execute: sample 0 then sample 2 send (0, 0.2)
    other = densify_topk(*ef.send(codec, np.float32([[0.0, 0.2]]), np.array([0])), 2)
    same = densify_topk(*ef.send(codec, np.float32([[0.0, 0.2]]), np.array([2])), 2)
    # Assert
    np.testing.assert_allclose(other, [[0.0, 0.2]])
    np.testing.assert_allclose(same, [[0.0, 0.7]])


@pytest.mark.parametrize("cols", [2, 3, 32, 100])
def test_every_codec_sends_at_most_the_float32_bytes_and_int8_fp16_meet_their_ratios(cols):
    # Prepare
    x = np.random.default_rng(cols).standard_normal((50, cols)).astype(np.float32)
    # Execute
    sizes = {name: Codec(name, topk_fraction=0.5).row_bytes(cols) for name in GRADIENT_CODECS}
    measured = {
        name: sum(a.nbytes for a in encode(Codec(name, topk_fraction=0.5), x, np.random.default_rng(0)))
        for name in GRADIENT_CODECS
    }
    # Assert: the stated bytes are the payload's (fp16 adds its 8-byte exponent once a message)
    rows = x.shape[0]
    assert measured == {n: sizes[n] * rows + (8 if n == "fp16" else 0) for n in GRADIENT_CODECS}
    assert all(size <= 4 * cols for size in sizes.values())
    assert sizes["fp16"] * 2 == sizes["bf16"] * 2 == 4 * cols
    if cols >= 32:  # the wide cut: int8 >= 3.5x fewer bytes than float32
        assert 4 * cols / sizes["int8"] >= 3.5


# -- the decoder refuses malformed payloads ----------------------------------------------------------------------
def _valid(name: str, bits: int = 5) -> tuple[Codec, tuple]:
    codec = Codec(name, bits=bits, topk_fraction=0.25)
    return codec, encode(codec, ROWS[:10, :12], np.random.default_rng(0))


@pytest.mark.parametrize(
    "name, mutate, needle",
    [
        ("int8", lambda p: (p[0], np.where(np.arange(2) == 1, 0x7F80, p[1]).astype(np.uint16)), "finite"),  # step inf
        ("int8", lambda p: (p[0], (p[1] | 0x8000).astype(np.uint16)), "step >= 0"),
        ("int8", lambda p: (p[0] | 1, p[1]), "packing bits"),  # 12 x 5 bits = 60: the last 4 bits must be 0
        ("int8", lambda p: (p[0][:, :-1], p[1]), "payload"),
        ("int8", lambda p: (p[0], p[1][:-1]), "row scales"),
        ("int8", lambda p: (p[0].astype(np.uint16), p[1]), "must be uint8"),
        ("topk", lambda p: (p[0], p[1][:, ::-1].copy()), "strictly increasing"),
        ("topk", lambda p: (p[0], (p[1] + 12).astype(np.uint16)), "below 12"),
        ("topk", lambda p: (p[0], np.zeros_like(p[1])), "strictly increasing"),
        ("topk", lambda p: (p[0][:, :2], p[1][:, :2]), "payload"),
        ("topk", lambda p: (p[0],), "two tensors"),
        ("bf16", lambda p: (np.full_like(p[0], 0x7FC0),), "non-finite"),  # NaN bits
        ("bf16", lambda p: (p[0], p[0]), "one tensor"),
        ("fp16", lambda p: (p[0], np.array([400], np.int64)), "exponent"),
        ("fp16", lambda p: (p[0], np.array([-300], np.int64)), "non-finite"),  # 2^300 overflows float32
        ("fp16", lambda p: (p[0], np.array([1, 2], np.int64)), "exponent"),
    ],
)
def test_the_decoder_refuses_a_malformed_payload_naming_what_is_wrong(name, mutate, needle):
    # Prepare
    codec, payload = _valid(name)
    # Execute / Assert
    with pytest.raises(WireError, match=needle) as e:
        decode(codec, codec.wire_name, mutate(payload), (10, 12), "GRADIENT for step 3")
    assert str(e.value).startswith("GRADIENT for step 3: ") and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "agreed, sent",
    [("int8", None), ("none", "int8"), ("int8", "topk"), ("bf16", "fp16")],
)
def test_a_payload_of_another_codec_than_the_agreed_one_is_refused(agreed, sent):
    # Prepare
    codec = Codec(agreed)
    other = Codec(sent or "none")
    payload = encode(other, ROWS[:4, :8], np.random.default_rng(0))
    # Execute / Assert: one line naming both
    with pytest.raises(WireError, match=f"coded {sent or 'none'}, but this run agreed {agreed}"):
        decode(codec, sent, payload, (4, 8), "EMBEDDING from follower0")


def _random_tensor(rng: np.random.Generator) -> np.ndarray:
    dtype = rng.choice(["float32", "float16", "uint16", "uint8", "int64", "float64"])
    shape = tuple(int(s) for s in rng.integers(0, 14, size=rng.integers(1, 3)))
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8).tobytes()
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def test_thousands_of_random_and_mutated_payloads_decode_or_raise_only_wire_errors():
    # Prepare: random tensors of any dtype and shape, and valid payloads with random bytes flipped
    rng = np.random.default_rng(2024)
    outcomes = {"decoded": 0, "refused": 0}
    for trial in range(6000):
        name = GRADIENT_CODECS[trial % len(GRADIENT_CODECS)]
        codec, payload = _valid(name, bits=int(rng.integers(2, 9)))
        if trial % 2:
            tensors = tuple(_random_tensor(rng) for _ in range(int(rng.integers(0, 3))))
        else:
            tensors = []
            for t in payload:
                raw = bytearray(t.tobytes())
                for _ in range(int(rng.integers(1, 4))):
                    if raw:
                        raw[int(rng.integers(len(raw)))] = int(rng.integers(256))
                tensors.append(np.frombuffer(bytes(raw), t.dtype).reshape(t.shape))
            tensors = tuple(tensors)
        # Execute
        try:
            with np.errstate(all="ignore"):
                out = decode(codec, codec.wire_name, tensors, (10, 12), "fuzz")
        except WireError:
            outcomes["refused"] += 1
            continue
        # Assert: what decodes is a finite float32 tensor of the expected shape
        assert out.dtype == np.float32 and out.shape == (10, 12) and np.isfinite(out).all()
        outcomes["decoded"] += 1
    assert outcomes["decoded"] > 500 and outcomes["refused"] > 500, outcomes
