"""Model selection under label DP: validation metrics from randomized labels (debiased), early stopping,
best-step restore over the protocol, LR schedules; and what followers receive depends on the true
labels only through the randomized training and validation labels.
Statistical checks: n = 400k, bounds of 5.5 standard errors (false failure < 4e-8 each)."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch
from sklearn.metrics import log_loss, roc_auc_score

from privacy.label.noisy_metrics import (
    class_prior_from_noisy,
    noisy_multiclass_validation_metrics,
    noisy_validation_metrics,
)
from privacy.label.randomized_response import binary_rr, flip_probability, kary_rr, kary_transition, keep_probability
from tests.support.party_processes import party_configs, run_centralized, run_split
from vfl.labeldp.losses import forward_corrected_ce
from vfl.training.schedule import lr_factor
from vfl.training.selection import EarlyStopping


def _scores(n=400_000, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    p = 1 / (1 + np.exp(-(1.5 * s - 1)))
    y = (rng.random(n) < p).astype(np.int64)
    return rng, p, y


def test_without_label_dp_validation_metrics_are_the_plain_ones_exactly():
    # Prepare
    _, p, y = _scores(20_000)
    # Execute
    m = noisy_validation_metrics(y, p, None)
    # Assert
    assert m["auc"] == m["auc_noisy"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert m["logloss"] == pytest.approx(log_loss(y, p), rel=1e-12)


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_debiased_validation_metrics_estimate_the_true_ones_from_noisy_labels(eps):
    # Prepare
    rng, p, y = _scores()
    noisy = binary_rr(y, eps, rng)
    # Execute
    m = noisy_validation_metrics(noisy, p, eps)
    # Assert: the class prior, AUC and logloss estimates land within 5.5 of their standard errors
    rho = flip_probability(eps)
    n = y.size
    se_pi = math.sqrt(0.25 / n) / (1 - 2 * rho)
    assert abs(class_prior_from_noisy(noisy, eps) - y.mean()) < 5.5 * se_pi
    half = (m["auc_ci95"][1] - m["auc_ci95"][0]) / 2
    assert abs(m["auc"] - roc_auc_score(y, p)) < 5.5 / 1.96 * half + 0.003  # + the plug-in prior's error
    assert m["auc_noisy"] < roc_auc_score(y, p) - 0.05  # the raw noisy AUC is badly biased
    assert abs(m["logloss"] - log_loss(y, p)) < 0.03


def test_early_stopping_counts_patience_and_min_delta():
    # Prepare
    es = EarlyStopping("auc", patience=2, min_delta=0.01)
    # Execute
    gains = [es.update(v, step, 0) for step, v in enumerate([0.60, 0.70, 0.705, 0.709])]
    # Assert: 0.705 and 0.709 are not gains of more than 0.01 over 0.70; two of them stop the run
    assert gains == [True, True, False, False] and es.should_stop and es.best_step == 1


def test_early_stopping_on_logloss_prefers_lower_values():
    es = EarlyStopping("logloss", patience=1)
    assert es.update(0.5, 1, 0) and es.update(0.4, 2, 0) and not es.update(0.45, 3, 0)
    assert es.best_value == 0.4 and es.should_stop


def test_lr_schedules_warm_up_then_decay_to_zero():
    assert [lr_factor(s, 10, "constant") for s in (0, 9)] == [1.0, 1.0]
    assert [lr_factor(s, 10, "linear", 2) for s in (0, 1, 2, 10)] == [0.5, 1.0, 1.0, 0.0]
    assert lr_factor(2, 10, "cosine", 2) == 1.0 and lr_factor(6, 10, "cosine", 2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="one of"):
        lr_factor(0, 10, "step")


def _leader_only_selection(cfgs):
    """Followers take no early_stopping section (the leader decides)."""
    import yaml

    doc = yaml.safe_load(open(cfgs["follower0"]))
    doc["train"].pop("early_stopping", None)
    yaml.safe_dump(doc, open(cfgs["follower0"], "w"))
    return cfgs


def _with_epochs(config: str, epochs: int, out) -> str:
    """A copy of a party's YAML with train.epochs set."""
    import yaml

    doc = yaml.safe_load(open(config))
    doc["train"]["epochs"] = epochs
    yaml.safe_dump(doc, open(out, "w"))
    return str(out)


def _run(procs, cfgs, env=None):
    return run_split(procs, _leader_only_selection(cfgs), env)


ES = {
    "epochs": 6,
    "lr": 0.05,
    "early_stopping": {"metric": "auc", "patience": 2},
    "eval_every_steps": 10,
    "lr_schedule": {"name": "cosine", "warmup_steps": 5},
}


@pytest.mark.slow  # early stopping restores the best step split == centralized by default, over real processes, in
# test_split_training's weight-average test
def test_split_early_stopping_restores_the_best_step_like_the_centralized_reference(tmp_path, shards_small, procs):
    # Prepare: a high learning rate overfits the small set, so validation AUC peaks and falls
    cfgs = _leader_only_selection(
        party_configs(str(tmp_path), str(shards_small), train=ES, privacy={"label_dp": {"eps": 2.0}})
    )
    # the follower's own epochs differ from the leader's: the leader's (WELCOME) size its lr schedule all the same
    split_cfgs = {**cfgs, "follower0": _with_epochs(cfgs["follower0"], 2, tmp_path / "follower0_2_epochs.yaml")}
    # Execute
    split = _run(procs, split_cfgs)
    central = run_centralized(cfgs, str(tmp_path / "c"))
    # Assert
    sel = split["selection"]
    assert sel["stopped_early"] and sel["restored"] and split["model_step"] == sel["best_step"] < split["steps"]
    best = next(h for h in split["history"] if h["step"] == sel["best_step"])
    assert split["test_auc"] == pytest.approx(best["test_auc"], abs=1e-9)  # the restored model is the best step's
    assert max(h["valid"]["auc"] for h in split["history"]) == sel["best_value"]
    np.testing.assert_allclose(split["step_losses"], central["step_losses"], rtol=1e-5)
    assert central["selection"]["best_step"] == sel["best_step"] and central["test_auc"] == pytest.approx(
        split["test_auc"], abs=1e-6
    )
    # one extra copy of weights and optimizer state per party, reported
    assert 0 < split["snapshot_bytes"]["leader"] and 0 < split["snapshot_bytes"]["follower0"]
    assert "restored the snapshot of global step" in (tmp_path / "out/follower0.log").read_text()


def test_what_followers_receive_depends_on_true_labels_only_through_the_randomized_ones(tmp_path, shards_small, procs):
    # Prepare: dataset B has other true labels (train, valid and test) but, under its own leader key,
    # the same randomized labels as dataset A under A's key: y_B = y~_A xor flips_B
    import os

    from privacy.keyed_random import keyed_uniforms
    from privacy.label.ledger.store import release_id
    from privacy.label.release_draws import PURPOSE_FLIP
    from tests.support.party_processes import REPO
    from vfl.config.schema import LabelDPConfig
    from vfl.data.shards import PartyShard
    from vfl.labeldp.release import LabelDPRelease, leader_training_labels, open_label_key

    eps = 1.0
    shard_b = tmp_path / "shards_b"
    shutil.copytree(shards_small, shard_b)
    a = PartyShard(str(shards_small / "leader"))
    noisy_a = leader_training_labels(
        LabelDPRelease.from_config(LabelDPConfig(eps=eps, store_dir=str(tmp_path / "store_a"))), a
    )
    key_b = open_label_key(str(tmp_path / "store_b"), None, a)
    # a release names its label set (a keyed digest of the labels), so no other labels can give A's noisy labels;
    # B's leader is made to name its labels as A's (sitecustomize below): the same release id, B's true labels
    pinned = {"label_set": key_b.label_set}
    rel_b = release_id(key_b.dataset, key_b.fingerprint, "binary_rr", {"eps": eps, "labels": "binary", **pinned})
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(
        f"import vfl.labeldp.release as r\nr.label_set_digest = lambda key, splits: {key_b.label_set!r}\n"
    )
    rho = flip_probability(eps)
    for split, noisy in (("train", noisy_a.labels.astype(np.int64)), ("valid", noisy_a.valid)):
        ids = a.split(split).ids
        flips_b = (keyed_uniforms(key_b.key, rel_b, PURPOSE_FLIP, ids) < rho).astype(np.int64)
        np.save(shard_b / "leader" / split / "labels.npy", (noisy ^ flips_b).astype(np.int8))
    test_y = np.load(shard_b / "leader/test/labels.npy")
    np.save(shard_b / "leader/test/labels.npy", (1 - test_y).astype(np.int8))
    changed = np.mean(np.load(shard_b / "leader/train/labels.npy") != a.split("train").labels)
    runs = {}
    for name, shards in (("a", shards_small), ("b", shard_b)):
        (tmp_path / name).mkdir()
        cfgs = party_configs(
            str(tmp_path / name),
            str(shards),
            train=ES,
            privacy={"label_dp": {"eps": eps}},
            follower_debug={"record_gradients": str(tmp_path / name / "grads.npz")},
        )
        # Execute
        env = {"VFL_LABEL_DP_STORE": str(tmp_path / f"store_{name}")}
        if name == "b":
            env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hook"), str(REPO)])
        runs[name] = _run(procs, cfgs, env=env)
        procs.cleanup()
    ga, gb = np.load(tmp_path / "a/grads.npz"), np.load(tmp_path / "b/grads.npz")
    # Assert: ~39% of true labels differ, yet every gradient, the stop step and the restored step are equal
    assert changed > 0.3
    assert runs["a"]["selection"]["best_step"] == runs["b"]["selection"]["best_step"]
    assert runs["a"]["steps"] == runs["b"]["steps"]
    np.testing.assert_array_equal(ga["ids"], gb["ids"])
    np.testing.assert_allclose(ga["grad"], gb["grad"], rtol=1e-6, atol=1e-9)
    assert runs["a"]["test_auc"] != runs["b"]["test_auc"]  # the test labels did change (reported, never chosen on)


def test_posterior_soft_labels_are_the_plain_loss_without_noise_and_flat_at_eps_0():
    # Prepare
    import torch
    import torch.nn.functional as F

    from vfl.labeldp.losses import posterior_soft_bce

    logits = torch.tensor([-2.0, -0.5, 0.3, 1.7], requires_grad=True)
    y = torch.tensor([0.0, 1.0, 1.0, 0.0])
    # Execute
    exact = posterior_soft_bce(logits, y, 0.0)
    flat = posterior_soft_bce(logits, y, 0.5)
    flat.backward()
    # Assert: rho = 0 targets are the labels; rho = 1/2 targets are the model's own predictions (no signal)
    assert torch.equal(exact, F.binary_cross_entropy_with_logits(logits, y))
    assert torch.allclose(logits.grad, torch.zeros(4), atol=1e-7)


def test_the_correction_is_chosen_in_the_config():
    from vfl.config.schema import LabelDPConfig
    from vfl.labeldp.release import LabelDPRelease

    def training_loss(cfg):
        return LabelDPRelease.from_config(cfg).training_loss()

    # rr defaults to the forward correction (the measured winner); plain RR is asked for; rr_prior has none
    assert LabelDPConfig(eps=1.0).debias and training_loss(LabelDPConfig(eps=1.0)) is not None
    assert training_loss(LabelDPConfig(eps=1.0, debias=False)) is None
    assert training_loss(LabelDPConfig(eps=1.0, mechanism="rr_prior")) is None
    assert training_loss(LabelDPConfig(eps=1.0, debias=True, correction="posterior")) is not None


# -- K classes under k-ary RR ---------------------------------------------------------------------------------
def _class_scores(n=200_000, k=10, seed=0):
    """Class probabilities of a model that is right about P(y | x), and labels drawn from them."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * 1.5 + np.linspace(0, 1, k)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1).clip(0, k - 1)
    return rng, p, y


def test_without_label_dp_multiclass_validation_metrics_are_the_plain_ones_exactly():
    # Prepare
    _, p, y = _class_scores(20_000)
    # Execute
    m = noisy_multiclass_validation_metrics(y, p, None, 10)
    # Assert
    assert m["accuracy"] == m["accuracy_noisy"] == np.mean(p.argmax(axis=1) == y)
    assert m["auc"] == pytest.approx(roc_auc_score(y, p, multi_class="ovr", average="macro"), abs=1e-12)
    assert m["logloss"] == pytest.approx(log_loss(y, p), rel=1e-9)


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_debiased_multiclass_metrics_estimate_the_true_ones_from_kary_rr_labels(eps):
    # Prepare
    k = 10
    rng, p, y = _class_scores()
    noisy = kary_rr(y, k, eps, rng)
    # Execute
    m = noisy_multiclass_validation_metrics(noisy, p, eps, k)
    # Assert: accuracy is affine in the true one, acc~ = p1 acc + q (1 - acc): the estimate lands within
    # 5.5 standard errors, sqrt(acc~(1-acc~)/n)/(p1 - q) (false failure < 4e-8). AUC and logloss are
    # plug-in estimates; their spread over 12 RR draws at eps = 1 was sd 0.0047 (AUC) and 0.020 (logloss),
    # so the tolerances 0.03 and 0.11 are 5.5 sd (the test is seeded: one fixed draw)
    acc = np.mean(p.argmax(axis=1) == y)
    p1 = keep_probability(eps, k)
    q = (1 - p1) / (k - 1)
    se = math.sqrt(m["accuracy_noisy"] * (1 - m["accuracy_noisy"]) / y.size) / (p1 - q)
    assert abs(m["accuracy"] - acc) < 5.5 * se
    assert m["accuracy_noisy"] < acc - 0.1  # the raw noisy accuracy is badly biased
    true_auc = roc_auc_score(y, p, multi_class="ovr", average="macro")
    assert abs(m["auc"] - true_auc) < 0.03 and m["auc_noisy"] < true_auc - 0.05
    assert abs(m["logloss"] - log_loss(y, p)) < 0.11 and m["logloss_noisy"] > log_loss(y, p) + 0.5


def test_kary_forward_correction_is_the_plain_loss_without_noise_and_unbiased_at_the_clean_posterior():
    # Prepare
    k = 10
    logits = torch.randn(64, k, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, k, (64,), generator=torch.Generator().manual_seed(1))
    t = torch.from_numpy(kary_transition(k, 1.0))
    p_true = torch.softmax(torch.randn(k, generator=torch.Generator().manual_seed(2)), dim=0).double()
    z = torch.log(p_true).clone().requires_grad_(True)
    # Execute: the expected corrected loss over y~ ~ p_true T, at logits log p_true
    plain = forward_corrected_ce(logits, labels, torch.eye(k, dtype=torch.float64))
    noisy_dist = p_true @ t
    expected = sum(noisy_dist[j] * forward_corrected_ce(z[None], torch.tensor([j]), t) for j in range(k))
    expected.backward()
    # Assert: with T = I it is cross-entropy; under k-ary RR its minimiser is the clean P(y | x) (Patrini Thm 2)
    assert float(plain) == pytest.approx(float(torch.nn.functional.cross_entropy(logits, labels)), rel=1e-6)
    assert float(z.grad.abs().max()) < 1e-6
