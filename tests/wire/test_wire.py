"""The wire validates every field of every frame, and its channels enforce keys, order and deadlines over tcp."""

from __future__ import annotations

import numpy as np
import pytest
import zmq

from tests.support.party_processes import free_port, party_keys
from vfl.wire import FollowerChannel, LeaderChannel, PeerAbort, PeerTimeout, WireError
from vfl.wire.curve_keys import load_follower_keys, load_leader_keys
from vfl.wire.frames import MAGIC_PREFIX, PROTOCOL_VERSION, decode, encode
from vfl.wire.messages import parse


def _frames(tensors=(np.arange(6, dtype=np.float32).reshape(3, 2),), meta=None):
    return [
        bytes(memoryview(f)) for f in encode("EMBEDDING", "follower0", "run1", 4, meta or {"step": 1}, list(tensors))
    ]


def test_round_trip_keeps_type_meta_and_tensors_bit_for_bit():
    # Prepare
    big = np.random.default_rng(0).standard_normal((20000, 4)).astype(np.float32)  # > 64 KiB: zero-copy path
    ints = np.arange(5, dtype=np.int64)
    # Execute
    msg = decode(_frames((big, ints), {"step": 9, "digest": "ab"}), "follower0")
    # Assert
    assert (msg.type, msg.sender, msg.run, msg.seq) == ("EMBEDDING", "follower0", "run1", 4)
    assert msg.meta == {"step": 9, "digest": "ab"}
    np.testing.assert_array_equal(msg.tensors[0], big)
    np.testing.assert_array_equal(msg.tensors[1], ints)


def test_protocol_version_mismatch_is_named():
    # Prepare
    frames = _frames()
    other = PROTOCOL_VERSION + 1
    frames[0] = MAGIC_PREFIX + bytes([other])
    # Execute / Assert
    with pytest.raises(WireError, match=f"peer speaks v{other}, we speak v{PROTOCOL_VERSION}"):
        decode(frames, "follower0")


def _forge(header_edit):
    """A message whose header was edited by an authenticated but buggy or hostile peer."""
    import json

    frames = _frames()
    h = json.loads(frames[1])
    header_edit(h)
    frames[1] = json.dumps(h).encode()
    return frames


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda h: h["tensors"][0].update(dtype="object"), "dtype 'object' not allowed"),
        (lambda h: h["tensors"][0].update(shape=[2, 2]), "declared nbytes"),
        (lambda h: h["tensors"][0].update(nbytes=999), "declared nbytes"),
        (lambda h: h.update(type="EXEC"), "unknown message type 'EXEC'"),
        (lambda h: h.update(seq="4"), "'seq'"),
        (lambda h: h["tensors"].append(h["tensors"][0]), "declares 2 tensors in 2 frames but carries 1"),
    ],
)
def test_invalid_headers_from_an_authenticated_peer_are_rejected_by_field(edit, needle):
    with pytest.raises(WireError, match=needle):
        decode(_forge(edit), "follower0")


def test_non_finite_tensor_is_rejected():
    # Prepare
    bad = np.array([[1.0, np.nan]], dtype=np.float32)
    # Execute / Assert
    with pytest.raises(WireError, match="non-finite"):
        decode(_frames((bad,)), "follower0")


def test_no_pickle_anywhere_in_the_code():
    # Prepare
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    sources = [p for d in ("vfl", "leader", "follower", "privacy") for p in (root / d).rglob("*.py")]
    # Execute
    import re

    banned = re.compile(r"import pickle|recv_pyobj|(?<![.\w])eval\(|allow_pickle=True")
    hits = [str(p) for p in sources if banned.search(p.read_text())]
    loads = [str(p) for p in sources if "torch.load(" in p.read_text() and "weights_only=True" not in p.read_text()]
    # Assert
    assert sources and hits == [] and loads == []


@pytest.fixture
def keys(tmp_path):
    """Key pairs of leader, f0 and f1 (f1 is not admitted by the `pair` leader)."""
    return party_keys(str(tmp_path), ("leader", "f0", "f1"))


@pytest.fixture
def pair(keys):
    port = free_port()
    lk = load_leader_keys(keys["leader"][1], {"f0": keys["f0"][0]})
    leader = LeaderChannel(f"tcp://127.0.0.1:{port}", ("f0",), lk, 2.0, "leader", "run-xyz")
    follower = FollowerChannel(
        f"tcp://127.0.0.1:{port}", "f0", load_follower_keys(keys["f0"][1], keys["leader"][0]), 2.0
    )
    yield leader, follower
    follower.close()
    leader.close()


def test_channel_moves_messages_over_tcp_in_both_directions(pair):
    # Prepare
    leader, follower = pair
    x = np.ones((3000, 8), np.float32)
    # Execute
    follower.send("HELLO", {"party": "f0"})
    hello = leader.recv("f0", "HELLO")
    leader.send("f0", "WELCOME", {"run": leader.run})
    welcome = follower.recv(("WELCOME",))
    follower.run = welcome.meta["run"]
    follower.send("EMBEDDING", {"step": 0}, [x])
    emb = leader.recv("f0", "EMBEDDING")
    # Assert
    assert hello.meta == {"party": "f0"} and welcome.meta["run"] == "run-xyz"
    np.testing.assert_array_equal(emb.tensors[0], x)
    assert leader.bytes_received > x.nbytes


def test_typed_messages_travel_over_tcp_and_are_checked_on_arrival(pair):
    """post() sends a typed message, expect() returns it parsed, and refuses a message whose field is wrong."""
    # Prepare
    import dataclasses

    from tests.support.wire_samples import HELLO
    from vfl.wire.messages import Embedding, Hello, Snapshot, Wait, Welcome

    leader, follower = pair
    hello = dataclasses.replace(HELLO, party="f0", protocol=PROTOCOL_VERSION, timeout_s=2.0)
    cut = np.arange(6, dtype=np.float32).reshape(3, 2)
    # Execute
    follower.post(hello)
    got_hello = leader.expect("f0", Hello)
    leader.post("f0", Welcome(run=leader.run, nonce=got_hello.nonce, epochs=1, steps_per_epoch=2))
    follower.run = follower.expect(Wait, Welcome).run
    follower.post(Embedding(cut=cut, eval=("valid", 0, 3)))
    emb = leader.expect("f0", Embedding)
    leader.send("f0", "SNAPSHOT", {"step": "7"})  # a leader with a bug: the step as a string
    # Assert
    assert got_hello == hello and follower.run == "run-xyz" and emb == Embedding(cut=cut, eval=("valid", 0, 3))
    with pytest.raises(WireError, match="SNAPSHOT from leader: field 'step' must be an integer"):
        follower.expect(Snapshot)


def test_replayed_message_is_rejected_by_sequence_number(pair):
    # Prepare: capture a valid frame sequence, then send it twice on a raw DEALER
    leader, follower = pair
    follower.send("HELLO", {})
    leader.recv("f0", "HELLO")
    raw = [bytes(memoryview(f)) for f in encode("BYE", "f0", "run-xyz", 1, {})]
    follower._sock.send_multipart(raw)
    leader.recv("f0", "BYE")
    # Execute
    follower._sock.send_multipart(raw)
    # Assert
    with pytest.raises(WireError, match="sequence number 1, expected 2"):
        leader.recv("f0", "BYE")


def test_message_from_another_run_is_rejected(pair):
    # Prepare
    leader, follower = pair
    follower.send("HELLO", {})
    leader.recv("f0", "HELLO")
    follower.run = "an-old-run"
    # Execute
    follower.send("EMBEDDING", {"step": 0})
    # Assert
    with pytest.raises(WireError, match="belongs to run 'an-old-run'"):
        leader.recv("f0", "EMBEDDING")


def test_receive_deadline_raises_naming_what_was_awaited(pair):
    leader, _ = pair
    with pytest.raises(PeerTimeout, match="timed out after 2 s awaiting GRADIENT from f0"):
        leader.recv("f0", "GRADIENT")


def test_abort_reaches_the_follower_with_its_reason(pair):
    # Prepare
    leader, follower = pair
    follower.send("HELLO", {})
    leader.recv("f0", "HELLO")
    # Execute
    leader.abort_all("disk full")
    # Assert
    with pytest.raises(PeerAbort, match="aborted: disk full"):
        follower.recv(("FORWARD",))


def test_sender_never_mutates_after_send_over_tcp(pair):
    # Prepare: pyzmq copy=False over tcp must not alias the receiver's buffer
    leader, follower = pair
    follower.send("HELLO", {})
    leader.recv("f0", "HELLO")
    leader.send("f0", "WELCOME", {"run": leader.run})
    follower.run = follower.recv(("WELCOME",)).meta["run"]
    x = np.zeros((40000,), np.float32)
    follower.send("EMBEDDING", {}, [x])
    # Execute
    got = leader.recv("f0", "EMBEDDING").tensors[0].copy()
    x[:] = 7.0
    # Assert
    assert not got.any()


def test_key_not_admitted_by_the_leader_is_refused_at_the_handshake(pair, keys):
    # Prepare: f1 holds a valid key pair and the leader's public key, but the leader admits only f0
    leader, _ = pair
    endpoint = leader._sock.getsockopt_string(zmq.LAST_ENDPOINT)
    stranger = FollowerChannel(endpoint, "f0", load_follower_keys(keys["f1"][1], keys["leader"][0]), 2.0)
    try:
        # Execute
        stranger.send("HELLO", {"party": "f0"})
        # Assert: the stranger learns at once; the leader never sees a message
        with pytest.raises(WireError, match="refused this party's key"):
            stranger.recv(("WELCOME",))
        with pytest.raises(PeerTimeout):
            leader.recv("f0", "HELLO")
    finally:
        stranger.close()


def test_free_ports_lie_below_the_ephemeral_range_and_are_bindable():
    # A follower connecting early can be given an ephemeral port as its own source port and
    # connect to itself; ports below the range cannot collide that way.
    import socket

    from vfl.ports import ephemeral_range
    from vfl.ports import free_port as pick

    lo, _ = ephemeral_range()
    for _ in range(20):
        port = pick()
        assert port < lo
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_unsendable_meta_uses_up_no_sequence_number_so_the_abort_still_arrives(pair):
    # Prepare: a NaN loss in a GRADIENT's meta (strict JSON refuses it)
    leader, follower = pair
    follower.send("HELLO", {})
    leader.recv("f0", "HELLO")
    # Execute
    with pytest.raises(ValueError, match="GRADIENT meta cannot be sent"):
        leader.send("f0", "GRADIENT", {"loss": float("nan")})
    leader.abort_all("training loss became nan")
    # Assert: the follower accepts the ABORT (sequence 0) instead of rejecting it as out of order
    with pytest.raises(PeerAbort, match="aborted: training loss became nan"):
        follower.recv(("GRADIENT",))


@pytest.mark.parametrize(
    "meta, needle",
    [
        ({"tag": ["x"], "epoch": 0, "step": 0}, "field 'tag' must be a string"),
        ({"tag": "final", "epoch": "0", "step": 0}, "field 'epoch' must be an integer"),
        ({"tag": "final", "epoch": 0, "step": True}, "field 'step' must be an integer"),
    ],
)
def test_message_fields_of_the_wrong_type_are_one_line_wire_errors(meta, needle):
    # Prepare
    msg = decode([bytes(memoryview(f)) for f in encode("SAVE", "leader", "r", 0, meta)], "leader")
    # Execute / Assert
    with pytest.raises(WireError, match=needle):
        parse(msg)
