"""Embedding DP over two real processes on 127.0.0.1: the follower's YAML alone turns it on, its own metrics carry
(eps, delta), and two training sends of a row's cut (as the leader receives them, recorded by the follower's
debug.record_cuts) are equal only where its value did not move (a planted reuse of noise fails: the check's power)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

from tests.support.party_processes import party_configs, run_split


def _follower_doc(path: str, **extra) -> None:
    with open(path) as fh:
        doc = yaml.safe_load(fh)
    for section, keys in extra.items():
        doc[section] = {**doc.get(section, {}), **keys}
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh)


def _repeated_sends(record: dict) -> tuple[int, int]:
    """(pairs of sends of one row, of those: pairs with equal cuts) over every (space, row) sent more than once."""
    pairs = equal = 0
    keys = np.char.add(record["space"].astype(str), np.char.mod("%d", record["row"]))
    order = np.argsort(keys, kind="stable")
    keys, cuts = keys[order], record["cut"][order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    for a, b in zip(starts, np.r_[starts[1:], len(keys)]):
        for i in range(a, b):
            for j in range(i + 1, b):
                pairs += 1
                equal += bool(np.array_equal(cuts[i], cuts[j]))
    return pairs, equal


# staleness-1 is slow: the synchronous run is embedding DP's real run; staleness's own real runs are in test_staleness
@pytest.mark.parametrize(
    "schedule", [{}, pytest.param({"staleness": 1}, marks=pytest.mark.slow)], ids=["synchronous", "staleness-1"]
)
def test_embedding_dp_trains_over_processes_with_fresh_noise_per_send_and_its_eps_in_the_followers_metrics(
    tmp_path, shards_small, procs, schedule
):
    # Prepare: 2 epochs; the follower (alone) sets embedding DP and records what it sends
    cfgs = party_configs(str(tmp_path), str(shards_small), train={"epochs": 2, **schedule})
    record = tmp_path / "cuts.npz"
    _follower_doc(
        cfgs["follower0"],
        privacy={"embedding_dp": {"eps": 4.0, "delta": 1e-5, "clip": 1.0}},
        debug={"record_cuts": str(record)},
    )
    # Execute
    metrics = run_split(procs, cfgs)
    # Assert: the run trained and scored; the follower's own metrics carry its (eps, delta)
    assert np.isfinite(metrics["test_auc"])
    rep = json.loads(open(os.path.join(tmp_path, "out", "follower0_embedding_dp.json")).read())
    assert rep["delta"] == 1e-5 and 0 < rep["eps"] <= 4.0 and rep["releases_per_row"] in (2, 3)  # the schedule's
    assert 1 <= rep["most_sends_of_a_row"] <= rep["releases_per_row"]
    assert "embedding_dp" not in json.dumps(metrics)  # the leader's metrics do not carry the follower's budget
    with np.load(record) as z:
        sent = {k: z[k] for k in ("space", "row", "cut")}
    train = {k: v[sent["space"] == "train"] for k, v in sent.items()}
    pairs, equal = _repeated_sends(train)
    # every training row twice, under other weights: another value, so independent noise; the same bytes only where
    # a row's value did not move (a saturated cut), which keyed noise re-sends as one release
    assert pairs > 1000 and equal <= pairs // 100
    # an evaluation that sees weights it saw before (the re-test of a restored step) re-sends the same bytes: keyed
    # noise of the same value, so averaging them gains nothing
    assert _repeated_sends(sent)[1] <= int(np.sum(sent["space"] == "test"))
    assert set(np.unique(sent["space"])) == {"train", "valid", "test"}
    # power: the same check fails a planted reuse of noise (every train row's second send replaced by its first)
    planted = {k: v.copy() for k, v in train.items()}
    _, first_of = np.unique(planted["row"], return_index=True)
    planted["cut"] = planted["cut"][first_of[np.searchsorted(planted["row"][first_of], planted["row"])]]
    pairs, equal = _repeated_sends(planted)
    assert equal > pairs // 100


def test_embedding_dp_calibrates_for_the_leaders_evaluations_finer_than_an_epoch(tmp_path, shards_small, procs):
    """The flights example's schedule (an evaluation every few steps, early stopping with the interval rule) ran into
    'the leader asked for send 2 of a valid row's cut' at the second evaluation; the follower now calibrates for every
    evaluation, and the re-test of a restored step, at WELCOME."""
    import yaml as _yaml

    # Prepare: the flights leader's cadence, scaled to this shard (2 epochs, an evaluation every 3 steps)
    flights = _yaml.safe_load(open("examples/flights/airline.yaml"))["train"]
    cfgs = party_configs(
        str(tmp_path), str(shards_small), train={"epochs": 2, "eval_every_steps": 3},
        leader_train={"early_stopping": flights["early_stopping"]},
    )  # fmt: skip
    _follower_doc(cfgs["follower0"], privacy={"embedding_dp": {"eps": 4.0, "delta": 1e-5, "clip": 1.0}})
    # Execute
    metrics = run_split(procs, cfgs)
    # Assert: trained to the end; the calibration covers every evaluation (more than the epochs) plus the re-test
    assert np.isfinite(metrics["test_auc"])
    rep = json.loads(open(os.path.join(tmp_path, "out", "follower0_embedding_dp.json")).read())
    log = open(os.path.join(tmp_path, "out", "follower0.log")).read()
    planned = int(log.split("calibrates for ")[1].split()[0])
    # every evaluation the schedule could make (early stopping may make fewer) and the re-test: more than the epochs
    assert rep["releases_per_row"] == planned >= len(metrics["history"]) + 1 and planned > 2
    assert rep["most_sends_of_a_row"] <= planned
