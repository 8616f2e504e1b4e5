"""Typed wire messages: every type round-trips through the frames bit for bit with the meta protocol 3 always sent,
and a missing or mistyped field is a one-line WireError naming the type, sender and field (values outside their
domain, wrong tensors and random hostile metas: test_wire_refusals.py, which reuses the samples here)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from vfl.wire.fields import MAX_INT
from vfl.wire.frames import MESSAGE_TYPES, Message, WireError, decode, encode
from vfl.wire.link_messages import LinkEcho, LinkProbe, LinkReport
from vfl.wire.messages import (
    MESSAGE_CLASSES,
    Abort,
    Bye,
    Done,
    Embedding,
    Eval,
    Forward,
    Gradient,
    Hello,
    Prior,
    Psi,
    Restore,
    Save,
    Snapshot,
    Wait,
    Welcome,
    WireMessage,
    parse,
)
from vfl.wire.predict_messages import PredictCut, PredictDone, PredictHello, PredictRows, PredictWelcome
from vfl.wire.serve_messages import ServeCut, ServeHello, ServeIds, ServeRefused, ServeWelcome

SUITE = "ecdh-psi/x25519-elligator2x2-sha512/v1"
NONCE = "0123456789abcdef0123456789abcdef"
DIGESTS = {"train": "a" * 64, "valid": "b" * 64, "test": "c" * 64}
ROWS = {"train": 800, "valid": 100, "test": 100}
CUT = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
POINTS = np.arange(12, dtype=np.int64).reshape(3, 4) - 5
HELLO = Hello(
    nonce=NONCE,
    party="follower0",
    protocol=3,
    id_digest=DIGESTS,
    rows=ROWS,
    batch_size=64,
    seed=2**63 - 1,
    cut_dim=8,
    microbatches=2,
    resume_step=10,
    timeout_s=60.0,
)

# (message, the meta the code before the typed classes sent for it: same keys, values and order)
HELLO_META = {
    "nonce": NONCE,
    "party": "follower0",
    "protocol": 3,
    "id_digest": DIGESTS,
    "rows": ROWS,
    "batch_size": 64,
    "seed": 2**63 - 1,
    "cut_dim": 8,
    "microbatches": 2,
    "resume_step": 10,
    "timeout_s": 60.0,
}

SAMPLES: list[tuple[WireMessage, dict]] = [
    (Psi.hello(SUITE, 100), {"op": "hello", "suite": SUITE, "n": 100}),
    (Psi.chunk("mask", 0, 3), {"op": "mask", "start": 0, "stop": 3}),
    (Psi.chunk("mask", 0, 3, POINTS), {"op": "mask", "start": 0, "stop": 3}),
    (Psi.chunk("double", 5, 8, POINTS), {"op": "double", "start": 5, "stop": 8}),
    (Psi.chunk("leader", 0, 3, POINTS), {"op": "leader", "start": 0, "stop": 3}),
    (Psi.result(2, 4, 9, np.array([3, 17], np.int64)), {"op": "result", "start": 2, "stop": 4, "total": 9}),
    (Psi.done(9), {"op": "done", "size": 9}),
    (
        HELLO,
        HELLO_META,
    ),
    (
        dataclasses.replace(HELLO, rank=1, ranks=2),
        {**HELLO_META, "rank": 1, "ranks": 2},
    ),
    (
        Welcome(run="f" * 32, nonce=NONCE, epochs=3, steps_per_epoch=13),
        {"run": "f" * 32, "nonce": NONCE, "epochs": 3, "steps_per_epoch": 13},
    ),
    (
        Welcome(run="f" * 32, nonce=NONCE, epochs=3, steps_per_epoch=13, rank=0, ranks=2),
        {"run": "f" * 32, "nonce": NONCE, "epochs": 3, "steps_per_epoch": 13, "rank": 0, "ranks": 2},
    ),
    (Forward(epoch=1, step=7, rows=4, digest="d" * 32), {"epoch": 1, "step": 7, "rows": 4, "digest": "d" * 32}),
    (
        Forward(epoch=0, step=2, rows=4, digest="d" * 32, phase="prior"),
        {"phase": "prior", "epoch": 0, "step": 2, "rows": 4, "digest": "d" * 32},
    ),
    (Embedding(cut=CUT, epoch=1, step=7, micro=1), {"epoch": 1, "step": 7, "micro": 1}),
    (Embedding(cut=CUT, epoch=0, step=2), {"epoch": 0, "step": 2}),
    (Embedding(cut=CUT, eval=("valid", 96, 100)), {"eval": ["valid", 96, 100]}),
    (Gradient(grad=CUT, epoch=1, step=7, micro=0), {"epoch": 1, "step": 7, "micro": 0}),
    (Gradient(grad=CUT, epoch=0, step=2, phase="prior"), {"phase": "prior", "epoch": 0, "step": 2}),
    (
        Eval(split="test", start=0, stop=4, digest="e" * 32),
        {"split": "test", "start": 0, "stop": 4, "digest": "e" * 32},
    ),
    (
        Eval(split="train", start=4, stop=8, digest="0a" * 16, phase="prior"),
        {"phase": "prior", "split": "train", "start": 4, "stop": 8, "digest": "0a" * 16},
    ),
    (Save(tag="step100", epoch=1, step=100), {"tag": "step100", "epoch": 1, "step": 100}),
    (Snapshot(step=40), {"step": 40}),
    (Restore(step=40), {"step": 40}),
    (Wait(), {}),
    (Done(epoch=2, step=39), {"epoch": 2, "step": 39}),
    (Done(epoch=-1, step=0), {"epoch": -1, "step": 0}),
    (Bye(steps=39, snapshot_bytes=123456), {"steps": 39, "snapshot_bytes": 123456}),
    (Abort(reason="training loss became nan"), {"reason": "training loss became nan"}),
    (Prior(indices=np.array([0, 3, 4, 9], np.int64), epochs=2), {"rows": 4, "epochs": 2}),
    (
        PredictHello(NONCE, "follower0", 5, "r" * 32, 40, "f" * 32, 2, 3000, 60.0),
        {
            "nonce": NONCE,
            "party": "follower0",
            "protocol": 5,
            "run": "r" * 32,
            "step": 40,
            "fingerprint": "f" * 32,
            "cut_dim": 2,
            "rows": 3000,
            "timeout_s": 60.0,
        },
    ),
    (PredictWelcome("r" * 32, NONCE, 4096), {"run": "r" * 32, "nonce": NONCE, "batch_rows": 4096}),
    (PredictRows(0, 4096, "d" * 32), {"start": 0, "stop": 4096, "digest": "d" * 32}),
    (PredictCut(CUT, 0, 3), {"start": 0, "stop": 3}),
    (PredictDone(3000), {"rows": 3000}),
    (
        ServeHello("a" * 32, "follower0", 5, "r" * 32, 1600, "f" * 32, 2, 60.0, 1024, 1e5),
        {
            "nonce": "a" * 32,
            "party": "follower0",
            "protocol": 5,
            "run": "r" * 32,
            "step": 1600,
            "fingerprint": "f" * 32,
            "cut_dim": 2,
            "timeout_s": 60.0,
            "max_rows": 1024,
            "rows_per_s": 1e5,
        },
    ),
    (ServeWelcome("r" * 32, "a" * 32), {"run": "r" * 32, "nonce": "a" * 32}),
    (ServeIds(7, np.array([3, -1, 9], np.int64), 250), {"request": 7, "rows": 3, "deadline_ms": 250}),
    (ServeCut(7, CUT, np.array([1], np.int64)), {"request": 7}),
    (ServeRefused(7, "rate limit", 40), {"request": 7, "reason": "rate limit", "retry_ms": 40}),
    (LinkProbe(3, NONCE, 1024, np.zeros(7, np.uint8)), {"probe": 3, "nonce": NONCE, "echo_bytes": 1024}),
    (LinkEcho(3, NONCE, np.zeros(1024, np.uint8)), {"probe": 3, "nonce": NONCE}),
    (LinkReport(40.0, 1, 100.0), {"rtt_ms": 40.0, "final": 1, "down_mbit": 100.0}),
]
IDS = [f"{m.TYPE}-{i}" for i, (m, _) in enumerate(SAMPLES)]
SENDER = {
    "HELLO": "follower0",
    "EMBEDDING": "follower0",
    "BYE": "follower0",
    "PREDICT_HELLO": "follower0",
    "PREDICT_CUT": "follower0",
    "SERVE_HELLO": "follower0",
    "SERVE_CUT": "follower0",
    "SERVE_REFUSED": "follower0",
}  # the others: as the leader sends them


def _wire(message: WireMessage, meta: dict | None = None, tensors: list | None = None) -> Message:
    """The message as a receiver decodes it from the frames (meta / tensors: replaced, to plant a fault)."""
    m, t = message.to_wire()
    sender = SENDER.get(message.TYPE, "leader")
    frames = encode(message.TYPE, sender, "run1", 5, m if meta is None else meta, t if tensors is None else tensors)
    return decode([bytes(memoryview(f)) for f in frames], sender)


def test_the_table_holds_one_class_per_wire_type():
    """MESSAGE_CLASSES maps exactly frames.MESSAGE_TYPES, in order, each to the class whose TYPE it is."""
    # Execute / Assert
    assert tuple(MESSAGE_CLASSES) == MESSAGE_TYPES
    assert all(cls.TYPE == name for name, cls in MESSAGE_CLASSES.items())
    assert {m.TYPE for m, _ in SAMPLES} == set(MESSAGE_TYPES)  # the samples below cover every type


@pytest.mark.parametrize("message, legacy", SAMPLES, ids=IDS)
def test_every_message_round_trips_through_the_frames(message, legacy):
    """to_wire -> encode -> decode -> parse gives back an equal message, tensors bit for bit."""
    # Prepare
    meta, tensors = message.to_wire()
    # Execute
    got = parse(_wire(message))
    # Assert
    assert type(got) is type(message) and got == message
    for a, b in zip(got.to_wire()[1], tensors):
        assert a.dtype == b.dtype and a.tobytes() == np.ascontiguousarray(b).tobytes()


@pytest.mark.parametrize("message, legacy", SAMPLES, ids=IDS)
def test_the_bytes_on_the_wire_are_those_protocol_3_always_sent(message, legacy):
    """The meta keys, values and their order are those of the hand-written dicts the typed classes replaced."""
    # Execute
    meta, _ = message.to_wire()
    # Assert
    assert json.dumps(meta) == json.dumps(legacy)


def _required(message: WireMessage, meta: dict) -> list[str]:
    """The meta keys a message cannot lose: its non-optional fields, and for PSI the fields of its op."""
    fields = {f.name: f for f in type(message).FIELDS}
    return [k for k in meta if not fields[k].optional or isinstance(message, Psi)]


REQUIRED = [(m, k) for m, meta in SAMPLES for k in _required(m, meta)]


@pytest.mark.parametrize("message, key", REQUIRED, ids=[f"{m.TYPE}-{k}" for m, k in REQUIRED])
def test_a_missing_required_field_is_named(message, key):
    """Leaving out a required field is refused, naming the type, the sender and the field."""
    # Prepare
    meta = {k: v for k, v in message.to_wire()[0].items() if k != key}
    # Execute / Assert
    with pytest.raises(WireError, match=rf"^{message.TYPE}( \w+)? from \w+: field '{key}' must be .*got nothing"):
        parse(_wire(message, meta))


def _wrong_values(value) -> list:
    """Values of another JSON type than `value`'s (an integer field gets a string, a bool, a float, null ...)."""
    if isinstance(value, int):
        return [str(value), True, value + 0.5, None, [value]]
    if isinstance(value, float):
        return [str(value), False, None, {}]
    if isinstance(value, str):
        return [7, True, None, ["x"]]
    return ["x", 1, None, True]  # an object (HELLO's per-split maps) or a list (EMBEDDING's eval)


WRONG = [(m, k, bad) for m, meta in SAMPLES for k, v in meta.items() for bad in _wrong_values(v)]


@pytest.mark.parametrize("message, key, bad", WRONG, ids=[f"{m.TYPE}-{k}-{b!r}" for m, k, b in WRONG])
def test_a_field_of_the_wrong_type_is_named(message, key, bad):
    """A string, bool, float or null where another type belongs is refused with the field named, in one line."""
    # Prepare
    meta = {**message.to_wire()[0], key: bad}
    # Execute / Assert
    with pytest.raises(WireError, match=rf"from \w+: field '{key}' must be") as e:
        parse(_wire(message, meta))
    assert "\n" not in str(e.value)


def test_the_error_quotes_the_field_its_domain_and_the_value():
    """GRADIENT with step 'x': the text says who sent it, which field, the allowed domain and the value."""
    # Prepare
    msg = _wire(Gradient(grad=CUT, epoch=0, step=1), {"epoch": 0, "step": "x"})
    # Execute
    with pytest.raises(WireError) as e:
        parse(msg)
    # Assert
    assert str(e.value) == f"GRADIENT from leader: field 'step' must be an integer in [0, {MAX_INT}], got 'x'"


def test_a_gradient_carrying_a_loss_is_refused_as_an_unknown_field():
    """Protocol 6 sends no loss to a follower (without label DP it is a function of the true labels): a GRADIENT
    whose header still carries one is refused, naming the field."""
    # Prepare
    msg = _wire(Gradient(grad=CUT, epoch=0, step=1, micro=0), {"epoch": 0, "step": 1, "micro": 0, "loss": 0.4123})
    # Execute
    with pytest.raises(WireError) as e:
        parse(msg)
    # Assert
    assert str(e.value).startswith("GRADIENT from leader:") and "'loss'" in str(e.value) and "\n" not in str(e.value)
