"""Label DP in a real split run: accounted once per sample, identical in split and centralized runs,
and the gradients a follower receives leak at most the noisy label (bound e^eps/(1+e^eps))."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import yaml

from privacy.attacks.gradient_scoring import leakage_report
from tests.support.party_processes import party_configs, run_centralized, run_split
from tests.support.paths import REPO


def _leakage(tmp_path, shards, eps):
    grads = np.load(tmp_path / "grads.npz")
    record = {k: grads[k] for k in ("ids", "epoch", "step", "grad")}
    ids = np.load(shards / "leader/train/ids.npy")
    labels = np.load(shards / "leader/train/labels.npy")
    return leakage_report(record, ids, labels, eps)


def test_label_dp_run_is_reported_and_equals_centralized(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(
        str(tmp_path), str(shards_small), train={"epochs": 2}, privacy={"label_dp": {"eps": 1.0, "debias": True}}
    )
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "c"))
    # Assert
    ld = split["label_dp"]
    rho = 1 / (1 + math.e)
    n = split["rows"]["train"]
    assert ld["eps"] == 1.0 and ld["mechanism"] == "binary_rr" and ld["debias"] is True
    assert abs(ld["flipped_fraction"] - rho) < 5.5 * math.sqrt(rho * (1 - rho) / n)  # false failure < 4e-8
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)
    assert "label DP: binary_rr eps=1.0" in (tmp_path / "out/leader.log").read_text()


def test_without_dp_the_sign_of_the_gradient_is_the_label(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(
        str(tmp_path), str(shards_small), follower_debug={"record_gradients": str(tmp_path / "grads.npz")}
    )
    # Execute
    run_split(procs, cfgs)
    report = _leakage(tmp_path, shards_small, None)
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "privacy.attacks",
            "--gradients",
            str(tmp_path / "grads.npz"),
            "--labels",
            str(shards_small / "leader/train"),
            "--out",
            str(tmp_path / "leakage.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert
    assert report["attacks"]["sign"]["max_auc"] > 0.999
    assert report["attacks"]["oracle"]["max_auc"] > 0.999
    assert cli.returncode == 0, cli.stderr
    written = json.loads((tmp_path / "leakage.json").read_text())
    assert written["eps"] is None and written["bound"] == 1.0
    assert set(written["attacks"]) == {"sign", "norm", "cosine", "oracle"}
    assert set(written["attacks"]["sign"]) == {"mean_auc", "max_auc", "per_epoch"}


def test_with_dp_direction_attacks_stay_below_the_randomized_response_bound(tmp_path, shards_small, procs):
    # Prepare
    eps = 1.0
    cfgs = party_configs(
        str(tmp_path),
        str(shards_small),
        train={"epochs": 2},
        privacy={"label_dp": {"eps": eps}},
        follower_debug={"record_gradients": str(tmp_path / "grads.npz")},
    )
    # Execute
    run_split(procs, cfgs)
    report = _leakage(tmp_path, shards_small, eps)
    # Assert: ~10.8k labelled samples; the AUC of the noisy label vs the true one has sd < 0.006,
    # so a tolerance of 0.035 (> 5.5 sd) bounds false failures below 4e-8 per attack
    bound = math.exp(eps) / (1 + math.exp(eps))
    assert report["bound"] == bound
    for name in ("sign", "cosine", "oracle"):
        assert report["attacks"][name]["max_auc"] <= bound + 0.035, name
    assert report["attacks"]["sign"]["max_auc"] > bound - 0.035  # the sign still recovers the noisy label


def test_rr_prior_run_keeps_followers_alive_while_the_prior_trains(tmp_path, shards_small, procs):
    # Prepare: stage one takes longer than the follower's 4 s deadline (which must still cover one PSI chunk
    # of 8192 exponentiations on a loaded machine)
    cfgs = party_configs(
        str(tmp_path),
        str(shards_small),
        timeout_s=60,
        privacy={"label_dp": {"eps": 2.0, "mechanism": "rr_prior", "prior_epochs": 200}},
    )
    doc = yaml.safe_load(open(cfgs["follower0"]))
    doc["network"]["timeout_s"] = 4.0
    yaml.safe_dump(doc, open(cfgs["follower0"], "w"))
    # Execute: the follower starts once the leader listens, so its short deadline only meets the preparation
    procs.start("leader", "leader", cfgs["leader"])
    procs.wait_for_line("leader", str(tmp_path / "out/leader.log"), "listening on")
    procs.start("follower0", "follower", cfgs["follower0"])
    for name in ("leader", "follower0"):
        code, _, err = procs.wait(name, 300)
        assert code == 0, err
    m = json.loads((tmp_path / "out/metrics.json").read_text())
    # Assert
    ld = m["label_dp"]
    assert ld["mechanism"] == "rr_prior" and 0.4 < ld["stage_one_fraction"] < 0.6
    assert 0.0 <= ld["collapse_fraction"] <= 1.0 and isinstance(ld["collapsed"], bool)
    log = (tmp_path / "out/leader.log").read_text()
    assert "label DP: rr_prior eps=2.0" in log


def test_multiclass_kary_rr_with_forward_correction_equals_centralized(tmp_path, shards_k10, procs):
    # Prepare: K = 10 classes, k-ary RR at eps = 1 (keep p1 = e/(9 + e) = 0.232), forward correction,
    # selection on the randomized validation labels by debiased accuracy
    cfgs = party_configs(
        str(tmp_path),
        str(shards_k10),
        model={"bottom": {"embedding_dim": 8, "hidden": [32], "cut_dim": 8}},
        train={"epochs": 2, "eval_every_steps": 5},
        leader_train={"task": "multiclass", "early_stopping": {"metric": "accuracy", "patience": 10}},
        privacy={"label_dp": {"eps": 1.0, "debias": True}},
    )
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "c"))
    # Assert: k-ary RR once per sample at the stated keep rate (5.5 sigma: false failure < 4e-8), the
    # corrected loss trains identically split and centralized, selection read the debiased estimates
    ld = split["label_dp"]
    p1 = math.e / (9 + math.e)
    n = split["rows"]["train"]
    assert ld["mechanism"] == "kary_rr" and ld["num_classes"] == 10 and ld["keep_probability"] == pytest.approx(p1)
    assert abs((1 - ld["flipped_fraction"]) - p1) < 5.5 * math.sqrt(p1 * (1 - p1) / n)
    assert ld["valid_rows"] == split["rows"]["valid"] and ld["valid_flipped_fraction"] > 0.6
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)
    assert split["selection"]["metric"] == "accuracy"
    assert all(0.0 <= h["valid"]["accuracy_noisy"] <= 1.0 and "accuracy" in h["valid"] for h in split["history"])
    assert split["test_accuracy"] == pytest.approx(central["test_accuracy"], abs=1e-9)
    assert "label DP: kary_rr eps=1.0" in (tmp_path / "out/leader.log").read_text()


@pytest.mark.slow  # LP-2ST's prior over real processes runs by default above (binary); its K-class stage one runs
# through a follower in memory in test_trainers_in_memory, K-ary RR over real processes just above
def test_multiclass_rr_prior_trains_its_prior_over_all_parties_identically_split_and_centralized(
    tmp_path, shards_k10, procs
):
    # Prepare: LP-2ST at K = 10, eps = 1: stage one (k-ary RR) trains a split model of leader AND follower
    cfgs = party_configs(
        str(tmp_path),
        str(shards_k10),
        model={"bottom": {"embedding_dim": 8, "hidden": [32], "cut_dim": 8}},
        leader_train={"task": "multiclass"},
        privacy={"label_dp": {"eps": 1.0, "mechanism": "rr_prior", "prior_epochs": 2}},
    )
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "c"))
    # Assert: the follower trained a stage-one bottom; the all-party prior (hence the stage-two labels and
    # every step after) is identical split and centralized; the report has the kept-set sizes
    ld, cd = split["label_dp"], central["label_dp"]
    assert ld["mechanism"] == "rr_prior" and ld["prior"].startswith("all parties") and ld["num_classes"] == 10
    assert 1.0 <= ld["mean_k_star"] <= 10.0 and 0.0 <= ld["collapse_fraction"] <= 1.0
    assert abs(ld["stage_one_fraction"] - 0.5) < 0.05  # n ~ 4.8k: 7 sigma
    for key in ("release_id", "mean_k_star", "collapse_fraction", "flipped_fraction"):
        assert ld[key] == cd[key], key
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)
    follower_log = (tmp_path / "out/follower0.log").read_text()
    assert "LP-2ST stage one: training a prior bottom on" in follower_log and "its bottom is dropped" in follower_log


def test_ten_class_gradient_attacks_find_the_label_without_dp_and_stay_at_p1_with_it(tmp_path, shards_k10, procs):
    # Prepare: the follower records every gradient of a 10-class run, without DP and at eps = 1
    from privacy.attacks.follower_view_multiclass import follower_view_attack_multiclass, macro_recall
    from privacy.attacks.gradient_multiclass import multiclass_leakage_report

    ids = np.load(shards_k10 / "leader/train/ids.npy")
    labels = np.load(shards_k10 / "leader/train/labels.npy")
    reports = {}
    for name, privacy in (("clear", None), ("dp", {"label_dp": {"eps": 1.0}})):
        (tmp_path / name).mkdir()
        cfgs = party_configs(
            str(tmp_path / name),
            str(shards_k10),
            model={"bottom": {"embedding_dim": 8, "hidden": [32], "cut_dim": 8}},
            leader_train={"task": "multiclass"},
            privacy=privacy,
            follower_debug={"record_gradients": str(tmp_path / name / "grads.npz")},
        )
        # Execute
        run_split(procs, cfgs)
        procs.cleanup()
        g = np.load(tmp_path / name / "grads.npz")
        record = {k: g[k] for k in ("ids", "epoch", "step", "grad")}
        reports[name] = multiclass_leakage_report(record, ids, labels, 10, None if privacy is None else 1.0)
    truth = labels[np.searchsorted(ids, record["ids"])]  # ids are sorted in a shard
    view = follower_view_attack_multiclass(record, ids, truth, 10, 1.0, follower_seed=0)
    first = record["epoch"] == record["epoch"].min()
    best_view = max(macro_recall(guess, truth[first], 10) for guess in view.values())
    # Assert: in the clear the gradient direction names the class; under k-ary RR at eps = 1 both attacks
    # stay at p1 = 0.232 (n ~ 4.8k rows: 5.5 sigma = 0.034; false failure < 4e-8 per attack)
    clear, dp = reports["clear"], reports["dp"]
    assert clear["attacks"]["oracle"]["max_accuracy"] > 0.9
    p1, n = dp["bound"], dp["rows"]
    assert p1 == pytest.approx(math.e / (9 + math.e))
    for attack in ("oracle", "cluster"):
        assert dp["attacks"][attack]["max_accuracy"] < p1 + 5.5 * math.sqrt(p1 * (1 - p1) / n), attack
    # the follower's full view (gradient direction, undone with every public seed, salt and generator)
    # stays at the macro-recall bound p1 too (5.5 sigma of one class's recall: a conservative margin)
    assert len(view) > 100 and best_view < p1 + 5.5 * math.sqrt(p1 * (1 - p1) / (n / 10))
