"""The follower's full-view attack on a K-class label, replayed against k-ary randomized response.

Its view: its recorded gradients plus every public seed, salt and generator in this code.

1. Noisy class from the gradient: the oracle direction attack of privacy/attacks/gradient_multiclass.py (the
   attacker is even granted the true class means of the gradients).
2. Replay: k-ary RR keeps y~ when u_keep < p1, else moves the class by 1 + floor(u_other (K-1)).
   With uniforms a follower could recompute (public `uniform_from_ids` salts and seeds, seeded numpy
   and torch generators drawn in row order as `kary_rr(rng=...)` would), the move is undone:
   y = y~ if u_keep < p1 else y~ - shift (mod K). Against the leader's keyed PRF none of these match.
3. Scoring: macro recall (the mean over classes of P(guess = c | y = c)), granted the best candidate.
   For any guess computed from one eps-label-DP release it is at most p1 = e^eps/(K-1+e^eps): with A_c
   the outputs guessed as c, eps-DP gives P_c(A_c) <= e^eps P_j(A_c) for every j != c; summing over j and
   c, (K-1) S <= e^eps (K - S) for S = sum_c P_c(A_c), so S / K <= p1 (the K-ary form of the binary
   balanced-accuracy bound in privacy/attacks/follower_view.py).
"""

from __future__ import annotations

import math

import numpy as np

from privacy.attacks.follower_view import LEGACY_SALTS, candidate_seeds
from privacy.attacks.gradient_multiclass import oracle_direction_guess
from privacy.label.randomized_response import keep_probability
from privacy.public_hash import uniform_from_ids


def undo_kary_rr(noisy: np.ndarray, k: int, eps: float, u_keep: np.ndarray, u_other: np.ndarray) -> np.ndarray:
    """The true class k-ary RR started from, if these were its uniforms."""
    shift = 1 + np.minimum((np.asarray(u_other) * (k - 1)).astype(np.int64), k - 2)
    return np.where(np.asarray(u_keep) < keep_probability(eps, k), noisy, (noisy - shift) % k)


def replay_uniforms(ids: np.ndarray, rows: np.ndarray, seeds: list[int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every (u_keep, u_other) pair a follower can recompute, by name."""
    import torch

    n_rows = int(rows.max()) + 1 if rows.size else 0
    out = {}
    for seed in seeds:
        u = {salt: uniform_from_ids(ids, seed, salt) for salt in LEGACY_SALTS}
        for a in LEGACY_SALTS:
            for b in LEGACY_SALTS:
                if a != b:
                    out[f"uniform_from_ids(seed={seed}, salts={a:#x}/{b:#x})"] = (u[a], u[b])
        rng = np.random.default_rng(seed)
        keep, other = rng.random(n_rows), rng.random(n_rows)
        out[f"numpy.default_rng({seed}) in row order"] = (keep[rows], other[rows])
        gen = torch.Generator().manual_seed(seed)
        keep_t = torch.rand(n_rows, generator=gen, dtype=torch.float64).numpy()
        other_t = torch.rand(n_rows, generator=gen, dtype=torch.float64).numpy()
        out[f"torch.Generator({seed}) in row order"] = (keep_t[rows], other_t[rows])
    return out


def macro_recall(guess: np.ndarray, truth: np.ndarray, k: int) -> float:
    """Mean over the classes present of P(guess = c | y = c); <= p1 for a guess from one k-ary RR release."""
    recalls = [float(np.mean(guess[truth == c] == c)) for c in range(k) if np.any(truth == c)]
    return float(np.mean(recalls)) if recalls else math.nan


def follower_view_attack_multiclass(
    record: dict, train_ids: np.ndarray, truth_of_record: np.ndarray, k: int, eps: float, follower_seed: int
) -> dict[str, np.ndarray]:
    """Every class guess for the samples of the first recorded epoch, by name. truth_of_record (the
    true class of each recorded row) only names the gradient directions, as the oracle attack does."""
    first = record["epoch"] == np.min(record["epoch"])
    ids = record["ids"][first]
    noisy = oracle_direction_guess(record["grad"][first], truth_of_record[first], k)
    rows = np.searchsorted(np.sort(train_ids), ids)
    out = {"gradient direction (epoch 0)": noisy}
    for name, (u_keep, u_other) in replay_uniforms(ids, rows, candidate_seeds(follower_seed)).items():
        out[f"replay {name}"] = undo_kary_rr(noisy, k, eps, u_keep, u_other)
    return out
