"""A party that re-prepares its file with --force keeps its agreed intersection when its ids did not change, so the
next run reuses the PSI; when its ids changed the old agreement is left behind and the PSI runs in full."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from tests.support.party_processes import party_keys
from tests.support.psi_channels import _channels, _in_thread
from vfl.align.psi.follower_side import follower_psi
from vfl.align.psi.leader_side import leader_psi
from vfl.align.psi.reuse import CACHE_DIR, PSICache
from vfl.data.parties import load_parties
from vfl.data.prepare import PrepareOptions, prepare_party
from vfl.data.raw_split import split_raw
from vfl.data.shard_writer import PSI_CACHE_DIR
from vfl.data.shards import PartyShard
from vfl.data.synth.criteo import write_synthetic
from vfl.wire.curve_keys import load_public_key, load_secret_key

PARTIES = {p.name: p for p in load_parties(None)}  # leader (labels) and follower0, as the front door splits them


def _prepare(raw: str, shards, name: str) -> str:
    """`python -m vfl.data prepare --party NAME --input RAW --out SHARDS --force`, as the front door runs it."""
    out = str(shards / name)
    prepare_party(raw, out, PARTIES[name], PrepareOptions(force=True, hash_buckets=1000))
    return out


def _psi(tmp_path, shards: dict[str, str]):
    """One PSI between the two shards over CurveZMQ, each side's cache under <shard>/psi_cache as a run keeps it;
    (the intersection, the leader's report, the follower's report)."""
    keys = party_keys(str(tmp_path), ("leader", "follower0"))
    secret = {p: load_secret_key(keys[p][1])[1] for p in keys}
    public = {p: load_public_key(keys[p][0]) for p in keys}
    lead_cache = PSICache(os.path.join(shards["leader"], CACHE_DIR), secret["leader"], "leader", "follower0",
                          public["follower0"])  # fmt: skip
    fol_cache = PSICache(os.path.join(shards["follower0"], CACHE_DIR), secret["follower0"], "follower0", "leader",
                         public["leader"])  # fmt: skip
    ids = {p: PartyShard(path).all_ids() for p, path in shards.items()}
    leader, follower = _channels(tmp_path)
    channel = follower("follower0")
    try:
        thread, box = _in_thread(follower_psi, channel, ids["follower0"], None, fol_cache)
        common, report = leader_psi(leader, ["follower0"], ids["leader"], None, None, {"follower0": lead_cache})
        thread.join(60)
    finally:
        leader.close()
        channel.close()
    if "error" in box:
        raise box["error"]
    return common, report, box["value"][1]


def test_a_forced_reprepare_of_the_same_ids_keeps_the_psi_reuse_and_changed_ids_do_not(tmp_path):
    # Prepare: the front door's first run: synthetic rows split into each party's file, each party prepares its own
    # (the follower lacks a fifth of the ids), and a first PSI that both sides cache
    write_synthetic(str(tmp_path / "all.tsv"), 600, seed=0, label_seed=1)
    parties = [PARTIES["leader"], replace(PARTIES["follower0"], drop_fraction=0.2)]
    raw = split_raw(str(tmp_path / "all.tsv"), str(tmp_path / "raw"), parties, 0, False, None)["files"]
    shards = {p: _prepare(raw[p], tmp_path / "shards", p) for p in ("leader", "follower0")}
    first = _psi(tmp_path, shards)
    # Execute: the second run re-prepares both files unchanged (--force) and runs the PSI; then the follower's file
    # loses one row, is re-prepared, and the PSI runs again
    shards = {p: _prepare(raw[p], tmp_path / "shards", p) for p in ("leader", "follower0")}
    again = _psi(tmp_path, shards)
    with open(raw["follower0"]) as f:
        lines = f.read().splitlines(keepends=True)
    with open(raw["follower0"], "w") as f:
        f.writelines(lines[:-1])
    kept_before = os.path.isdir(os.path.join(shards["follower0"], PSI_CACHE_DIR))
    shards["follower0"] = _prepare(raw["follower0"], tmp_path / "shards", "follower0")
    kept_after = os.path.isdir(os.path.join(shards["follower0"], PSI_CACHE_DIR))
    changed = _psi(tmp_path, shards)
    # Assert: the re-prepared unchanged shards reuse on both sides with the same intersection; the changed shard's
    # old cache is not kept and the PSI runs in full, agreeing on one id fewer
    assert first[1].reused == [] and again[1].reused == ["follower0"] and again[2].reused == ["leader"]
    np.testing.assert_array_equal(again[0], first[0])
    assert kept_before and not kept_after
    assert changed[1].reused == [] and changed[2].reused == []
    assert changed[0].size == first[0].size - 1 and np.isin(changed[0], first[0]).all()
