"""The leader's attack on a follower's columns (privacy/attacks/embedding_inversion.py), in memory: a fixed bottom on
synthetic follower columns, its cuts sent 5 times a row (5 epochs) as the follower's release sends them, the leader
knowing 1% of the rows' true values.

Sizes and bounds: 10,000 rows, 100 known; a decoder's accuracy on the other 9,900 has sd <= 0.005, so a
planted leak's true accuracy of ~1 stays above 0.95 with P(false failure) < 1e-20, and at eps 1 (noise std ~40x the
clip per coordinate after averaging the 5 sends) the decoder's true advantage is ~0: 0.02 over the prior is 4 sd of
the estimate (P < 4e-5 per draw; the draws are seeded, so the outcome is fixed, and this is the margin it has)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privacy.attacks.embedding_inversion import attack_columns, exact_linkage, link_sends
from privacy.embedding_dp import calibrate_noise_multiplier, noise_std, noised_cut

N, SENDS, CUT, CLIP = 10_000, 5, 16, 1.0


def _follower_table(seed: int = 1) -> dict:
    g = np.random.default_rng(seed)
    return {
        "segment": ("categorical", g.choice(4, N, p=[0.4, 0.3, 0.2, 0.1])),
        "region": ("categorical", g.integers(0, 10, N)),
        "spend": ("numeric", g.normal(size=N)),
        "age": ("numeric", g.normal(size=N)),
    }


def _bottom_cut(cols: dict) -> torch.Tensor:
    """A fixed (seeded) embedding + MLP bottom of the four columns: cut (N, 16), median norm ~1.3."""
    torch.manual_seed(0)
    seg, reg = torch.nn.Embedding(4, 8), torch.nn.Embedding(10, 8)
    mlp = torch.nn.Sequential(torch.nn.Linear(18, 32), torch.nn.ReLU(), torch.nn.Linear(32, CUT))
    num = torch.from_numpy(np.stack([cols["spend"][1], cols["age"][1]], 1)).float()
    with torch.no_grad():
        return mlp(
            torch.cat([seg(torch.from_numpy(cols["segment"][1])), reg(torch.from_numpy(cols["region"][1])), num], 1)
        )


def _leader_view(cut: torch.Tensor, eps: float | None, shrink: float = 1.0) -> np.ndarray:
    """What the leader holds after SENDS releases of every row, linked by row (the mean of its sends); `shrink`
    divides the calibrated noise std (a miscalibrated mechanism)."""
    rows = np.tile(np.arange(N), SENDS)
    if eps is None:
        sent = np.tile(cut.numpy(), (SENDS, 1))
    else:
        std = noise_std(calibrate_noise_multiplier(eps, 1e-5, SENDS), CLIP) / shrink
        gen = torch.Generator().manual_seed(7)
        sent = np.concatenate([noised_cut(cut, CLIP, std, gen).numpy() for _ in range(SENDS)])
    return link_sends(rows, sent, N)[0]


@pytest.fixture(scope="module")
def table_and_cut():
    cols = _follower_table()
    return cols, _bottom_cut(cols)


def test_a_follower_sending_its_raw_columns_is_read_back_almost_exactly(table_and_cut):
    # Prepare: the planted leak: the "cut" is the one-hot segment and the raw spend
    cols, _ = table_and_cut
    raw = np.hstack([np.eye(4)[cols["segment"][1]], cols["spend"][1][:, None]]).astype(np.float32)
    # Execute
    rep = attack_columns(_leader_view(torch.from_numpy(raw), None), cols, np.random.default_rng(3))
    # Assert
    assert rep["columns"]["segment"]["accuracy"] > 0.95
    assert rep["columns"]["spend"]["r2"] > 0.95


def test_without_embedding_dp_the_leader_decodes_the_followers_columns(table_and_cut):
    cols, cut = table_and_cut
    rep = attack_columns(_leader_view(cut, None), cols, np.random.default_rng(3))
    assert rep["strongest_categorical"]["advantage"] > 0.3
    assert rep["columns"]["spend"]["r2"] > 0.3


def test_at_embedding_eps_1_the_strongest_categorical_column_is_within_0_02_of_the_prior(table_and_cut):
    # Prepare
    cols, cut = table_and_cut
    # Execute: the same attack on the noised, clipped sends (sigma calibrated for eps 1 over 5 sends)
    rep = attack_columns(_leader_view(cut, 1.0), cols, np.random.default_rng(3))
    # Assert
    assert rep["strongest_categorical"]["advantage"] <= 0.02, rep
    assert all(r["r2"] < 0.02 for r in rep["columns"].values() if r["kind"] == "numeric"), rep


def test_the_eps_1_check_has_power_a_mechanism_with_a_thirtieth_of_the_noise_fails_it(table_and_cut):
    """Measured: advantage 0.18 at 1/30 of the noise (0.008 at 1/10): 0.02 sits between the two."""
    cols, cut = table_and_cut
    rep = attack_columns(_leader_view(cut, 1.0, shrink=30.0), cols, np.random.default_rng(3))
    assert rep["strongest_categorical"]["advantage"] > 0.02, rep


def test_identical_cuts_link_a_row_to_a_known_one_with_no_decoder():
    # Prepare: 10 distinct cuts over 1000 rows (a few inputs: identical cuts), 100 known
    cuts = np.repeat(np.arange(10, dtype=np.float32)[:, None], 100, axis=0)
    known = np.zeros(1000, bool)
    known[::10] = True
    # Execute / Assert: every other row equals some known row's cut; after fresh noise none does
    assert exact_linkage(cuts, known) == 1.0
    noisy = cuts + np.random.default_rng(0).normal(size=cuts.shape).astype(np.float32)
    assert exact_linkage(noisy, known) == 0.0


def test_an_unknown_column_kind_is_refused_naming_it():
    with pytest.raises(ValueError, match="kind must be"):
        attack_columns(np.zeros((50, 2)), {"c": ("text", np.zeros(50))}, np.random.default_rng(0))


def test_the_nonlinear_decoders_read_a_column_the_linear_one_cannot_and_missing_flags_are_attacked():
    """A column that is whether the 2-d cut lies inside the unit circle (no linear boundary reads it), and a numeric
    column missing exactly there: k-NN reads both (power over the linear decoder). 2,000 rows, 400 known, seeded; the
    accuracy's sd on 1,600 rows is < 0.012, so the 0.04 and 0.1 margins hold at > 3 sd."""
    # Prepare
    g = np.random.default_rng(4)
    cut = g.uniform(-2, 2, (2_000, 2))
    inside = (np.linalg.norm(cut, axis=1) < 1).astype(np.int64)
    columns = {"inside": ("categorical", inside), "value": ("numeric", np.where(inside == 1, np.nan, cut[:, 0]))}
    # Execute
    linear = attack_columns(cut, columns, np.random.default_rng(0), known_fraction=0.2)
    strong = attack_columns(cut, columns, np.random.default_rng(0), known_fraction=0.2, decoders=("linear", "knn"))
    # Assert: the linear decoder stays near the prior; k-NN reads the circle and the missing flag
    ring = linear["columns"]["inside"]
    assert ring["accuracy"] < ring["prior"] + 0.04
    assert (
        strong["columns"]["inside"]["accuracy"] > ring["prior"] + 0.1
        and strong["columns"]["inside"]["decoder"] == "knn"
    )
    assert strong["columns"]["value:missing"]["accuracy"] > strong["columns"]["value:missing"]["prior"] + 0.1
    with pytest.raises(ValueError, match="decoders must be a non-empty subset"):
        attack_columns(cut, columns, np.random.default_rng(0), decoders=("forest",))
