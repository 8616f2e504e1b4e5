"""The follower-view label attack under every train.staleness_correction.

Delay compensation, the staleness-aware learning rate and the local updates change what each party does with a gradient, never which gradients the leader
computes from what (the randomized labels, once per release) nor what a follower receives, so a follower with its
full view (its config and seed, the ids, this code's public seeds and generators, every gradient it received,
which under local_updates is also every gradient its local steps reuse) recovers no more of the true labels than
1 - rho; the attack still recovers the noisy labels (its power). The runs are in memory (the trainers joined by the
in-memory channel pair, every message encoded and decoded as on the wire).

Tolerances as tests/labeldp/test_label_dp_adversary.py: on 40k synthetic rows (~36k training labels, ~25% positive) a
balanced accuracy has sd <= 0.0028; TOL = 0.017 is a 6-sigma one-sided margin (P < 1e-9 per guess) and the union
over the ~100 guesses keeps a false failure below 1e-7 per run."""

from __future__ import annotations

import numpy as np
import pytest

from privacy.attacks.gradient_scoring import follower_view_report
from privacy.label.randomized_response import flip_probability
from tests.support.memory_session import memory_run
from vfl.data.shards import PartyShard

TOL = 0.017


@pytest.fixture(scope="module")
def shards_40k(tmp_path_factory):
    """40k synthetic rows (secret labels), default two-party shards."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare
    from vfl.data.synth.criteo import write_synthetic

    d = tmp_path_factory.mktemp("stale_attack")
    write_synthetic(str(d / "rows.tsv"), 40_000, seed=3, max_vocab=2_000)
    prepare(str(d / "rows.tsv"), str(d / "shards"), load_parties(None), PrepareOptions(hash_buckets=2_000))
    return d / "shards"


@pytest.mark.parametrize(
    "correction",
    [
        "local_updates",  # the follower reuses its cached gradients: the one that changes most on its side
        pytest.param("delay_compensation", marks=pytest.mark.slow),
        pytest.param("staleness_lr", marks=pytest.mark.slow),
    ],
)
def test_the_follower_view_attack_under_a_staleness_correction_gets_no_more_than_1_minus_rho(
    tmp_path, shards_40k, correction
):
    # Prepare / Execute: 3 epochs at eps = 1, staleness 2 with the correction; the follower records every gradient
    eps = 1.0
    run = memory_run(
        tmp_path,
        shards_40k,
        train={"epochs": 3, "seed": 0, "batch_size": 1024, "staleness": 2, "staleness_correction": correction},
        privacy={"label_dp": {"eps": eps}},
        follower_debug={"record_gradients": str(tmp_path / "grads.npz")},
    )
    with np.load(tmp_path / "grads.npz") as z:
        record = {k: z[k] for k in ("ids", "epoch", "step", "grad")}
    train = PartyShard(str(shards_40k / "leader")).split("train")
    report = follower_view_report(record, train.ids, train.labels, eps, follower_seed=0)["follower_view"]
    # Assert: the correction ran (local steps taken where it has them), and no guess beats 1 - rho
    stash = run["follower"].stash
    assert stash is not None and stash.correction is not None and stash.correction.name == correction
    assert (stash.correction.local_steps > 0) == (correction == "local_updates")
    bound = 1 - flip_probability(eps)
    assert report["best_accuracy"] <= bound + TOL, report
    assert report["vote_accuracy"] <= bound + TOL, report
    assert report["gradient_sign_accuracy"] >= bound - TOL, report
