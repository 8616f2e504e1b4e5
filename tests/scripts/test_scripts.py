"""The launch scripts: the front-door command end to end on small data, and a dying party stops the run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
import yaml

from tests.support.paths import REPO


def _script(*args, env=None, timeout=300):
    return subprocess.run(
        ["bash", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def test_run_vfl_train_local_trains_both_ways_and_prints_bayes_auc(tmp_path, synth_tiny):
    # Execute
    split = _script("scripts/run_vfl_train_local.sh", "--data", str(synth_tiny), "--out", str(tmp_path / "split"))
    central = _script(
        "scripts/run_vfl_train_local.sh", "--data", str(synth_tiny), "--out", str(tmp_path / "central"), "--centralized"
    )
    # Assert
    assert split.returncode == 0, f"stdout:\n{split.stdout[-3000:]}\nstderr:\n{split.stderr[-3000:]}"
    assert re.search(r"^epoch 0 step (\d+)/\1 loss: \d+\.\d{6}$", split.stdout, re.M), split.stdout
    assert "Bayes-optimal AUC of this data" in split.stdout
    assert re.search(r"^PSI: \d+ shared ids", split.stdout, re.M), split.stdout[-3000:]
    assert (tmp_path / "split/raw/leader.tsv").exists() and (tmp_path / "split/raw/follower0.tsv").exists()
    assert not list((tmp_path / "split/shards/follower0").rglob("labels.npy"))
    assert central.returncode == 0, f"stdout:\n{central.stdout[-3000:]}\nstderr:\n{central.stderr[-3000:]}"
    a = json.loads((tmp_path / "split/metrics.json").read_text())
    b = json.loads((tmp_path / "central/metrics.json").read_text())
    assert a["mode"] == "split" and b["mode"] == "centralized" and len(a["step_losses"]) == len(b["step_losses"])
    assert (tmp_path / "split/leader.log").exists() and (tmp_path / "split/follower0.log").exists()
    for party in ("leader", "follower0"):  # each party fitted its own vocabulary (values seen >= 10 times)
        t = json.loads((tmp_path / f"split/shards/{party}/manifest.json").read_text())["transforms"]
        assert t["categorical_mode"] == "vocabulary" and t["vocab_min_count"] == 10, t


def test_the_categorical_flags_are_alternatives_and_digits_takes_neither(tmp_path, synth_tiny):
    # Execute
    both = _script(
        "scripts/run_vfl_train_local.sh",
        "--data",
        str(synth_tiny),
        "--out",
        str(tmp_path / "b"),
        "--hash-buckets",
        "1000",
        "--vocab-min-count",
        "5",
    )
    digits = _script("scripts/run_vfl_train_local.sh", "--example", "digits", "--vocab-min-count", "5")
    # Assert: one-line errors naming the values, before anything is written
    assert both.returncode == 2 and "--hash-buckets 1000 and --vocab-min-count 5 are alternatives" in both.stderr
    assert digits.returncode == 2 and "--example digits has no categorical columns" in digits.stderr
    assert not (tmp_path / "b").exists()


def test_label_dp_script_sets_eps_and_two_runs_share_one_key_and_one_release(tmp_path, synth_tiny):
    # Prepare: a store of its own, so the ledger starts empty
    env = {"VFL_LABEL_DP_STORE": str(tmp_path / "store")}
    # Execute: the script re-prepares the shards with --force on every run
    runs = [
        _script(
            "scripts/run_vfl_train_local_label_dp.sh", "--data", str(synth_tiny), "--out", str(tmp_path / "dp"), env=env
        )
        for _ in range(2)
    ]
    # Assert
    for r in runs:
        assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
        assert "label DP eps=1.0" in r.stdout, r.stdout[-3000:]
    m = json.loads((tmp_path / "dp/metrics.json").read_text())
    ld = m["label_dp"]
    assert (
        ld["eps"] == 1.0
        and ld["new_release"] is False
        and ld["dataset_releases"] == 1
        and ld["dataset_total_eps"] == 1.0
    )
    ledger = json.loads(open(ld["ledger"]).read())
    assert len(ledger["releases"]) == 1 and ledger["releases"][0]["uses"] == 2
    assert (tmp_path / "store" / "key").exists() and len(list((tmp_path / "store").rglob("key"))) == 1


def test_a_party_that_dies_stops_the_others_and_fails_the_script(tmp_path, synth_tiny):
    # Prepare: a follower config whose declared columns do not match its shard
    cfg = yaml.safe_load(open(REPO / "examples/wide_deep_criteo/follower.yaml"))
    cfg["data"]["dense"] = ["I1"]
    bad = tmp_path / "follower.yaml"
    yaml.safe_dump(cfg, open(bad, "w"))
    # Execute
    t0 = time.monotonic()
    r = _script(
        "scripts/run_vfl_train_local.sh",
        "--data",
        str(synth_tiny),
        "--out",
        str(tmp_path / "o"),
        env={"FOLLOWER_CONFIG": str(bad)},
    )
    # Assert: the leader (timeout_s 60) was killed instead of waiting for its deadline
    assert r.returncode != 0
    assert "follower0 exited with status 1; stopping the other parties" in r.stderr
    assert "does not match the shard's columns" in r.stderr
    assert time.monotonic() - t0 < 50
    assert not (tmp_path / "o/metrics.json").exists()


@pytest.mark.slow  # the front door's own run is the default test above; multiclass over processes: test_split_training
def test_digits_example_runs_from_one_command_and_reports_accuracy(tmp_path):
    # Execute: the 10-class digits example, split over ZeroMQ, shortened to 3 epochs
    r = _script(
        "scripts/run_vfl_train_local.sh", "--example", "digits", "--epochs", "3", "--out", str(tmp_path / "digits")
    )
    # Assert
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    m = json.loads((tmp_path / "digits/metrics.json").read_text())
    assert re.search(r"^test accuracy 0\.\d{4}  macro AUC 0\.\d{4}  test logloss \d+\.\d{4}", r.stdout, re.M), r.stdout[
        -2000:
    ]
    assert m["test_accuracy"] > 0.5 and m["mode"] == "split"  # 10 classes: chance is 0.1


def test_an_unknown_example_is_refused_naming_the_allowed_ones():
    # Execute
    bad = _script("scripts/run_vfl_train_local.sh", "--example", "mnist")
    # Assert
    assert bad.returncode == 2 and "--example mnist: allowed: digits, multiclass" in bad.stderr


def test_each_party_script_prepares_its_own_raw_file_and_trains_on_the_intersection(tmp_path, vertical_raw, procs):
    # Prepare: configs (data.path unused: --raw prepares the shard), one script per party, each with its own file
    from tests.support.party_processes import party_configs

    cfgs = party_configs(str(tmp_path), str(tmp_path / "unused"))
    endpoint = yaml.safe_load(open(cfgs["leader"]))["network"]["bind"]
    # the leader takes the default categorical encoding (its own vocabulary), the follower hashes: each its own choice
    cat_flags = {"leader": [], "follower0": ["--hash-buckets", "2000"]}
    for party, script in (("leader", "scripts/run_leader.sh"), ("follower0", "scripts/run_follower.sh")):
        raw = ["--raw", str(vertical_raw[party]), "--shards", str(tmp_path / f"shards_{party}"), *cat_flags[party]]
        procs.start_argv(party, ["bash", script, cfgs[party], endpoint, *raw])
    # Execute
    runs = {p: procs.wait(p, timeout=300) for p in ("leader", "follower0")}
    # Assert: each party prepared only its own shard; training used exactly the shared ids
    for p, (code, _, err) in runs.items():
        assert code == 0, f"{p}: {err[-2000:]}"
    assert os.listdir(tmp_path / "shards_leader") == ["leader"] and os.listdir(tmp_path / "shards_follower0") == [
        "follower0"
    ]
    modes = {p: json.loads((tmp_path / f"shards_{p}/{p}/manifest.json").read_text())["transforms"] for p in runs}
    assert modes["leader"]["categorical_mode"] == "vocabulary" and modes["leader"]["vocab_min_count"] == 10
    assert modes["follower0"]["categorical_mode"] == "hash"
    m = json.loads((tmp_path / "out/metrics.json").read_text())
    assert m["psi"]["intersection"] == len(vertical_raw["common"])
