"""What a curious follower recovers of the true labels with its full view.

Its full view: the recorded gradients, its own config and seed, the sample ids, and every public seed, salt and
generator in this code.

The attack (the strongest the code allows a follower, as the threat model demands):
1. Noisy label from the gradient: for BCE the cut gradient is (p - y~) * J, so within a step the
   minority sign of the first cut coordinate marks the positives (the rarer class); no label needed.
2. Replay: XOR that with every flip pattern the follower can recompute. Before the leader's secret
   PRF existed, flips were `uniform_from_ids(ids, train.seed, 0x1AB1) < rho`; the follower also
   tries the other public salts, seeds and seeded generators (`LEGACY_SALTS`, `candidate_seeds`).
3. Vote over epochs: a label re-randomized per epoch is recovered by majority; one drawn once per
   release is not (every epoch repeats the same noisy label).
4. Two releases: where two releases of one dataset disagree, take the higher-eps label.
The scorer (tests, `python -m privacy.attacks --follower-seed`) grants the attacker the best of all
candidates by balanced accuracy against the true labels; under a correct eps-label-DP release none
can exceed 1 - rho beyond sampling error (see `balanced_accuracy`).
"""

from __future__ import annotations

import math

import numpy as np

from privacy.label.randomized_response import flip_probability
from privacy.public_hash import uniform_from_ids

# Every public salt this code base has used for per-id draws: the pre-PRF label-DP salts (flip,
# LP-2ST stage, keep, pick), prepare's split and drop salts, and 0.
LEGACY_SALTS = (0x1AB1, 0x1AB2, 0x1AB3, 0x1AB4, 0x5B1175, 0xD0D0, 0)


def candidate_seeds(follower_seed: int, extra: tuple[int, ...] = ()) -> list[int]:
    """Seeds a follower can name: its own train.seed (equal to the leader's), common defaults, and any extra."""
    seeds = [follower_seed, 0, 1, 42, 1234, follower_seed ^ 0x5EED, *extra]
    return list(dict.fromkeys(int(s) for s in seeds))


def replay_flips(ids: np.ndarray, rows: np.ndarray, eps: float, seeds: list[int]) -> dict[str, np.ndarray]:
    """Every flip pattern a follower can recompute: name -> bool flips per sample (aligned with ids).
    `rows` is each sample's position in the sorted train split (for generators drawn in row order)."""
    import torch

    rho = flip_probability(eps)
    n_rows = int(rows.max()) + 1 if rows.size else 0
    out: dict[str, np.ndarray] = {}
    for seed in seeds:
        for salt in LEGACY_SALTS:
            out[f"uniform_from_ids(seed={seed}, salt={salt:#x})"] = uniform_from_ids(ids, seed, salt) < rho
        out[f"numpy.default_rng({seed}) in row order"] = np.random.default_rng(seed).random(n_rows)[rows] < rho
        gen = torch.Generator().manual_seed(seed)
        out[f"torch.Generator({seed}) in row order"] = (
            torch.rand(n_rows, generator=gen, dtype=torch.float64).numpy()[rows] < rho
        )
    return out


def noisy_labels_from_gradients(grad: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per sample, 1 where the first cut coordinate's gradient has the step's minority sign."""
    sign = np.sign(grad[:, 0])
    out = np.zeros(grad.shape[0], dtype=np.int64)
    for s in np.unique(steps):
        rows = np.flatnonzero(steps == s)
        pos = sign[rows] > 0
        minority = pos if pos.mean() < 0.5 else ~pos
        out[rows] = minority
    return out


def per_epoch_guesses(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(ids sorted, guesses (epochs, n)): each epoch's gradient-sign label of every recorded sample."""
    ids = np.unique(record["ids"])
    epochs = np.unique(record["epoch"])
    guesses = np.zeros((epochs.size, ids.size), dtype=np.int64)
    for e_i, e in enumerate(epochs):
        m = record["epoch"] == e
        g = noisy_labels_from_gradients(record["grad"][m], record["step"][m])
        guesses[e_i, np.searchsorted(ids, record["ids"][m])] = g
    return ids, guesses


def follower_view_attack(
    record: dict, train_ids: np.ndarray, eps: float, follower_seed: int, extra_seeds: tuple[int, ...] = ()
) -> dict[str, np.ndarray]:
    """Every label guess the follower can make, by name (ids in sorted order, see per_epoch_guesses)."""
    ids, guesses = per_epoch_guesses(record)
    rows = np.searchsorted(np.sort(train_ids), ids)
    first = guesses[0]
    vote = (guesses.mean(axis=0) > 0.5).astype(np.int64)
    out = {"gradient sign (epoch 0)": first, "majority vote over epochs": vote}
    for name, flips in replay_flips(ids, rows, eps, candidate_seeds(follower_seed, extra_seeds)).items():
        out[f"replay {name}"] = first ^ flips
        out[f"replay {name} + vote"] = vote ^ flips
    return out


def balanced_accuracy(guess: np.ndarray, truth: np.ndarray) -> float:
    """(TPR + TNR) / 2 with the better polarity. Unlike plain accuracy it ignores the base rate (always
    guessing 0 scores 0.5, not the share of negatives), and for any guess computed from one
    eps-label-DP release alone it is at most 1 - rho = e^eps / (1 + e^eps): eps-DP bounds every test by
    FNR + e^eps FPR >= 1 and FPR + e^eps FNR >= 1 (Kairouz, Oh, Viswanath 2015, Theorem 2.1)."""
    pos, neg = truth == 1, truth == 0
    if not pos.any() or not neg.any():
        return math.nan
    b = 0.5 * (float(np.mean(guess[pos] == 1)) + float(np.mean(guess[neg] == 0)))
    return max(b, 1.0 - b)


def best_accuracy(guesses: dict[str, np.ndarray], truth: np.ndarray) -> tuple[str, float]:
    """The scorer's view: the best guess by balanced accuracy against the true labels (either polarity)."""
    best = ("", -1.0)
    for name, g in guesses.items():
        acc = balanced_accuracy(g, truth)
        if acc > best[1]:
            best = (name, acc)
    return best


def release_difference_accuracy(noisy_low: np.ndarray, noisy_high: np.ndarray, truth: np.ndarray) -> tuple[float, int]:
    """Accuracy of the higher-eps release's label on the rows where two releases disagree, and their count."""
    d = noisy_low != noisy_high
    return (float(np.mean(noisy_high[d] == truth[d])) if d.any() else math.nan), int(d.sum())


def independent_disagreement_accuracy(eps_low: float, eps_high: float) -> float:
    """What independent draws allow: P(high label right | the two disagree) = (1-r2) r1 / ((1-r2) r1 + r2 (1-r1))."""
    r1, r2 = flip_probability(eps_low), flip_probability(eps_high)
    return (1 - r2) * r1 / ((1 - r2) * r1 + r2 * (1 - r1))
