"""A follower with its full view (its config and train.seed, the sample ids, this code's public seeds,
salts and generators, every gradient it received) recovers no more of the true labels than the
noisy labels carry: balanced accuracy at most 1 - rho. Two releases at different eps, or of different
mechanisms, do not nest. Each attack is also run where it must succeed: the old public-seed scheme,
per-epoch re-randomization, nested uniforms, and a planted partial leak (the tests have power).

Tolerances (tests/support/attack_shards.py): on `shards_40k` (~36k training labels, ~25% positive) a balanced
accuracy has sd <= 0.0028; TOL = 0.017 is a 6-sigma one-sided margin (P < 1e-9 per guess), and the union over the
~100 guesses keeps a false failure below 1e-7. A planted leak of the true label on 10% of rows raises
the balanced accuracy by 0.027 > TOL, so the margin cannot hide it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privacy.attacks.follower_view import (
    balanced_accuracy,
    best_accuracy,
    follower_view_attack,
    independent_disagreement_accuracy,
    release_difference_accuracy,
)
from privacy.attacks.gradient_scoring import follower_view_report
from privacy.label.randomized_response import binary_rr, flip_probability
from privacy.public_hash import uniform_from_ids
from tests.support.attack_shards import TOL
from tests.support.party_processes import party_configs
from vfl.config.schema import LabelDPConfig
from vfl.data.shards import PartyShard
from vfl.labeldp.release import LabelDPRelease, leader_training_labels


def _record_from_noisy(ids: np.ndarray, noisy: np.ndarray, epochs: int = 3, batch: int = 512) -> dict:
    """What a follower records when the top is linear: per sample (p - y~) times a positive weight."""
    rec = {"ids": [], "epoch": [], "step": [], "grad": []}
    rng = np.random.default_rng(0)
    for e in range(epochs):
        order = rng.permutation(ids.size)
        for s in range(0, ids.size, batch):
            r = order[s : s + batch]
            p = rng.uniform(0.05, 0.6, r.size)
            rec["ids"].append(ids[r])
            rec["epoch"].append(np.full(r.size, e))
            rec["step"].append(np.full(r.size, s // batch))
            rec["grad"].append(np.stack([p - noisy[r], 0.5 * (p - noisy[r])], axis=1))
    return {k: np.concatenate(v) for k, v in rec.items()}


def test_follower_view_attack_on_a_real_run_gets_no_more_than_1_minus_rho(tmp_path, shards_40k, procs):
    # Prepare: the leader trains 3 epochs at eps = 1; the follower records every gradient it receives
    eps = 1.0
    cfgs = party_configs(
        str(tmp_path),
        str(shards_40k),
        train={"epochs": 3, "seed": 0},
        privacy={"label_dp": {"eps": eps}},
        follower_debug={"record_gradients": str(tmp_path / "grads.npz")},
    )
    procs.start("leader", "leader", cfgs["leader"])
    procs.start("follower0", "follower", cfgs["follower0"])
    for name in ("leader", "follower0"):
        code, _, err = procs.wait(name, 300)
        assert code == 0, err
    with np.load(tmp_path / "grads.npz") as z:
        record = {k: z[k] for k in ("ids", "epoch", "step", "grad")}
    train = PartyShard(str(shards_40k / "leader")).split("train")
    # Execute: replay the follower's seed and every public seed/salt/generator, vote over epochs
    report = follower_view_report(record, train.ids, train.labels, eps, follower_seed=0)["follower_view"]
    # Assert
    bound = 1 - flip_probability(eps)
    assert report["best_accuracy"] <= bound + TOL, report
    assert report["vote_accuracy"] <= bound + TOL, report
    assert report["gradient_sign_accuracy"] >= bound - TOL, report  # the attack does recover the noisy label
    assert report["candidates"] > 50


@pytest.mark.slow  # the labels are randomized before any schedule: the follower-view attack runs by default on the
# synchronous run above and on an int8-compressed run (test_compression_attack); this adds K = 2
def test_follower_view_attack_under_staleness_gets_no_more_than_1_minus_rho(tmp_path, shards_40k, procs):
    """train.staleness 2: every gradient the follower receives comes from a cut up to 2 updates old, but still from
    the randomized labels only (the schedule post-processes the release): the same bound holds, and the attack still
    recovers the noisy labels (its power)."""
    # Prepare: as the synchronous run above, with 3 batches in flight
    eps = 1.0
    cfgs = party_configs(
        str(tmp_path),
        str(shards_40k),
        train={"epochs": 3, "seed": 0, "staleness": 2},
        privacy={"label_dp": {"eps": eps}},
        follower_debug={"record_gradients": str(tmp_path / "grads.npz")},
    )
    procs.start("leader", "leader", cfgs["leader"])
    procs.start("follower0", "follower", cfgs["follower0"])
    for name in ("leader", "follower0"):
        code, _, err = procs.wait(name, 300)
        assert code == 0, err
    with np.load(tmp_path / "grads.npz") as z:
        record = {k: z[k] for k in ("ids", "epoch", "step", "grad")}
    breakdown = json.loads((tmp_path / "out" / "follower0_step_breakdown.json").read_text())
    train = PartyShard(str(shards_40k / "leader")).split("train")
    # Execute
    report = follower_view_report(record, train.ids, train.labels, eps, follower_seed=0)["follower_view"]
    # Assert: the pipeline ran K + 1 = 3 deep; no guess beats 1 - rho, and the noisy labels are recovered
    assert breakdown["max_in_flight"] == 3
    bound = 1 - flip_probability(eps)
    assert report["best_accuracy"] <= bound + TOL, report
    assert report["vote_accuracy"] <= bound + TOL, report
    assert report["gradient_sign_accuracy"] >= bound - TOL, report


def test_the_same_attack_recovers_every_label_from_the_old_public_seed_scheme(shards_40k):
    # Prepare: labels randomized the way they were before the leader's key (public seed 0, public salt)
    eps = 1.0
    train = PartyShard(str(shards_40k / "leader")).split("train")
    truth = train.labels.astype(np.int64)
    noisy = binary_rr(truth, eps, u=uniform_from_ids(train.ids, 0, 0x1AB1))
    record = _record_from_noisy(train.ids, noisy)
    # Execute
    name, acc = best_accuracy(follower_view_attack(record, train.ids, eps, follower_seed=0), truth)
    # Assert
    assert acc == 1.0 and "seed=0" in name


def test_the_same_attack_on_keyed_labels_gets_no_more_than_1_minus_rho(tmp_path, shards_40k):
    # Prepare
    eps = 1.0
    train = PartyShard(str(shards_40k / "leader")).split("train")
    noisy = leader_training_labels(
        LabelDPRelease.from_config(LabelDPConfig(eps=eps, store_dir=str(tmp_path))),
        PartyShard(str(shards_40k / "leader")),
    )
    record = _record_from_noisy(train.ids, noisy.labels.astype(np.int64))
    # Execute
    _, acc = best_accuracy(follower_view_attack(record, train.ids, eps, follower_seed=0), train.labels.astype(np.int64))
    # Assert
    assert acc <= 1 - flip_probability(eps) + TOL


def test_per_epoch_re_randomization_is_caught_by_the_vote_and_once_per_release_is_not(tmp_path, shards_40k):
    # Prepare: a leader that re-randomizes every epoch (what the README criticises in others) vs ours
    eps = 1.0
    train = PartyShard(str(shards_40k / "leader")).split("train")
    truth = train.labels.astype(np.int64)
    rng = np.random.default_rng(5)
    epochs = 9
    per_epoch = {"ids": [], "epoch": [], "step": [], "grad": []}
    for e in range(epochs):
        noisy_e = binary_rr(truth, eps, rng)
        rec = _record_from_noisy(train.ids, noisy_e, epochs=1)
        for k in per_epoch:
            per_epoch[k].append(np.full(rec["ids"].size, e) if k == "epoch" else rec[k])
    per_epoch = {k: np.concatenate(v) for k, v in per_epoch.items()}
    ours = leader_training_labels(
        LabelDPRelease.from_config(LabelDPConfig(eps=eps, store_dir=str(tmp_path))),
        PartyShard(str(shards_40k / "leader")),
    )
    once = _record_from_noisy(train.ids, ours.labels.astype(np.int64), epochs=epochs)
    # Execute
    vote_fresh = follower_view_attack(per_epoch, train.ids, eps, 0)["majority vote over epochs"]
    vote_once = follower_view_attack(once, train.ids, eps, 0)["majority vote over epochs"]
    # Assert: 9 fresh releases vote to ~0.935; one release stays at 1 - rho = 0.731
    assert balanced_accuracy(vote_fresh, truth) > 0.9
    assert balanced_accuracy(vote_once, truth) <= 1 - flip_probability(eps) + TOL


def test_two_releases_at_eps_1_and_2_do_not_nest(tmp_path, shards_40k):
    # Prepare: one key, two releases of the same labelled data
    shard = PartyShard(str(shards_40k / "leader"))
    truth = shard.split("train").labels.astype(np.int64)
    low = leader_training_labels(
        LabelDPRelease.from_config(LabelDPConfig(eps=1.0, store_dir=str(tmp_path))), shard
    ).labels.astype(np.int64)
    high = leader_training_labels(LabelDPRelease.from_config(LabelDPConfig(eps=2.0, store_dir=str(tmp_path))), shard)
    # Execute
    acc, n_disagree = release_difference_accuracy(low, high.labels.astype(np.int64), truth)
    # Assert: about 0.731 (independent draws), not 1.0 (nested); ~3.5k disagreements: sd 0.0075
    want = independent_disagreement_accuracy(1.0, 2.0)
    assert abs(acc - want) < 5.5 * math.sqrt(want * (1 - want) / n_disagree)
    ledger = json.loads(open(high.report["ledger"]).read())
    assert [r["eps"] for r in ledger["releases"]] == [1.0, 2.0]


def test_nested_releases_from_one_set_of_uniforms_would_reveal_the_label(shards_40k):
    # Prepare: the flaw the release id in the PRF input removes: eps 1 and 2 from the same uniforms
    shard = PartyShard(str(shards_40k / "leader")).split("train")
    truth = shard.labels.astype(np.int64)
    u = np.random.default_rng(3).random(truth.size)
    # Execute
    acc, _ = release_difference_accuracy(binary_rr(truth, 1.0, u=u), binary_rr(truth, 2.0, u=u), truth)
    # Assert
    assert acc == 1.0


def test_attack_cli_reports_the_follower_view_and_two_releases(tmp_path, shards_40k):
    # Prepare
    import subprocess
    import sys

    from tests.support.paths import REPO

    shard = PartyShard(str(shards_40k / "leader"))
    train = shard.split("train")
    for eps in (1.0, 2.0):
        noisy = leader_training_labels(
            LabelDPRelease.from_config(LabelDPConfig(eps=eps, store_dir=str(tmp_path))), shard
        ).labels.astype(np.int64)
        np.savez(tmp_path / f"g{eps}.npz", **_record_from_noisy(train.ids, noisy, epochs=2))
    # Execute
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "privacy.attacks",
            "--gradients",
            str(tmp_path / "g1.0.npz"),
            "--labels",
            str(shards_40k / "leader/train"),
            "--eps",
            "1",
            "--follower-seed",
            "0",
            "--compare-gradients",
            str(tmp_path / "g2.0.npz"),
            "--compare-eps",
            "2",
            "--out",
            str(tmp_path / "leak.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "leak.json").read_text())
    assert rep["follower_view"]["best_accuracy"] <= rep["follower_view"]["bound"] + TOL
    two = rep["two_releases"]
    assert abs(two["high_eps_accuracy_where_they_disagree"] - two["independent_draws_allow"]) < 0.04


def test_a_planted_partial_leak_is_caught_by_the_tolerance(tmp_path, shards_40k):
    # Prepare: our labels, except that 10% of rows carry the true label (a partial leak)
    eps = 1.0
    shard = PartyShard(str(shards_40k / "leader"))
    train = shard.split("train")
    truth = train.labels.astype(np.int64)
    noisy = leader_training_labels(
        LabelDPRelease.from_config(LabelDPConfig(eps=eps, store_dir=str(tmp_path))), shard
    ).labels.astype(np.int64)
    leak = np.random.default_rng(9).random(truth.size) < 0.10
    record = _record_from_noisy(train.ids, np.where(leak, truth, noisy))
    # Execute
    _, acc = best_accuracy(follower_view_attack(record, train.ids, eps, follower_seed=0), truth)
    # Assert
    assert acc > 1 - flip_probability(eps) + TOL


def test_always_guessing_the_majority_class_scores_one_half_not_the_base_rate(shards_40k):
    # Prepare
    truth = PartyShard(str(shards_40k / "leader")).split("train").labels.astype(np.int64)
    # Execute / Assert: plain accuracy would be ~0.75 > 1 - rho at eps = 1
    assert balanced_accuracy(np.zeros_like(truth), truth) == 0.5


class _FlatPrior:
    """A stage-one 'model' predicting 0.5 for everyone: RRWithPrior then keeps both classes (k* = 2)."""

    def __call__(self, first, noisy):
        return np.full(first.size, 0.5)


def test_rr_and_rr_prior_releases_at_one_eps_draw_independently(tmp_path, shards_40k):
    # Prepare
    from vfl.labeldp.release import open_label_key, training_labels

    eps = 1.0
    shard = PartyShard(str(shards_40k / "leader"))
    train = shard.split("train")
    key = open_label_key(str(tmp_path), None, shard)
    rr = training_labels(train.labels, train.ids, LabelDPRelease.from_config(LabelDPConfig(eps=eps)), key)
    prior = training_labels(
        train.labels,
        train.ids,
        LabelDPRelease.from_config(LabelDPConfig(eps=eps, mechanism="rr_prior")),
        key,
        _FlatPrior(),
    )
    # Execute
    differ = rr.labels != prior.labels
    # Assert: both are plain RR at eps here (k* = 2 everywhere), so independent draws disagree at
    # 2 rho (1 - rho) on stage one and on stage two alike; shared uniforms would agree everywhere
    rho = flip_probability(eps)
    want = 2 * rho * (1 - rho)
    n = differ.size
    assert abs(differ.mean() - want) < 5.5 * math.sqrt(want * (1 - want) / n)
    assert rr.release != prior.release
