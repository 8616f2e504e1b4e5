"""Split training over real processes and tcp: it equals the centralized reference and writes its outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from tests.support.party_processes import party_configs, run_centralized, run_split
from tests.support.paths import REPO
from vfl.config.schema import load_config
from vfl.obs.logs import message_of
from vfl.preflight import resume_identity
from vfl.training.checkpoint import load_checkpoint


def test_split_losses_equal_centralized_per_step(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small), train={"epochs": 2})
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert
    a, b = np.array(split["step_losses"]), np.array(central["step_losses"])
    assert a.size == b.size == split["steps"] > 20
    np.testing.assert_allclose(a, b, rtol=1e-5)
    assert abs(split["test_auc"] - central["test_auc"]) < 1e-4
    assert split["test_auc"] > 0.65


def test_two_followers_train_and_matchrun_centralized(tmp_path, shards_three, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_three), followers=("follower0", "follower1"))
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert
    assert split["parties"] == ["leader", "follower0", "follower1"]
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)


@pytest.mark.slow  # wide cuts and mlp tops over processes by default: tests/models/test_models_split.py
def test_wide_cut_with_mlp_top_trains(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(
        str(tmp_path),
        str(shards_small),
        model={"bottom": {"embedding_dim": 8, "hidden": [32], "cut_dim": 6}},
        top={"name": "mlp", "hidden": [16]},
        train={"epochs": 3},
    )
    # Execute
    split = run_split(procs, cfgs)
    # Assert
    assert split["cut_dims"] == {"leader": 6, "follower0": 6}
    assert split["test_auc"] > 0.6
    # 6 float32 per sample and party, plus each message's header; PSI's bytes are not counted here (they are `psi`'s)
    assert 6 * 4 < split["wire"]["bytes_to_leader_per_sample"] < 6 * 4 * 1.25, split["wire"]


def test_outputs_metrics_logs_and_weights_only_checkpoints(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small), train={"checkpoint_every": 10})
    # Execute
    m = run_split(procs, cfgs)
    out = tmp_path / "out"
    # Assert
    for key in ("test_auc", "test_logloss", "history", "samples_per_second", "label_dp"):
        assert key in m
    assert m["label_dp"] is None and len(m["history"]) == 1
    log = (out / "leader.log").read_text()
    assert "epoch 0 step 5/" in log and "loss: " in log
    assert "label DP: off (privacy.label_dp unset or false): the followers' gradients come from the true labels" in log
    follower_log = (out / "follower0.log").read_text()
    # the follower logs the leader's step lines, without the loss (which stays with the leader)
    assert [message_of(x).split(" loss: ")[0] + " gradient applied" for x in log.splitlines() if " step " in x] == [
        message_of(x) for x in follower_log.splitlines() if " step " in x
    ]
    assert "loss" not in follower_log
    final = load_checkpoint(str(out / "checkpoints" / "leader_final.pt"))
    assert set(final["state"]) == {"bottom", "top"} and final["party"] == "leader"
    f10 = load_checkpoint(str(out / "checkpoints" / "follower0_step10.pt"))
    assert "model" in f10["state"]["bottom"] and "optimizer" in f10["state"]["bottom"]


# slow (three runs): a resume that continues exactly runs by default over real processes in test_staleness (mid-epoch,
# K = 2), and a resume on another label-DP release is refused by default below
@pytest.mark.slow
@pytest.mark.parametrize("ema_decay", [0.0, 0.9], ids=["plain", "weight_average"])
def test_resumed_run_continues_exactly_with_label_dp(tmp_path, shards_small, procs, ema_decay):
    # Prepare: one uninterrupted 2-epoch run, and a 1-epoch run resumed for the second epoch (with train.ema_decay:
    # the checkpoint's raw weights train on, its average goes on being evaluated)
    dp = {"label_dp": {"eps": 1.0}}
    for d in ("full", "first", "second"):
        (tmp_path / d).mkdir()
    train = {"epochs": 2, "ema_decay": ema_decay}
    full = party_configs(str(tmp_path / "full"), str(shards_small), train=train, privacy=dp)
    first = party_configs(str(tmp_path / "first"), str(shards_small), train={**train, "epochs": 1}, privacy=dp)
    straight = run_split(procs, full)
    procs.cleanup()
    run_split(procs, first)
    procs.cleanup()
    ckpts = tmp_path / "first/out/checkpoints"
    second = party_configs(str(tmp_path / "second"), str(shards_small), train=train, privacy=dp)
    # Execute
    procs.start("leader", "leader", second["leader"], "--resume", str(ckpts / "leader_final.pt"))
    procs.start("follower0", "follower", second["follower0"], "--resume", str(ckpts / "follower0_final.pt"))
    for name in ("leader", "follower0"):
        code, _, err = procs.wait(name, 300)
        assert code == 0, err
    resumed = json.loads((tmp_path / "second/out/metrics.json").read_text())
    # Assert: same noisy labels, same optimizer state, same second-epoch losses and AUC
    # (the resumed run's history and curves continue the first run's: the whole run's losses, both evaluations)
    assert len(resumed["step_losses"]) == straight["steps"] and resumed["steps"] == straight["steps"]
    np.testing.assert_allclose(resumed["step_losses"], straight["step_losses"], rtol=1e-5)
    assert [h["epoch"] for h in resumed["history"]] == [0, 1]
    assert resumed["test_auc"] == pytest.approx(straight["test_auc"], abs=1e-6)
    assert "resumed from" in (tmp_path / "second/out/leader.log").read_text()


def test_weight_average_with_microbatches_and_restore_equals_centralized(tmp_path, shards_small, procs):
    # Prepare: train.ema_decay on both parties, two micro-batches, early stopping that restores a best step; the wide
    # parts on their own Adagrad (train.linear_optimizer)
    train = {
        "epochs": 4,
        "lr": 0.05,
        "ema_decay": 0.9,
        "microbatches": 2,
        "eval_every_steps": 10,
        "linear_optimizer": {"lr": 0.05},
    }
    es = {"early_stopping": {"metric": "auc", "patience": 2}}
    cfgs = party_configs(str(tmp_path), str(shards_small), train=train, leader_train=es)
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the raw weights train alike (losses), the averaged ones are evaluated, selected and restored alike
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)
    assert split["test_auc"] == pytest.approx(central["test_auc"], abs=1e-6) and split["test_auc"] > 0.65
    sel = split["selection"]
    assert sel["best_step"] == central["selection"]["best_step"] and split["model_step"] == sel["best_step"]
    best = next(h for h in split["history"] if h["step"] == sel["best_step"])
    assert split["test_auc"] == pytest.approx(best["test_auc"], abs=1e-9)  # the restored average is the best step's
    final = load_checkpoint(str(tmp_path / "out/checkpoints/follower0_final.pt"))["state"]["bottom"]
    raw = final["optimizer"]["average"]["raw"]
    assert set(raw) == set(final["model"]) and any(not torch.equal(raw[k], final["model"][k]) for k in raw)
    assert final["optimizer"]["kinds"] == ["Adam", "LazyAdam", "Adagrad"]
    # the sidecar records what a resume must keep; another optimizer layout is refused before torch or any peer
    ckpt = tmp_path / "out/checkpoints/follower0_final.pt"
    sidecar = json.loads((tmp_path / "out/checkpoints/follower0_final.pt.json").read_text())
    assert sidecar["resume"] == resume_identity(load_config(cfgs["follower0"]))
    assert sidecar["resume"]["train.linear_optimizer"] == "adagrad"
    doc = yaml.safe_load(open(cfgs["follower0"]))
    del doc["train"]["linear_optimizer"]
    (tmp_path / "without_linear.yaml").write_text(yaml.safe_dump(doc))
    other = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "follower", "--config", str(tmp_path / "without_linear.yaml")]
        + ["--resume", str(ckpt), "--epochs", "5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    imported = {line.split("|")[-1].strip() for line in other.stderr.splitlines() if line.startswith("import time:")}
    assert other.returncode == 2 and "torch" not in imported, other.stderr[-2000:]
    assert 'was trained with train.linear_optimizer "adagrad", but this config has null' in other.stderr


def test_parties_resuming_from_different_steps_are_refused(tmp_path, shards_small, procs):
    # Prepare
    cfgs = party_configs(str(tmp_path), str(shards_small), train={"epochs": 1, "checkpoint_every": 5})
    run_split(procs, cfgs)
    procs.cleanup()
    ck = tmp_path / "out/checkpoints"
    # Execute
    procs.start("leader", "leader", cfgs["leader"], "--resume", str(ck / "leader_step5.pt"), "--epochs", "2")
    procs.start(
        "follower0", "follower", cfgs["follower0"], "--resume", str(ck / "follower0_step10.pt"), "--epochs", "2"
    )
    code, _, err = procs.wait("leader", 120)
    # Assert
    assert code == 1 and "follower0 resumes at global step 10 but the leader at 5" in err


def test_resuming_on_another_label_dp_release_is_refused(tmp_path, shards_small, procs):
    # Prepare: a checkpoint trained on the eps = 1 release
    for d in ("first", "second"):
        (tmp_path / d).mkdir()
    first = party_configs(str(tmp_path / "first"), str(shards_small), privacy={"label_dp": {"eps": 1.0}})
    run_split(procs, first)
    procs.cleanup()
    ckpts = tmp_path / "first/out/checkpoints"
    second = party_configs(
        str(tmp_path / "second"), str(shards_small), train={"epochs": 2}, privacy={"label_dp": {"eps": 2.0}}
    )
    # Execute: resume it on the eps = 2 release, which would mix two releases of the same labels
    procs.start("leader", "leader", second["leader"], "--resume", str(ckpts / "leader_final.pt"))
    procs.start("follower0", "follower", second["follower0"], "--resume", str(ckpts / "follower0_final.pt"))
    code, _, err = procs.wait("leader", 120)
    fcode, _, ferr = procs.wait("follower0", 120)
    # Assert
    assert code == 1 and "was trained on label-DP release" in err and "start a fresh run" in err, err
    assert fcode != 0


def test_multiclass_split_losses_equal_centralized_per_step(tmp_path, shards_k10, procs):
    # Prepare: a 10-class label on the leader; the follower's config names no task and holds no labels
    cfgs = party_configs(
        str(tmp_path),
        str(shards_k10),
        model={"bottom": {"embedding_dim": 8, "hidden": [32], "cut_dim": 8}},
        train={"epochs": 2},
        leader_train={"task": "multiclass"},
    )
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the same per-step cross-entropy, and accuracy, macro AUC and logloss above chance (1/10, 1/2, ln 10)
    a, b = np.array(split["step_losses"]), np.array(central["step_losses"])
    assert a.size == b.size == split["steps"] > 10
    np.testing.assert_allclose(a, b, rtol=1e-5)
    assert abs(split["test_accuracy"] - central["test_accuracy"]) < 1e-9
    test_labels = np.load(shards_k10 / "leader" / "test" / "labels.npy")
    majority = np.bincount(test_labels).max() / test_labels.size
    assert split["test_accuracy"] > majority and split["test_auc"] > 0.6 and split["test_logloss"] < np.log(10)
    assert a[0] == pytest.approx(np.log(10), abs=0.3)  # softmax over 10 outputs starts near uniform
    log = (tmp_path / "out" / "leader.log").read_text()
    assert "test_accuracy: " in log and "final test_accuracy: " in log


def test_parties_with_their_own_files_train_on_exactly_the_intersection_like_centralized(
    tmp_path, vertical_raw, vertical_shards, procs
):
    # Prepare: shards each party prepared from its own file (string and integer ids, other orders, unequal sets)
    from vfl.data.ids import ids64
    from vfl.data.prepare import PrepareOptions, split_of

    common = np.sort(ids64(vertical_raw["common"]))
    want = {s: int((split_of(common, PrepareOptions()) == k).sum()) for k, s in enumerate(("train", "valid", "test"))}
    # fresh keys: the PSI over unequal id sets runs in full here, never reused from another test's run
    cfgs = party_configs(str(tmp_path), str(vertical_shards), train={"epochs": 1}, fresh_keys=True)
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: the PSI found exactly the shared ids, training used exactly them, and split equals centralized
    assert split["psi"]["intersection"] == common.size
    assert split["psi"]["own_ids"] > common.size and split["psi"]["peer_ids"]["follower0"] > common.size
    assert split["rows"] == want == central["rows"]
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)
    assert abs(split["test_auc"] - central["test_auc"]) < 1e-4
    log = (tmp_path / "out" / "follower0.log").read_text()
    assert f"PSI intersection {common.size} ids" in log


def test_an_intersection_below_the_minimum_stops_every_party(tmp_path, vertical_shards, procs):
    # Prepare: the leader demands more shared ids than exist
    import yaml

    cfgs = party_configs(str(tmp_path), str(vertical_shards))
    doc = yaml.safe_load(open(cfgs["leader"]))
    doc["data"]["min_intersection"] = 10**6
    yaml.safe_dump(doc, open(cfgs["leader"], "w"))
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    procs.start("follower0", "follower", cfgs["follower0"])
    codes = {n: procs.wait(n, timeout=120) for n in ("leader", "follower0")}
    # Assert
    assert codes["leader"][0] != 0 and "below data.min_intersection=1000000" in codes["leader"][2]
    assert codes["follower0"][0] != 0 and "min_intersection" in codes["follower0"][2]
