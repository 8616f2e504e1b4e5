"""Private set intersection of sample ids: exact over real CurveZMQ channels, and refusing every malformed PSI message."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi.ecdh import (
    SUITE,
    PointError,
    as_wire,
    from_wire,
    hash_ids,
    mask_ids,
    new_exponent,
    point_set,
    raise_to,
)
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.leader_side import leader_psi
from vfl.align.psi.protocol import CHUNK_POINTS, MAX_IDS, PSIError


def test_hashing_and_exponents_commute_and_match_only_equal_ids():
    # Prepare
    a, b = new_exponent(), new_exponent()
    x, y = np.arange(0, 300), np.arange(200, 500)
    # Execute
    x_ab = raise_to(raise_to(hash_ids(x), a), b)
    y_ba = raise_to(mask_ids(y, b), a)
    # Assert: exactly the 100 shared ids match; the wire form round-trips bit for bit
    theirs = point_set(x_ab)
    assert sum(1 for k in point_set(y_ba) if k in theirs) == 100
    np.testing.assert_array_equal(from_wire(as_wire(x_ab)), x_ab)
    assert len(set(point_set(hash_ids(x)))) == 300


@pytest.mark.parametrize(
    "value", [bytes(32), bytes([1]) + bytes(31), b"\xff" * 32, (2**255 - 19).to_bytes(32, "little")]
)
def test_small_order_and_non_canonical_points_are_refused(value):
    # Execute / Assert: zero, the order-1/2 points and encodings >= p never reach an exponentiation result
    with pytest.raises(PointError):
        raise_to(np.frombuffer(value, np.uint8).reshape(1, 32), new_exponent())


def test_two_followers_with_overlapping_sets_agree_on_exactly_the_common_ids(tmp_path):
    # Prepare: three different sets (ids as the prepared shards hold them, in any order), two chunks on the leader
    rng = np.random.default_rng(5)
    universe = rng.choice(2**62, size=CHUNK_POINTS + 3000, replace=False).astype(np.int64)
    lead = rng.permutation(universe[: CHUNK_POINTS + 1500])
    f0 = rng.permutation(universe[1000 : CHUNK_POINTS + 2500])
    f1 = rng.permutation(np.concatenate([universe[::3], [-5, 7]]))
    want = np.intersect1d(np.intersect1d(lead, f0), f1)
    leader, follower = _channels(tmp_path, ("follower0", "follower1"), timeout=60.0)  # two followers share one GIL
    chans = {n: follower(n) for n in ("follower0", "follower1")}
    # Execute
    try:
        threads = [_in_thread(follower_psi, chans["follower0"], f0), _in_thread(follower_psi, chans["follower1"], f1)]
        common, report = leader_psi(leader, ["follower0", "follower1"], lead)
        for t, _ in threads:
            t.join(60)
    finally:
        for c in chans.values():
            c.close()
        leader.close()
    # Assert: every party ends with the same ids, exactly the intersection; sizes reported as learned
    np.testing.assert_array_equal(common, want)
    for _thread, box in threads:
        assert "error" not in box, box.get("error")
        ids, rep = box["value"]
        np.testing.assert_array_equal(ids, want)
        assert rep.peer_ids == {"leader": lead.size} and rep.intersection == want.size
    assert report.peer_ids == {"follower0": f0.size, "follower1": f1.size}
    assert report.pairwise["follower0"] == np.intersect1d(lead, f0).size and report.intersection == want.size
    assert report.bytes_sent > 32 * (lead.size * 2 + f0.size + f1.size)


def _bad_follower(ch, step: str):
    """A follower that follows the protocol until `step`, then sends something wrong."""
    ids = np.arange(100, dtype=np.int64)
    if step == "suite":
        ch.send("PSI", {"op": "hello", "suite": "rsa-psi", "n": 100})
        return
    if step == "too_many":
        ch.send("PSI", {"op": "hello", "suite": SUITE, "n": MAX_IDS + 1})
        return
    if step == "oversized":  # within the protocol's bound, above what this leader accepts for its 100 ids
        ch.send("PSI", {"op": "hello", "suite": SUITE, "n": (1 << 20) + 1})
        return
    ch.send("PSI", {"op": "hello", "suite": SUITE, "n": 100})
    ch.recv(("PSI",))
    req = ch.recv(("PSI",))
    good = as_wire(mask_ids(ids, new_exponent()))
    if step == "shape":
        ch.send("PSI", {"op": "mask", "start": 0, "stop": 100}, [good[:50]])
    elif step == "range":
        ch.send("PSI", {"op": "mask", "start": 0, "stop": 99}, [good[:99]])
    elif step == "dtype":
        ch.send("PSI", {"op": "mask", "start": 0, "stop": 100}, [good.astype(np.float64)])
    elif step == "point":
        zeros = np.zeros((100, 4), np.int64)
        ch.send("PSI", {"op": "mask", "start": 0, "stop": 100}, [zeros])
    elif step == "repeated":  # one id's point for every row: would match one leader id to many rows
        ch.send("PSI", {"op": "mask", "start": 0, "stop": 100}, [np.repeat(good[:1], 100, axis=0)])
        ch.recv(("PSI",))
        ch.send(
            "PSI",
            {"op": "leader", "start": 0, "stop": 100},
            [as_wire(mask_ids(np.arange(50, 150, dtype=np.int64), new_exponent()))],
        )
    elif step == "op":
        ch.send("PSI", {"op": "leader", "start": req.meta["start"], "stop": req.meta["stop"]}, [good])
    ch.recv(("PSI",), "the abort")  # the leader's ABORT (or nothing) ends the thread


@pytest.mark.parametrize(
    "step, needle",
    [
        ("suite", "runs PSI suite 'rsa-psi'"),
        ("too_many", f"field 'n' must be an integer in [1, {MAX_IDS}]"),
        ("oversized", "declares 1048577 ids, above this leader's limit of 1048576"),
        ("repeated", "PSI mask values of follower0 holds repeated points"),
        ("shape", "expected int64 (100, 4) points"),
        ("range", "is not the requested 0..100"),
        ("dtype", "expected int64 (100, 4) points, got float64"),
        ("point", "is the identity element"),
        ("op", "expected PSI mask from follower0, got PSI 'leader'"),
    ],
)
def test_leader_refuses_each_malformed_psi_message_naming_it(tmp_path, step, needle):
    # Prepare
    from vfl.wire import WireError

    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower("follower0")
    # Execute
    t, _ = _in_thread(_bad_follower, ch, step)
    try:
        with pytest.raises(
            WireError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")
        ):
            leader_psi(leader, ["follower0"], np.arange(50, 150, dtype=np.int64))
    finally:
        leader.abort_all("test over")
        t.join(10)
        ch.close()
        leader.close()


def test_follower_refuses_a_leader_that_names_an_id_outside_the_intersection(tmp_path):
    # Prepare: a leader that plays the protocol honestly, then claims one extra shared position
    leader, follower = _channels(tmp_path)
    ch = follower("follower0")
    mine = np.arange(0, 40, dtype=np.int64)
    t, box = _in_thread(follower_psi, ch, mine)
    try:
        hello = leader.recv("follower0", "PSI")
        n = hello.meta["n"]
        leader.send("follower0", "PSI", {"op": "hello", "suite": SUITE, "n": 10})
        a = new_exponent()
        leader.send("follower0", "PSI", {"op": "mask", "start": 0, "stop": n})
        yb = from_wire(leader.recv("follower0", "PSI").tensors[0])
        leader.send("follower0", "PSI", {"op": "double", "start": 0, "stop": n}, [as_wire(raise_to(yb, a))])
        leader.send(
            "follower0", "PSI", {"op": "leader", "start": 0, "stop": 10}, [as_wire(mask_ids(np.arange(1000, 1010), a))]
        )
        leader.recv("follower0", "PSI")
        leader.send("follower0", "PSI", {"op": "ticket"}, [np.zeros((1, 4), np.int64)])
        # Execute: no id is shared, yet the leader names position 3
        leader.send("follower0", "PSI", {"op": "result", "start": 0, "stop": 1, "total": 1}, [np.array([3], np.int64)])
        leader.send("follower0", "PSI", {"op": "done", "size": 1})
        t.join(30)
    finally:
        ch.close()
        leader.close()
    # Assert
    assert isinstance(box.get("error"), PSIError) and "not in the intersection this party computed" in str(box["error"])


def test_thousands_of_random_psi_metas_raise_only_psi_or_wire_errors(tmp_path):
    # Prepare: the follower side's message handling, fed random op/start/stop/total values
    import random

    from vfl.align.psi.protocol import checked_range
    from vfl.wire.frames import Message, WireError
    from vfl.wire.messages import parse

    rng = random.Random(11)
    values = [None, -1, 0, 1, 99, 100, 101, CHUNK_POINTS, CHUNK_POINTS + 1, 2**63, 1.5, True, "1", [1], {}]
    # Execute / Assert: never anything but a clear PSIError/WireError, never an out-of-range slice accepted
    for _ in range(3000):
        meta = {"op": "mask", "start": rng.choice(values), "stop": rng.choice(values)}
        msg = Message("PSI", "leader", "", 0, meta)
        try:
            start, stop = checked_range(parse(msg), "the leader", 100)
        except WireError:
            continue
        assert isinstance(start, int) and 0 <= start < stop <= 100 and stop - start <= CHUNK_POINTS
