"""Typed wire messages: every type round-trips through the frames bit for bit with the meta protocol 3 always sent,
and a missing or mistyped field is a one-line WireError naming the type, sender and field (values outside their
domain, wrong tensors and random hostile metas: test_wire_refusals.py; both take the samples from
tests/support/wire_samples.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.wire_samples import CUT, SAMPLES, _wire
from vfl.wire.fields import MAX_INT
from vfl.wire.frames import MESSAGE_TYPES, WireError
from vfl.wire.messages import (
    MESSAGE_CLASSES,
    Gradient,
    Psi,
    WireMessage,
    parse,
)

IDS = [f"{m.TYPE}-{i}" for i, (m, _) in enumerate(SAMPLES)]


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
