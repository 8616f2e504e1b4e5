"""PSI suite v2 (ristretto255, vfl/align/psi/ecdh.py): RFC 9496 known answers, refused encodings, two parties
intersecting exactly over CurveZMQ, and a peer of another suite refused in one line."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest

from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi.ecdh import (
    SUITE,
    PointError,
    as_wire,
    from_digests,
    hash_ids,
    mask_ids,
    new_exponent,
    point_set,
    raise_to,
)
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.leader_side import leader_psi
from vfl.align.psi.protocol import PSIError

# RFC 9496 Appendix A.3: element derivation (crypto_core_ristretto255_from_hash) of SHA-512 of each label
DERIVED = [
    (
        "Ristretto is traditionally a short shot of espresso coffee",
        "3066f82a1a747d45120d1740f14358531a8f04bbffe6a819f86dfe50f44a0a46",
    ),
    (
        "made with the normal amount of ground coffee but extracted with",
        "f26e5b6f7d362d2d2a94c5d0e7602cb4773c95a2e5c31a64f133189fa76ed61b",
    ),
    (
        "about half the amount of water in the same amount of time",
        "006ccd2a9e6867e6a2c5cea83d3302cc9de128dd2a9a57dd8ee7b9d7ffe02826",
    ),
    ("by using a finer grind.", "f8f0c87cf237953c5890aec3998169005dae3eca1fbb04548c635953c817f92a"),
    (
        "This produces a concentrated shot of coffee per volume.",
        "ae81e7dedf20a497e10c304a765c1767a42d6e06029758d2d7e8ef7cc4c41179",
    ),
    (
        "Just pulling a normal shot short will produce a weaker shot",
        "e2705652ff9f5e44d3e841bf1c251cf7dddb77d140870d1ab2ed64f1a9ce8628",
    ),
    ("and is not a Ristretto as some believe.", "80bd07262511cdde4863f8a7434cef696750681cb9510eea557088f76d9e5065"),
]
# RFC 9496 Appendix A.1: the generator B and 2B
B = "e2f2ae0a6abc4e71a884a961c500515f58e30b6aa582dd8db6a65945e08d2d76"
B2 = "6a493210f7499cd17fecb510ae0cea23a110e8d5b901f8acadd3095c73a3b919"
# RFC 9496 Appendix A.2: non-canonical field encodings, negative s, s = -1 (y = 0)
BAD = [
    "00ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "f3ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "01ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
]


def _row(hex_: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hex_), np.uint8).reshape(1, 32)


def test_hash_to_group_and_scalar_multiplication_match_rfc_9496_vectors():
    # Execute
    got = from_digests(b"".join(hashlib.sha512(label.encode()).digest() for label, _ in DERIVED))
    doubled = raise_to(_row(B), (2).to_bytes(32, "little"))
    # Assert
    assert [bytes(r).hex() for r in got] == [want for _, want in DERIVED]
    assert bytes(doubled[0]).hex() == B2


@pytest.mark.parametrize("value", BAD)
def test_invalid_encodings_are_refused(value):
    with pytest.raises(PointError, match="not the canonical encoding of a ristretto255 element"):
        raise_to(_row(value), new_exponent())


def test_identity_is_refused_and_exponents_are_nonzero_scalars():
    with pytest.raises(PointError, match="identity"):
        raise_to(np.zeros((1, 32), np.uint8), new_exponent())
    for _ in range(20):
        e = new_exponent()
        assert len(e) == 32 and any(e) and e[31] <= 0x10  # reduced mod L, L < 2**253


def test_batched_and_parallel_paths_agree_with_one_by_one():
    # Prepare: above PARALLEL_MIN, so the workers run
    ids = np.arange(-3000, 3000, dtype=np.int64) * 7919
    e = new_exponent()
    # Execute
    many = mask_ids(ids, e)
    one = np.concatenate([raise_to(hash_ids(ids[i : i + 1]), e) for i in range(ids.size)])
    # Assert
    np.testing.assert_array_equal(many, one)
    assert len(point_set(many)) == ids.size


def _psi(tmp_path, lead: np.ndarray, fol: np.ndarray):
    leader, follower = _channels(tmp_path)
    ch = follower("follower0")
    try:
        t, box = _in_thread(follower_psi, ch, fol)
        common, _ = leader_psi(leader, ["follower0"], lead)
        t.join(60)
    finally:
        ch.close()
        leader.close()
    assert "error" not in box, box.get("error")
    return common, box["value"][0]


def test_two_parties_intersect_exactly_with_ids_one_bit_apart(tmp_path):
    # Prepare: the follower holds half the leader's ids and, for the other half, each id with one bit flipped
    rng = np.random.default_rng(9)
    lead = rng.choice(2**62, size=3000, replace=False).astype(np.int64)
    bits = rng.integers(0, 63, lead.size)
    flipped = lead ^ (np.int64(1) << bits.astype(np.int64))
    fol = np.concatenate([lead[:1500], flipped[1500:]])
    fol = rng.permutation(np.setdiff1d(fol, lead[1500:]))  # a flip that lands on a leader id is not "one bit apart"
    want = np.intersect1d(lead, fol)
    # Execute
    common, theirs = _psi(tmp_path, lead, fol)
    # Assert
    np.testing.assert_array_equal(common, want)
    np.testing.assert_array_equal(theirs, want)
    assert want.size == 1500


def test_disjoint_sets_give_an_empty_intersection(tmp_path):
    common, theirs = _psi(tmp_path, np.arange(0, 500, dtype=np.int64), np.arange(500, 900, dtype=np.int64))
    assert common.size == 0 and theirs.size == 0


@pytest.mark.parametrize("ids, needle", [(np.array([], np.int64), "holds 0 ids"), (np.array([4, 5, 4]), "not unique")])
def test_empty_and_duplicate_sets_are_refused_before_any_message(tmp_path, ids, needle):
    leader, follower = _channels(tmp_path)
    ch = follower("follower0")
    try:
        with pytest.raises(PSIError, match=needle):
            follower_psi(ch, ids)
        with pytest.raises(PSIError, match=needle):
            leader_psi(leader, ["follower0"], ids)
    finally:
        ch.close()
        leader.close()


V1 = "ecdh-psi/x25519-elligator2x2-sha512/v1"


def test_leader_refuses_a_follower_of_another_suite_in_one_line(tmp_path):
    from vfl.wire import WireError

    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower("follower0")
    ch.send("PSI", {"op": "hello", "suite": V1, "n": 100})
    try:
        with pytest.raises(WireError) as err:
            leader_psi(leader, ["follower0"], np.arange(100, dtype=np.int64))
    finally:
        leader.abort_all("test over")
        ch.close()
        leader.close()
    assert str(err.value) == f"follower0 runs PSI suite {V1!r}, this party runs {SUITE!r}"


def test_follower_refuses_a_leader_of_another_suite_in_one_line(tmp_path):
    leader, follower = _channels(tmp_path, timeout=5.0)
    ch = follower("follower0")
    t, box = _in_thread(follower_psi, ch, np.arange(100, dtype=np.int64))
    try:
        assert leader.recv("follower0", "PSI").meta["suite"] == SUITE
        leader.send("follower0", "PSI", {"op": "hello", "suite": V1, "n": 100})
        t.join(30)
    finally:
        ch.close()
        leader.close()
    assert isinstance(box.get("error"), PSIError)
    assert str(box["error"]) == f"the leader runs PSI suite {V1!r}, this party runs {SUITE!r}"


def test_wire_form_is_the_encoding():
    pts = hash_ids(np.arange(5))
    assert as_wire(pts).dtype == np.dtype("<i8") and as_wire(pts).tobytes() == pts.tobytes()


def _hash_in_child(queue) -> None:
    from vfl.align.psi.ecdh import hash_ids

    queue.put(hash_ids(np.arange(5000, dtype=np.int64)).shape)


def test_a_process_forked_after_psi_starts_its_own_workers_instead_of_hanging_on_its_parents():
    # Prepare: this process's worker pool exists (a batch large enough to use it)
    import multiprocessing as mp

    from vfl.align.psi.ecdh import hash_ids

    hash_ids(np.arange(5000, dtype=np.int64))
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    # Execute: a forked child hashes a large batch (its parent's pool hung it for good; hostile review)
    child = ctx.Process(target=_hash_in_child, args=(queue,))
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    # Assert
    assert not alive and child.exitcode == 0 and queue.get(timeout=5) == (5000, 32)


_FORK_THEN_HASH = """
import os, sys
import numpy as np
from vfl.align.psi import ecdh
if ecdh._workers() is None:
    print("one core"); sys.exit(0)
ecdh.hash_ids(np.arange(5000, dtype=np.int64))
pid = os.fork()
if pid == 0:
    sys.exit(0)  # exit handlers run: multiprocessing's own, and this pool's
os.waitpid(pid, 0)
print(ecdh.hash_ids(np.arange(5000, dtype=np.int64)).shape)
"""


def test_a_forked_child_that_exits_leaves_its_parents_workers_running_and_the_parent_exits():
    # Prepare: a process with its worker pool forks a bare child (os.fork, not multiprocessing) that exits normally
    # Execute: the parent hashes another large batch, then exits (its pool stopped by its own exit handler)
    run = subprocess.run([sys.executable, "-c", _FORK_THEN_HASH], capture_output=True, text=True, timeout=60)
    # Assert: the child did not terminate its parent's workers (they held a lock: the batch and the exit hung)
    if run.stdout.strip() == "one core":
        pytest.skip("one core: no worker pool")
    assert run.returncode == 0 and run.stdout.strip() == "(5000, 32)", run.stdout + run.stderr


_FORK_WHILE_STARTING = """
import os, signal, sys, threading
import multiprocessing as mp, multiprocessing.pool
from vfl.align.psi import ecdh
if ecdh._cores() < 2:
    print("one core"); sys.exit(0)
ecdh.sodium()
started, forked, start = threading.Event(), threading.Event(), mp.pool.Pool._repopulate_pool_static
def slow_start(*a, **k):  # the window between the workers' start and the pool's assignment, held open until the fork
    workers = start(*a, **k); started.set(); forked.wait(10); return workers
mp.pool.Pool._repopulate_pool_static = staticmethod(slow_start)
starting = threading.Thread(target=ecdh._workers); starting.start()
started.wait(10)
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a child that hangs on its parent's lock is killed, and reported
    mp.pool.Pool._repopulate_pool_static = staticmethod(start)
    if sys.argv[1] == "psi":
        ecdh._workers().map(abs, [-1])
    sys.exit(0)
forked.set()
_, status = os.waitpid(pid, 0)
starting.join(10)
batch = ecdh._pool.map_async(abs, range(-4, 0))
batch.wait(10)
print("child", "hung" if os.WIFSIGNALED(status) else os.WEXITSTATUS(status), "parent", batch.ready())
"""


@pytest.mark.parametrize("child", ["exits", "psi"])
def test_a_child_forked_while_the_pool_starts_neither_stops_its_parents_workers_nor_waits_on_its_lock(child):
    # Prepare / Execute: a thread starts the worker pool; a bare child forks while the workers run and the pool is not
    # yet assigned, then exits at once or starts its own pool
    run = subprocess.run(
        [sys.executable, "-c", _FORK_WHILE_STARTING, child], capture_output=True, text=True, timeout=60
    )
    # Assert: the child ended on its own, and the parent's next batch was answered
    if run.stdout.strip() == "one core":
        pytest.skip("one core: no worker pool")
    assert run.returncode == 0 and run.stdout.strip() == "child 0 parent True", run.stdout + run.stderr[-2000:]


def test_an_exponent_that_is_not_32_bytes_and_ids_that_are_not_int64_are_refused():
    # Prepare
    from vfl.align.psi.ecdh import hash_ids, raise_to
    from vfl.align.psi.protocol import PSIError, check_ids

    points = hash_ids(np.arange(3, dtype=np.int64))
    # Execute / Assert: libsodium would read 32 bytes from a 1-byte buffer; a uint64 id 2**64-1 would become -1
    with pytest.raises(TypeError, match="a PSI exponent is 32 bytes"):
        raise_to(points, b"\x01")
    with pytest.raises(PSIError, match="must be int64"):
        check_ids(np.array([2**64 - 1], dtype=np.uint64), "follower0")
