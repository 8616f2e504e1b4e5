"""train.ema_decay at the handshake: HELLO carries it (absent = off), and the leader refuses a follower whose value
differs from its own, one side off included, with one line naming both values, before any batch moves."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.party_processes import party_configs
from tests.support.wire_samples import HELLO, HELLO_META, _wire
from vfl.session.handshake import hello_problems
from vfl.wire import PROTOCOL_VERSION
from vfl.wire.frames import WireError
from vfl.wire.messages import parse

FIX = "set the same train.ema_decay on every party"
CURRENT = dataclasses.replace(
    HELLO, party="f", protocol=PROTOCOL_VERSION
)  # a HELLO the leader has no other quarrel with


def test_ema_decay_round_trips_and_is_left_out_when_off():
    # Prepare
    on = dataclasses.replace(HELLO, ema_decay=0.99)
    # Execute
    meta_on, meta_off = on.to_wire()[0], HELLO.to_wire()[0]
    # Assert: the value travels last and comes back equal; off sends the bytes a follower without the field sent
    assert list(meta_on)[-1] == "ema_decay" and meta_on["ema_decay"] == 0.99
    assert parse(_wire(on)) == on
    assert json.dumps(meta_off) == json.dumps(HELLO_META) and parse(_wire(HELLO)).ema_decay is None


@pytest.mark.parametrize("bad", [0, 0.0, 1, 1.0, -0.5, 1.5, "0.9", True, None, [0.9]])
def test_ema_decay_outside_zero_one_is_refused_on_the_wire(bad):
    # Prepare: a HELLO whose ema_decay is 0 or 1 (no average), outside [0, 1), or not a number
    meta = {**HELLO_META, "ema_decay": bad}
    # Execute / Assert: one line naming the type, the sender, the field and its domain (0, 1)
    with pytest.raises(WireError, match=r"^HELLO from \w+: field 'ema_decay' must be a finite number in \(0, 1\)") as e:
        parse(_wire(HELLO, meta))
    assert "(absent: off)" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "theirs, ours, needle",
    [
        (0.9, 0.99, "f has train.ema_decay=0.9 but the leader has train.ema_decay=0.99"),
        (None, 0.99, "f has train.ema_decay=0 (off) but the leader has train.ema_decay=0.99"),
        (0.99, None, "f has train.ema_decay=0.99 but the leader has train.ema_decay=0 (off)"),
    ],
    ids=["differ", "follower_off", "leader_off"],
)
def test_hello_problems_refuses_another_ema_decay(theirs, ours, needle):
    # Prepare
    follower = dataclasses.replace(CURRENT, ema_decay=theirs)
    leader = dataclasses.replace(CURRENT, ema_decay=ours)
    # Execute
    problems = hello_problems("f", follower, leader)
    # Assert: exactly this one problem, saying what to do
    assert problems == [f"{needle}: {FIX}"]


@pytest.mark.parametrize("decay", [None, 0.5])
def test_hello_problems_accepts_the_same_ema_decay(decay):
    # Prepare
    hello = dataclasses.replace(CURRENT, ema_decay=decay)
    # Execute / Assert
    assert hello_problems("f", hello, dataclasses.replace(hello)) == []


def test_hello_message_sends_the_config_value_and_nothing_when_off():
    # Prepare
    from vfl.config.schema import parse_config
    from vfl.session.handshake import hello_message

    class Shard:
        id_digest = {"train": "a", "valid": "b", "test": "c"}

        def split(self, name):
            return range(4)

    doc = {"role": "follower", "party": "f", "network": {"connect": "tcp://127.0.0.1:5560"}, "data": {"path": "x"}}
    # Execute
    got = {d: hello_message(parse_config({**doc, "train": {"ema_decay": d}}), Shard()).ema_decay for d in (0.0, 0.9)}
    # Assert
    assert got == {0.0: None, 0.9: 0.9}


def test_a_follower_with_another_ema_decay_is_refused_over_tcp(tmp_path, shards_small, procs):
    # Prepare: the leader averages its weights (0.9), the follower does not (its config leaves ema_decay at 0)
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=10, leader_train={"ema_decay": 0.9})
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    procs.start("follower0", "follower", cfgs["follower0"])
    code, _, err = procs.wait("leader", 60)
    f_code, _, f_err = procs.wait("follower0", 60)
    # Assert: both stop with the leader's one-line reason; no checkpoint was written
    line = f"follower0 has train.ema_decay=0 (off) but the leader has train.ema_decay=0.9: {FIX}"
    assert code == 1 and line in err, err
    assert f_code != 0 and line in f_err, f_err
    assert not (tmp_path / "out" / "checkpoints").exists() or not any((tmp_path / "out" / "checkpoints").iterdir())
