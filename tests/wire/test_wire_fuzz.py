"""Decoder fuzzing: thousands of mutated frames from an authenticated peer raise only the wire's own error, in the
decoder (frames.py) or when the decoded message is parsed into its typed class (messages.py)."""

from __future__ import annotations

import json
import random

import numpy as np

from vfl.wire.frames import Message, WireError, decode, encode
from vfl.wire.messages import Embedding, Gradient, Save, parse

GARBAGE_VALUES = [
    None,
    True,
    -1,
    2**70,
    1.5,
    float("1e308"),
    "",
    "x" * 300,
    [],
    ["float32"],
    {},
    {"a": [1]},
    [0, 2**40],
    [0] + [2**31] * 7,
    [2**31, 2**31],
    "float32",
    "int64",
    "object",
    [[[[]]]],
]


def _valid() -> list[list[bytes]]:
    tensors = [
        np.arange(12, dtype=np.float32).reshape(6, 2),
        np.arange(3, dtype=np.int64),
        np.zeros((0, 4), np.float64),
    ]
    msgs = [
        encode("EMBEDDING", "follower0", "r", 3, {"step": 1, "digest": "ab"}, tensors[:1]),
        encode("GRADIENT", "leader", "r", 0, {"epoch": 0, "step": 2, "loss": 0.5}, tensors),
        encode("SAVE", "leader", "r", 9, {"tag": "final", "epoch": 1, "step": 4}),
        encode("HELLO", "follower0", "", 0, {"id_digest": {"train": "aa"}, "rows": {"train": 3}}),
    ]
    typed = [
        Embedding(cut=tensors[0], epoch=0, step=1, micro=0),
        Gradient(grad=tensors[0], epoch=0, step=2, micro=0),
        Save(tag="final", epoch=1, step=4),
    ]  # messages that parse until a mutation hits them
    msgs += [encode(m.TYPE, "follower0", "r", 3, *m.to_wire()) for m in typed]
    return [[bytes(memoryview(f)) for f in m] for m in msgs]


def _mutate_header(rng: random.Random, raw: bytes) -> bytes:
    try:
        h = json.loads(raw)
        assert isinstance(h, dict) and isinstance(h.get("meta"), dict) and isinstance(h.get("tensors"), list)
        assert all(isinstance(d, dict) for d in h["tensors"])
    except (ValueError, AssertionError, RecursionError):  # already mutated beyond JSON: mutate the bytes
        return raw[::-1]
    target = rng.choice(["top", "meta", "tensor"])
    if target == "tensor" and h["tensors"]:
        d = rng.choice(h["tensors"])
        d[rng.choice(["dtype", "shape", "nbytes", "extra"])] = rng.choice(GARBAGE_VALUES)
    elif target == "meta":
        h["meta"][rng.choice(["step", "epoch", "digest", "tag", "loss", "run", "id_digest"])] = rng.choice(
            GARBAGE_VALUES
        )
    else:
        h[rng.choice(["type", "from", "run", "seq", "meta", "tensors"])] = rng.choice(GARBAGE_VALUES)
    return json.dumps(h).encode()


def _mutate(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    frames = list(frames)
    if len(frames) < 2:
        return frames + [rng.randbytes(rng.randint(0, 9))]
    op = rng.randrange(8)
    i = rng.randrange(len(frames))
    if op == 0:  # flip bytes anywhere
        b = bytearray(frames[i])
        for _ in range(rng.randint(1, 4)):
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        frames[i] = bytes(b)
    elif op == 1:  # truncate or extend a frame
        frames[i] = (
            frames[i][: rng.randrange(len(frames[i]) + 1)]
            if rng.random() < 0.7
            else frames[i] + b"\x00" * rng.randint(1, 9)
        )
    elif op == 2:  # drop, duplicate or add frames
        if rng.random() < 0.5 and len(frames) > 1:
            del frames[i]
        else:
            frames.insert(i, rng.choice([frames[i], b"", rng.randbytes(rng.randint(1, 64))]))
    elif op == 3:
        frames[1] = _mutate_header(rng, frames[1])
    elif op == 4:  # deep or huge JSON
        depth = rng.choice([100, 5000, 40000])
        frames[1] = (b"[" * depth + b"]" * depth) if rng.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
    elif op == 5:  # not JSON / not UTF-8
        frames[1] = rng.randbytes(rng.randint(0, 200))
    elif op == 6:  # JSON constants and numbers out of range
        frames[1] = frames[1].replace(
            b'"seq":', rng.choice([b'"seq":NaN,"x":', b'"seq":1e999,"x":', b'"seq":-Infinity,"x":']), 1
        )
    else:  # random frames entirely
        frames = [rng.randbytes(rng.randint(0, 40)) for _ in range(rng.randint(0, 6))]
    return frames


def test_thousands_of_mutated_frames_raise_only_wire_errors():
    # Prepare: seeded, so a failure reproduces
    rng = random.Random(20240519)
    valid = _valid()
    outcomes = {"ok": 0, "refused": 0, "parsed": 0, "unparsed": 0}
    # Execute
    for n in range(6000):
        frames = _mutate(rng, rng.choice(valid))
        if rng.random() < 0.3:
            frames = _mutate(rng, frames)
        try:
            msg = decode(frames, "follower0")
        except WireError as e:
            assert "\n" not in str(e) and len(str(e)) < 600, (n, str(e)[:200])
            outcomes["refused"] += 1
        else:  # any other exception fails the test with its traceback
            assert isinstance(msg, Message)
            outcomes["ok"] += 1
            try:
                parse(msg)
            except WireError as e:
                assert "\n" not in str(e) and len(str(e)) < 600, (n, str(e)[:200])
                outcomes["unparsed"] += 1
            else:
                outcomes["parsed"] += 1
    # Assert: the mutations mostly bite, and some survive (the fuzzer is not only feeding noise), up to the typed class
    assert outcomes["refused"] > 4000 and outcomes["ok"] > 50 and outcomes["parsed"] > 50, outcomes
