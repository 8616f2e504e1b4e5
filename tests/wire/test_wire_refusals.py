"""Typed wire messages refuse what a hostile peer may send: values of the right type outside their domain, fields that
contradict each other, tensors of the wrong count, dtype or rank, numbers JSON reads as infinite, and thousands of
random metas, each a one-line WireError naming the type, sender and field (the samples: test_wire_messages.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.support.wire_samples import CUT, DIGESTS, HELLO, NONCE, POINTS, ROWS, SAMPLES, SUITE, _wire
from vfl.wire.frames import WireError, decode, encode
from vfl.wire.messages import (
    MAX_CUT_DIM,
    MAX_REASON,
    Abort,
    Done,
    Embedding,
    Eval,
    Forward,
    Gradient,
    Prior,
    Psi,
    Save,
    Snapshot,
    Wait,
    Welcome,
    parse,
)
from vfl.wire.psi_messages import PSI_CHUNK_POINTS


@pytest.mark.parametrize(
    "message, meta_edit, needle",
    [
        (Snapshot(step=1), {"step": -1}, "field 'step' must be an integer in [0, "),
        (Done(epoch=0, step=1), {"epoch": -2, "step": 1}, "field 'epoch' must be an integer in [-1, "),
        (HELLO, {"cut_dim": 1}, f"field 'cut_dim' must be an integer in [2, {MAX_CUT_DIM}], got 1"),
        (HELLO, {"cut_dim": MAX_CUT_DIM + 1}, "field 'cut_dim' must be an integer in [2, "),
        (HELLO, {"nonce": NONCE.upper()}, "field 'nonce' must be 32 hex digits"),
        (HELLO, {"timeout_s": 0}, "field 'timeout_s' must be a finite number in (0, 86400]"),
        (
            HELLO,
            {"id_digest": {"train": "a", "valid": "b"}},
            "field 'id_digest' must be an object mapping each of train",
        ),
        (HELLO, {"rows": {**ROWS, "train": -1}}, "field 'rows' must be an object mapping"),
        (HELLO, {"rank": 0}, "fields 'rank' and 'ranks' come together"),
        (HELLO, {"rank": 2, "ranks": 2}, "field 'rank' must be below 'ranks'"),
        (
            Welcome(run="r", nonce="n", epochs=1, steps_per_epoch=1),
            {"run": "r" * 65},
            "field 'run' must be a string of 1..64",
        ),
        (Save(tag="final", epoch=0, step=0), {"tag": ""}, "field 'tag' must be a string of 1..64 characters, got ''"),
        (
            Eval(split="valid", start=0, stop=1, digest="e" * 32),
            {"split": "train2"},
            "field 'split' must be one of 'train', 'valid', 'test'",
        ),
        (Forward(epoch=0, step=0, rows=1, digest="d"), {"phase": "posterior"}, "field 'phase' must be one of 'prior'"),
        (Forward(epoch=0, step=0, rows=1, digest="d"), {"rows": 0}, "field 'rows' must be an integer in [1, "),
        (
            Embedding(cut=CUT, eval=("test", 0, 4)),
            {"eval": ["test", 0]},
            "field 'eval' must be a list [split, start, stop]",
        ),
        (Embedding(cut=CUT, eval=("test", 0, 4)), {"eval": ["test", 0, 4], "step": 3, "epoch": 0}, "carries both"),
        (Embedding(cut=CUT, eval=("test", 0, 4)), {}, "carries neither"),
        (Embedding(cut=CUT, step=0, epoch=0), {"step": 0}, "fields 'epoch', 'step' (and 'micro') come together"),
        (
            Prior(indices=np.arange(3, dtype=np.int64), epochs=1),
            {"epochs": 1001},
            "field 'epochs' must be an integer in [1, 1000]",
        ),
        (Prior(indices=np.arange(3, dtype=np.int64), epochs=1), {"rows": 4}, "must hold the 4 stage-one rows"),
        (
            Psi.hello(SUITE, 1),
            {"op": "hello", "suite": SUITE, "n": 2**27 + 1},
            "field 'n' must be an integer in [1, 134217728]",
        ),
        (Psi.hello(SUITE, 1), {"op": "exec", "suite": SUITE, "n": 1}, "field 'op' must be one of 'hello'"),
        (
            Psi.hello(SUITE, 1),
            {"op": "hello", "suite": SUITE, "n": 1, "start": 0},
            "field 'start' does not belong to a PSI hello",
        ),
        (Psi.chunk("mask", 0, 3), {"op": "mask", "start": 3, "stop": 3}, "range 3..3 is not a chunk of 1..8192"),
        (
            Psi.chunk("mask", 0, 3),
            {"op": "mask", "start": 0, "stop": PSI_CHUNK_POINTS + 1},
            "is not a chunk of 1..8192",
        ),
        (
            Psi.result(0, 2, 2, np.array([1, 2], np.int64)),
            {"op": "result", "start": 0, "stop": 2, "total": 1},
            "within the total 1",
        ),
        (Wait(), {"step": 1}, "unknown field 'step' (a WAIT carries no fields)"),
        (Snapshot(step=1), {"step": 1, "from": "x"}, "unknown field 'from' (a SNAPSHOT carries step)"),
    ],
)
def test_out_of_domain_values_and_inconsistent_fields_are_refused(message, meta_edit, needle):
    """Values of the right type outside their domain, unknown fields and fields that contradict each other."""
    # Prepare
    meta = {**message.to_wire()[0], **meta_edit} if not isinstance(message, (Embedding, Psi)) else meta_edit
    # Execute / Assert
    with pytest.raises(WireError, match=f"^{message.TYPE}.* from \\w+: ") as e:
        parse(_wire(message, meta))
    assert needle in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "bad",
    ["E" * 32, "e" * 31, "e" * 33, "g" * 32, "e" * 31 + "\n", " " + "e" * 31, "e" * 64, "", 7, None, ["e" * 32]],
    ids=["upper", "short", "long", "not-hex", "newline", "space", "hello-length", "empty", "int", "null", "list"],
)
def test_an_eval_whose_digest_is_not_32_hex_digits_is_refused_in_one_line(bad):
    """EVAL's range digest is exactly 32 lowercase hex digits: HELLO's 64-digit split digest, a near miss, another
    type or nothing is refused at parse, naming the field and its domain (the follower never reaches its handler)."""
    # Prepare
    meta = {**Eval(split="valid", start=0, stop=4, digest="e" * 32).to_wire()[0], "digest": bad}
    # Execute / Assert
    with pytest.raises(WireError, match=r"^EVAL from \w+: field 'digest' must be 32 hex digits") as e:
        parse(_wire(Eval(split="valid", start=0, stop=4, digest="e" * 32), meta))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "message, tensors, needle",
    [
        (
            Embedding(cut=CUT, step=0, epoch=0),
            [CUT.astype(np.float64)],
            "tensor 'cut' must be float32 with 2 dimension(s), got float64 (4, 3)",
        ),
        (
            Embedding(cut=CUT, step=0, epoch=0),
            [CUT.ravel()],
            "tensor 'cut' must be float32 with 2 dimension(s), got float32 (12,)",
        ),
        (Embedding(cut=CUT, step=0, epoch=0), [], "expected 1 tensor(s) (cut), got 0"),
        (Gradient(grad=CUT, epoch=0, step=0), [CUT, CUT], "expected 1 tensor(s) (grad), got 2"),
        (Snapshot(step=1), [CUT], "expected 0 tensor(s) (none), got 1"),
        (
            Prior(indices=np.arange(3, dtype=np.int64), epochs=1),
            [np.arange(3, dtype=np.float64)],
            "tensor 'indices' must be int64 with 1 dimension(s), got float64 (3,)",
        ),
        (Prior(indices=np.arange(3, dtype=np.int64), epochs=1), [np.array([0, 2, 2], np.int64)], "strictly increasing"),
        (Prior(indices=np.arange(3, dtype=np.int64), epochs=1), [np.array([-1, 0, 2], np.int64)], "indices >= 0"),
        (
            Psi.chunk("mask", 0, 3, POINTS),
            [POINTS[:2]],
            "PSI mask from leader: expected int64 (3, 4) points, got int64 (2, 4)",
        ),
        (Psi.chunk("leader", 0, 3, POINTS), [POINTS.astype(np.float64)], "expected int64 (3, 4) points, got float64"),
        (Psi.chunk("double", 0, 3, POINTS), [], "PSI double from leader: expected 1 tensor, got 0"),
        (
            Psi.result(0, 2, 2, np.array([1, 2], np.int64)),
            [np.array([1, 2, 3], np.int64)],
            "expected int64 (2,) positions",
        ),
        (Psi.done(2), [POINTS], "PSI done from leader: expected no tensor, got 1"),
    ],
)
def test_tensors_of_the_wrong_count_dtype_or_rank_are_refused(message, tensors, needle):
    """A message's tensors are checked for count and dtype (and what the message itself fixes of their shape)."""
    # Execute / Assert
    with pytest.raises(WireError) as e:
        parse(_wire(message, tensors=tensors))
    assert needle in str(e.value), str(e.value)


def test_a_json_number_that_overflows_to_infinity_is_refused():
    """1e999 is valid JSON that Python reads as inf (which strict JSON encoding never writes): a HELLO whose
    timeout_s says 1e999 is refused by the finiteness of the field."""
    # Prepare
    frames = [bytes(memoryview(f)) for f in encode("HELLO", "follower0", "", 0, *HELLO.to_wire())]
    frames[1] = frames[1].replace(b'"timeout_s":60.0', b'"timeout_s":1e999')
    msg = decode(frames, "follower0")
    # Execute / Assert
    with pytest.raises(WireError, match=r"HELLO from follower0: field 'timeout_s' must be a finite number .*, got inf"):
        parse(msg)


def test_an_integer_beyond_floats_range_is_refused_where_a_number_belongs():
    """JSON integers may have thousands of digits; float() of one overflows. A HELLO whose timeout_s is 10**400 is a
    WireError naming the field, never an OverflowError (found by a hostile review)."""
    # Prepare
    frames = [bytes(memoryview(f)) for f in encode("HELLO", "follower0", "", 0, *HELLO.to_wire())]
    frames[1] = frames[1].replace(b'"timeout_s":60.0', b'"timeout_s":1' + b"0" * 400)
    msg = decode(frames, "follower0")
    # Execute / Assert
    with pytest.raises(
        WireError, match=r"HELLO from follower0: field 'timeout_s' must be a finite number .*, got 1000"
    ):
        parse(msg)


def test_an_abort_reason_travels_cut_to_its_limit():
    """ABORT carries at most MAX_REASON characters of its reason, however long the sender's text."""
    # Prepare
    long = "x" * (3 * MAX_REASON)
    # Execute
    got = parse(_wire(Abort(reason=long)))
    # Assert
    assert got.reason == long[:MAX_REASON]


def test_a_message_parsed_as_another_class_names_both_types():
    """from_wire of one class refuses a message of another type (a receiver expecting GRADIENT gets EVAL)."""
    # Prepare
    msg = _wire(Eval(split="valid", start=0, stop=1, digest="e" * 32))
    # Execute / Assert
    with pytest.raises(WireError, match="expected GRADIENT from leader, got EVAL"):
        Gradient.from_wire(msg)


GARBAGE = [
    None,
    True,
    False,
    -1,
    0,
    1,
    3,
    2**62,
    2**63,
    1.5,
    -0.0,
    1e300,
    "",
    "x",
    "prior",
    "valid",
    "mask",
    NONCE,
    "y" * 300,
    [],
    [0],
    ["valid", 0, 4],
    ["test", 4, 0],
    {},
    {"train": "a"},
    DIGESTS,
    ROWS,
]


def test_thousands_of_random_metas_parse_or_raise_only_wire_errors():
    """Seeded: random values, dropped and added keys and random tensors for every type either parse into the
    type's class or raise WireError in one line; nothing else escapes (a crash would fail with its traceback)."""
    # Prepare
    rng = random.Random(20250101)
    tensor_choices = [
        CUT,
        CUT.astype(np.float64),
        POINTS,
        POINTS[:2],
        np.arange(4, dtype=np.int64),
        np.zeros((0, 4), np.int64),
        np.zeros((2, 2, 2), np.float32),
    ]
    outcomes = {"parsed": 0, "refused": 0}
    # Execute
    for n in range(12000):
        message, _ = rng.choice(SAMPLES)
        meta, tensors = message.to_wire()
        meta = dict(meta)
        keys = [f.name for f in type(message).FIELDS] + ["extra"]
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
            key = rng.choice(keys)
            if rng.random() < 0.2:
                meta.pop(key, None)
            else:
                meta[key] = rng.choice(GARBAGE)
        if rng.random() < 0.2:
            tensors = rng.sample(tensor_choices, rng.choice([0, 1, 1, 2]))
        msg = _wire(message, meta, tensors)
        try:
            got = parse(msg)
        except WireError as e:
            assert "\n" not in str(e) and len(str(e)) < 600, (n, str(e)[:200])
            outcomes["refused"] += 1
        else:
            assert type(got) is type(message)
            outcomes["parsed"] += 1
    # Assert: both outcomes are common (the mutations bite, and the unchanged or harmless ones pass)
    assert outcomes["refused"] > 5000 and outcomes["parsed"] > 2500, outcomes
