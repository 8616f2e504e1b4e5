"""N ranks per party under torch.distributed (gloo): equal to one rank, paired rank to rank, failing together."""

from __future__ import annotations

import json
import time

import numpy as np
import yaml

from tests.support.party_processes import free_port, party_configs, run_split
from tests.support.ranks import rank_env, start_ranks

RANKS = 2
# an odd batch: every global batch is cut 192 / 191 rows, and the last one of the epoch is shorter still
TRAIN = {"epochs": 1, "batch_size": 383, "eval_every_steps": 5}
LEADER_TRAIN = {"early_stopping": {"metric": "auc", "patience": 2}}


def test_two_ranks_per_party_equal_one_rank_with_label_dp(tmp_path, shards_small, procs):
    # Prepare: the same configs (label DP on, early stopping on) for a 1-rank and a 2-rank run; a key store of this
    # test's own, so other tests on the same shards (same worker, same session store) cannot add uses to its ledger
    DP = {"label_dp": {"eps": 2.0, "store_dir": str(tmp_path / "label_dp_store")}}
    one = party_configs(str(tmp_path / "one"), str(shards_small), train=TRAIN, privacy=DP, leader_train=LEADER_TRAIN)
    two = party_configs(str(tmp_path / "two"), str(shards_small), train=TRAIN, privacy=DP, leader_train=LEADER_TRAIN)
    # Execute
    m1 = run_split(procs, one)
    procs.cleanup()
    for name in start_ranks(procs, two, RANKS):
        code, _, err = procs.wait(name, timeout=240)
        assert code == 0, f"{name} failed: {err[-2000:]}"
    m2 = json.loads((tmp_path / "two" / "out" / "metrics.json").read_text())
    # Assert: every global-batch loss equal to float tolerance, the same selection, the same test AUC
    a, b = np.array(m1["step_losses"]), np.array(m2["step_losses"])
    assert a.size == b.size == m1["steps"] > 20
    np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    assert abs(m2["test_auc"] - m1["test_auc"]) < 1e-3
    assert m2["selection"]["best_step"] == m1["selection"]["best_step"]
    assert [h["step"] for h in m2["history"]] == [h["step"] for h in m1["history"]]
    # the same noisy labels on every rank, equal to the 1-rank run's; the ledger holds the release once
    assert m2["ranks"] == RANKS and m1["ranks"] == 1
    assert len(m2["label_digests_per_rank"]) == RANKS and set(m2["label_digests_per_rank"]) == set(
        m1["label_digests_per_rank"]
    )
    assert m2["label_dp"]["release_id"] == m1["label_dp"]["release_id"]
    assert len(m2["samples_per_second_per_rank"]) == RANKS and min(m2["samples_per_second_per_rank"]) > 0
    out = tmp_path / "two" / "out"
    assert (out / "checkpoints" / "leader_final.pt").exists() and (out / "checkpoints" / "follower0_final.pt").exists()
    assert (out / "leader.rank1.log").exists() and "rank 1 of 2" in (out / "leader.rank1.log").read_text()
    ledger = json.loads(open(m2["label_dp"]["ledger"]).read())
    uses = [r["uses"] for r in ledger["releases"] if r["release_id"] == m2["label_dp"]["release_id"]]
    assert uses == [2]  # the 1-rank run, then rank 0 of the 2-rank run: ranks r > 0 never write the ledger
    print(
        f"max relative loss difference {np.max(np.abs(b - a) / np.abs(a)):.2e}; test AUC {m1['test_auc']:.6f} vs "
        f"{m2['test_auc']:.6f}"
    )


def test_killing_one_rank_ends_every_process_of_every_party(tmp_path, shards_small, procs):
    # Prepare: a run long enough to be killed while training; short deadlines
    timeout_s, dist_timeout_s = 10, 20
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=timeout_s, train={"epochs": 50, "batch_size": 256})
    for path in cfgs.values():
        with open(path, "a") as f:
            f.write(f"distributed: {{timeout_s: {dist_timeout_s}}}\n")
        with open(path) as f:  # reconnect_s 0: a rank's lost connection ends the run at once
            doc = yaml.safe_load(f)
        doc["network"]["reconnect_s"] = 0
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)
    names = start_ranks(procs, cfgs, RANKS)
    procs.wait_for_line("leader.0", str(tmp_path / "out" / "leader.log"), "epoch 0 step 10/", timeout=120)
    # Execute: rank 1 of the follower dies without a word
    procs.kill("follower0.1")
    t0 = time.monotonic()
    results = {n: procs.wait(n, timeout=timeout_s + dist_timeout_s + 30) for n in names if n != "follower0.1"}
    elapsed = time.monotonic() - t0
    # Assert: every other process of both parties failed with one error line, within the deadline
    assert elapsed < timeout_s + dist_timeout_s + 10, elapsed
    for name, (code, _, err) in results.items():
        assert code != 0, f"{name} exited 0 after a rank died"
        lines = [x for x in err.splitlines() if x.startswith("error: ")]
        assert len(lines) == 1 and "Traceback" not in err, f"{name}: {err[-1500:]}"
    assert procs.procs["follower0.1"].returncode == -9
    for p in procs.procs.values():
        assert p.poll() is not None
    print(
        f"all ended {elapsed:.1f} s after the kill: "
        + " | ".join(
            f"{n} exit {c}: {[x for x in e.splitlines() if x.startswith('error: ')][0][:160]}"
            for n, (c, _, e) in results.items()
        )
    )


def test_parties_with_different_rank_counts_are_refused_at_the_handshake(tmp_path, shards_small, procs):
    # Prepare: the leader runs 2 ranks, the follower 1
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=10)
    master = free_port()
    for r in range(RANKS):
        procs.start(f"leader.{r}", "leader", cfgs["leader"], env=rank_env(r, RANKS, master))
    procs.start("follower0", "follower", cfgs["follower0"])
    # Execute
    results = {n: procs.wait(n, timeout=60) for n in ("leader.0", "leader.1", "follower0")}
    # Assert: every process fails; the leader's rank 0 names the disagreement and the follower hears it; the
    # leader's rank 1, which no follower rank 1 ever reaches, stops at its deadline (network.timeout_s) awaiting the
    # PSI of its bucket (the rank counts are compared in the PSI hello, before any id is hashed)
    assert all(code != 0 for code, _, _ in results.values())
    assert "follower0 runs 1 rank(s) but the leader runs 2" in results["leader.0"][2]
    assert "runs 1 rank(s) but the leader runs 2" in results["follower0"][2]
    assert "awaiting PSI hello from follower follower0" in results["leader.1"][2]
