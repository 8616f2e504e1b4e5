"""PSI reuse: an unchanged pair of sets reuses its agreed intersection, any change on either side runs the PSI again,
and a tampered, foreign or forged cache or proof is refused."""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest

from privacy.durable_files import temporary_path
from tests.support.party_processes import party_keys
from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.leader_side import leader_psi
from vfl.align.psi.protocol import PSIError
from vfl.align.psi.reuse import PSICache
from vfl.wire.curve_keys import load_public_key, load_secret_key
from vfl.wire.psi_messages import Psi

RNG = np.random.default_rng(33)
UNIVERSE = RNG.choice(2**62, size=6000, replace=False).astype(np.int64)


def _caches(tmp_path, followers=("follower0",)):
    """Each party's cache with each peer, from the test's CurveZMQ keys (created once under tmp_path)."""
    keys = party_keys(str(tmp_path), ("leader", *followers))
    secret = {p: load_secret_key(keys[p][1])[1] for p in keys}
    public = {p: load_public_key(keys[p][0]) for p in keys}
    lead = {f: PSICache(str(tmp_path / "leader_cache"), secret["leader"], "leader", f, public[f]) for f in followers}
    fol = {f: PSICache(str(tmp_path / f"{f}_cache"), secret[f], f, "leader", public["leader"]) for f in followers}
    return lead, fol


def _run(tmp_path, lead_ids, fol_ids: dict, caches=None):
    """One PSI over real CurveZMQ channels; (leader's result, leader's report, {follower: (result, report)})."""
    followers = tuple(fol_ids)
    lead_c, fol_c = caches if caches is not None else _caches(tmp_path, followers)
    leader, follower = _channels(tmp_path, followers)
    chans = {f: follower(f) for f in followers}
    try:
        threads = {f: _in_thread(follower_psi, chans[f], fol_ids[f], None, fol_c[f]) for f in followers}
        common, report = leader_psi(leader, list(followers), lead_ids, None, None, lead_c)
        for t, _ in threads.values():
            t.join(60)
    finally:
        for c in (leader, *chans.values()):
            c.close()
    out = {}
    for f, (_, box) in threads.items():
        if "error" in box:
            raise box["error"]
        out[f] = box["value"]
    return common, report, out


def test_unchanged_sets_reuse_and_any_change_on_either_side_runs_the_psi_again(tmp_path):
    # Prepare: a leader and a follower sharing 2000 ids
    lead, fol = UNIVERSE[:4000], RNG.permutation(UNIVERSE[2000:5000])
    want = np.intersect1d(lead, fol)
    # Execute: a first PSI, the same sets again, then the follower adds one id, then the leader drops one
    first = _run(tmp_path, lead, {"follower0": fol})
    again = _run(tmp_path, lead, {"follower0": fol})
    fol_changed = _run(tmp_path, lead, {"follower0": np.append(fol, UNIVERSE[5500])})
    lead_changed = _run(tmp_path, lead[1:], {"follower0": np.append(fol, UNIVERSE[5500])})
    after = _run(tmp_path, lead[1:], {"follower0": np.append(fol, UNIVERSE[5500])})
    # Assert: every run agrees on the exact intersection; only the unchanged runs reuse, and they send ~nothing
    for common, _, res in (first, again, fol_changed):
        np.testing.assert_array_equal(common, want)
        np.testing.assert_array_equal(res["follower0"][0], want)
    np.testing.assert_array_equal(lead_changed[0], want[want != lead[0]])
    np.testing.assert_array_equal(after[2]["follower0"][0], lead_changed[0])
    reused = [r[1].reused for r in (first, again, fol_changed, lead_changed, after)]
    assert reused == [[], ["follower0"], [], [], ["follower0"]]
    assert again[2]["follower0"][1].reused == ["leader"] and first[2]["follower0"][1].reused == []
    assert again[1].bytes_sent + again[1].bytes_received < 4000 < first[1].bytes_sent
    assert again[1].pairwise == first[1].pairwise == {"follower0": want.size}
    print(
        f"bytes fresh {first[1].bytes_sent + first[1].bytes_received}, reused {again[1].bytes_sent + again[1].bytes_received}"
    )


@pytest.mark.parametrize("side", ["leader", "follower0"])
def test_a_tampered_cache_is_refused_and_the_psi_runs_again(tmp_path, side):
    # Prepare: an agreed PSI; then one byte of one side's cache changed (an id of the intersection, the last 8 bytes
    # before the seal), as an attacker adding a row to the intersection would
    lead, fol = UNIVERSE[:3000], UNIVERSE[1000:4000]
    want = np.intersect1d(lead, fol)
    caches = _caches(tmp_path)
    _run(tmp_path, lead, {"follower0": fol}, caches)
    cache = (caches[0] if side == "leader" else caches[1])["follower0"]
    raw = bytearray(open(cache.path, "rb").read())
    raw[-33] ^= 1
    with open(cache.path, "wb") as f:
        f.write(raw)
    # Execute
    common, report, res = _run(tmp_path, lead, {"follower0": fol}, caches)
    # Assert: the cache is refused (not reused) and the PSI's result is exact; a fresh, intact cache replaces it
    assert report.reused == [] and res["follower0"][1].reused == []
    np.testing.assert_array_equal(common, want)
    np.testing.assert_array_equal(res["follower0"][0], want)
    assert cache.load(lead if side == "leader" else fol) is not None
    raw = bytearray(open(cache.path, "rb").read())
    raw[-33] ^= 1
    with open(cache.path, "wb") as f:
        f.write(raw)
    assert cache.load(lead if side == "leader" else fol) is None and "modified" in cache.refused


def test_a_cache_for_another_key_or_rank_is_refused_and_the_write_is_atomic(tmp_path):
    # Prepare: a follower's cache written for one leader key and rank
    keys = party_keys(str(tmp_path), ("leader", "follower0", "other"))
    secret = load_secret_key(keys["follower0"][1])[1]
    ids, shared = UNIVERSE[:100], UNIVERSE[:40]
    mine = PSICache(str(tmp_path / "c"), secret, "follower0", "leader", load_public_key(keys["leader"][0]))
    mine.store(b"t" * 32, ids, shared)
    # Execute: read back under another peer key, another party's secret, another rank, another set
    other_peer = PSICache(str(tmp_path / "c"), secret, "follower0", "leader", load_public_key(keys["other"][0]))
    new_leader = other_peer.load(ids)  # another leader of the same name: its own file (the key's hint in its name)
    shutil.copyfile(mine.path, other_peer.path)  # and were the file copied to its name, its binding refuses it
    leader_key = load_public_key(keys["leader"][0])
    other_key = PSICache(str(tmp_path / "c"), load_secret_key(keys["other"][1])[1], "follower0", "leader", leader_key)
    other_rank = PSICache(str(tmp_path / "c"), secret, "follower0", "leader", load_public_key(keys["leader"][0]), 0, 2)
    # Assert
    got = mine.load(RNG.permutation(ids))
    assert got is not None and got.ticket == b"t" * 32 and np.array_equal(got.shared, np.sort(shared))
    assert new_leader is None and other_peer.path != mine.path
    assert other_peer.load(ids) is None and "another peer key" in other_peer.refused
    os.unlink(other_peer.path)
    assert other_key.load(ids) is None and "sealed by another key" in other_key.refused
    assert other_rank.load(ids) is None and "no earlier PSI" in other_rank.refused  # its own file name
    assert mine.load(ids[1:]) is None and "ids changed" in mine.refused
    assert oct(os.stat(mine.path).st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(tmp_path / "c")) == [os.path.basename(mine.path)]  # no temporary file left


def test_with_two_followers_one_reuses_while_the_changed_one_runs_and_both_get_the_new_intersection(tmp_path):
    # Prepare: a first PSI with two followers; then follower1 drops 500 of the shared ids
    lead, f0, f1 = UNIVERSE[:4000], UNIVERSE[1000:5000], UNIVERSE[500:3500]
    caches = _caches(tmp_path, ("follower0", "follower1"))
    _run(tmp_path, lead, {"follower0": f0, "follower1": f1}, caches)
    f1_new = f1[500:]
    # Execute
    common, report, res = _run(tmp_path, lead, {"follower0": f0, "follower1": f1_new}, caches)
    # Assert: follower0 reused, follower1 ran; every party holds exactly the new three-way intersection
    want = np.intersect1d(np.intersect1d(lead, f0), f1_new)
    assert (
        report.reused == ["follower0"] and res["follower0"][1].reused == ["leader"] and res["follower1"][1].reused == []
    )
    for got in (common, res["follower0"][0], res["follower1"][0]):
        np.testing.assert_array_equal(got, want)


def test_a_leader_claiming_a_reuse_the_follower_cannot_verify_is_refused(tmp_path):
    # Prepare: a follower with no cache; a leader that answers its hello with a made-up reuse proof
    leader, follower = _channels(tmp_path)
    ch = follower("follower0")
    t, box = _in_thread(follower_psi, ch, UNIVERSE[:100], None, _caches(tmp_path)[1]["follower0"])
    # Execute
    try:
        hello = leader.expect("follower0", Psi, what="PSI hello")
        leader.post("follower0", Psi.hello(hello.suite, 100, RNG.integers(-(2**62), 2**62, (2, 4))))
        t.join(30)
    finally:
        leader.close()
        ch.close()
    # Assert: the follower offered nothing and refuses to take the leader's word for an intersection
    assert hello.payload is None
    assert isinstance(box.get("error"), PSIError) and "does not prove" in str(box["error"])


def test_a_follower_offering_a_forged_ticket_gets_a_full_psi(tmp_path):
    # Prepare: an agreed PSI; then the follower's cache is replaced by one with another ticket (sealed by its own
    # key: a malicious follower can write anything into its own cache)
    lead, fol = UNIVERSE[:2000], UNIVERSE[1000:3000]
    caches = _caches(tmp_path)
    _run(tmp_path, lead, {"follower0": fol}, caches)
    caches[1]["follower0"].store(b"f" * 32, fol, np.intersect1d(lead, fol))
    # Execute
    common, report, res = _run(tmp_path, lead, {"follower0": fol}, caches)
    # Assert: no reuse, the exact intersection
    assert report.reused == [] and res["follower0"][1].reused == []
    np.testing.assert_array_equal(common, np.intersect1d(lead, fol))


def test_a_second_run_on_unchanged_shards_reuses_the_psi_over_real_processes(tmp_path, shards_small, procs):
    # Prepare: this test's own copy of the shards (their psi_cache is per shard directory) and one pair of configs
    import shutil

    from tests.support.party_processes import party_configs, run_split

    shards = tmp_path / "shards"
    shutil.copytree(shards_small, shards, ignore=shutil.ignore_patterns("psi_cache"))  # other tests' caches stay
    cfgs = party_configs(str(tmp_path), str(shards), train={"epochs": 1, "batch_size": 1024})
    # Execute: the same run twice
    m1 = run_split(procs, cfgs)
    procs.cleanup()
    m2 = run_split(procs, cfgs)
    # Assert: the second reuses the first's intersection, exchanges ~nothing for it, and trains the same model
    assert m1["psi"]["reused"] == [] and m2["psi"]["reused"] == ["follower0"]
    assert m2["psi"]["intersection"] == m1["psi"]["intersection"] > 0
    assert m2["psi"]["bytes_sent"] + m2["psi"]["bytes_received"] < 1000 < m1["psi"]["bytes_sent"]
    assert m2["step_losses"] == m1["step_losses"] and m2["test_auc"] == m1["test_auc"]
    (name,) = os.listdir(shards / "follower0" / "psi_cache")
    assert re.fullmatch(r"follower0--leader-[0-9a-f]{12}\.rank0of1\.psi", name), name
    print(f"PSI {m1['psi']['seconds']} s fresh, {m2['psi']['seconds']} s reused ({m1['psi']['intersection']} ids)")


def test_a_cache_that_cannot_be_written_is_said_in_the_log_and_only_costs_the_next_reuse(tmp_path):
    # Prepare: a cache directory below a regular file (as a read-only shard would refuse it, even to root)
    (tmp_path / "file").write_text("")
    cache = PSICache(str(tmp_path / "file" / "psi_cache"), b"k" * 40, "follower0", "leader", b"p" * 40)
    lines = []
    # Execute
    cache.store(b"t" * 32, UNIVERSE[:10], UNIVERSE[:5], lines.append)
    # Assert
    assert len(lines) == 1 and "cannot be written" in lines[0] and cache.load(UNIVERSE[:10]) is None


def test_a_write_error_after_agreement_is_one_log_line_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    # Prepare: a full disk when the cache file is synced (review 33's r7: the write raised out of the PSI)
    cache = PSICache(str(tmp_path / "psi_cache"), b"k" * 40, "follower0", "leader", b"p" * 40)
    lines = []

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    # Execute
    cache.store(b"t" * 32, UNIVERSE[:10], UNIVERSE[:5], lines.append)
    # Assert: one line naming the file and the error, nothing left in the directory, nothing to reuse
    assert len(lines) == 1 and "No space left on device" in lines[0] and cache.path in lines[0]
    assert os.listdir(tmp_path / "psi_cache") == [] and cache.load(UNIVERSE[:10]) is None


def test_a_store_keeps_the_cache_directory_private_and_removes_stale_temporary_files(tmp_path):
    # Prepare: a cache directory made earlier with mode 0755, a temporary file a killed run left 2 h ago and one
    # another rank is writing now
    directory = tmp_path / "psi_cache"
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    cache = PSICache(str(directory), b"k" * 40, "follower0", "leader", b"p" * 40)
    stale, live = temporary_path(cache.path), temporary_path(cache.path)
    for path in (stale, live):
        with open(path, "wb") as f:
            f.write(b"x")
    os.utime(stale, (0, os.path.getmtime(directory) - 7200))
    long_name = PSICache(str(directory), b"k" * 40, "f" * 5000, "leader", b"p" * 40)
    # Execute
    cache.store(b"t" * 32, UNIVERSE[:10], UNIVERSE[:5])
    # Assert: mode 0700, the stale file gone, the live one and the cache kept; a too-long binding named as such
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    assert sorted(os.listdir(directory)) == sorted([os.path.basename(live), os.path.basename(cache.path)])
    with pytest.raises(ValueError, match="binding"):
        long_name.store(b"t" * 32, UNIVERSE[:10], UNIVERSE[:5])


@pytest.mark.parametrize(
    "meta, tensors, needle",
    [
        ({"op": "hello", "suite": "s", "n": 5}, [np.zeros((3, 4), "<i8")], "expected int64 (2, 4)"),
        ({"op": "hello", "suite": "s", "n": 5}, [np.zeros((2, 4), "<i4")], "expected int64 (2, 4)"),
        ({"op": "ticket"}, [], "expected 1 tensor, got 0"),
        ({"op": "ticket"}, [np.zeros((2, 4), "<i8")], "expected int64 (1, 4)"),
        ({"op": "ticket", "size": 3}, [np.zeros((1, 4), "<i8")], "does not belong to a PSI ticket"),
        ({"op": "hello", "suite": "s", "n": 5, "rank": 1}, [], "come together"),
        ({"op": "hello", "suite": "s", "n": 5, "rank": 2, "ranks": 2}, [], "rank below ranks"),
        ({"op": "mask", "start": 0, "stop": 1, "rank": 0, "ranks": 2}, [], "'rank' does not belong to a PSI mask"),
    ],
)
def test_malformed_reuse_ticket_and_rank_fields_are_refused_on_parse(meta, tensors, needle):
    # Prepare: a PSI message as the frames decode it, from an authenticated peer
    from vfl.wire.frames import Message, WireError
    from vfl.wire.messages import parse

    msg = Message("PSI", "follower0", "", 0, meta, tensors)
    # Execute / Assert: one WireError naming what is wrong, before any handler sees it
    with pytest.raises(WireError, match=re.escape(needle)):
        parse(msg)
