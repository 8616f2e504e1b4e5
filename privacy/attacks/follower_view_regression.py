"""What a curious follower recovers of real-valued labels with its full view.

Its full view: every cut gradient it received, its config and seed, the sample ids, eps and the clip (not secrets), and
every public seed and salt in this code.

The attack (regression counterpart of privacy/attacks/follower_view.py):
1. Noisy label from the gradient: with squared loss and a linear top, a row's cut gradient is
   (2 / B) (prediction - y~_std) w, with w the top's weights on this follower's cut, the same for the whole batch.
   The batch's gradients are rank one: their top singular vector is +-w, and each row's projection on it is the
   residual (prediction - y~) up to the batch's scale, standardized per batch. The sign of w is tracked from batch to
   batch (w moves slowly), and one global sign is left to the scorer.
2. Vote over epochs: each sample's residual averaged over every epoch it was seen in. A label drawn once per
   release gives the same y~ in every epoch (nothing to average away); one re-drawn per epoch averages towards y.
3. Replay: every uniform a public source gives (`public_uniforms`: uniform_from_ids at each candidate seed and salt,
   numpy, torch and Python generators seeded by each candidate seed, in row order, blocked or interleaved), as the
   discrete Laplace noise it would draw (a source's streams together: the right pair cancels the noise exactly) and,
   given the release's channel, as the pick uniform of RR-on-Bins or the unbiased randomizer (the posterior mean of
   the label over the grid rows whose inverse CDF at that uniform gives the output drawn). The replay is granted the
   noisy label itself, the most step 1 can recover.
The scorer grants the attacker an oracle calibration: the least-squares affine map from its scores (and a replayed
noise or posterior) to the true labels; the mechanism's own output y~ gets the same. Under a correct eps-label-DP release, no
candidate's calibrated mean absolute error is below y~'s beyond sampling error (`excess`, paired over samples).
"""

from __future__ import annotations

import math

import numpy as np

from privacy.attacks.follower_view import LEGACY_SALTS, candidate_seeds
from privacy.label.regression_mechanisms import laplace_alpha
from privacy.public_hash import uniform_from_ids

STREAMS = 3  # uniform arrays a leader draws per sample at most (laplace: rounding, two geometrics)
GENERATORS = (
    "numpy.default_rng",
    "numpy.random.RandomState",
    "torch.Generator float32",
    "torch.Generator float64",
    "random.Random",
)


def residual_scores(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(ids, residual per id averaged over epochs): step 1 and 2 of the module docstring."""
    ids, grad = np.asarray(record["ids"]), np.asarray(record["grad"], np.float64)
    batch = np.asarray(record["epoch"]).astype(np.int64) * (1 << 32) + np.asarray(record["step"]).astype(np.int64)
    order = np.argsort(batch, kind="stable")
    score = np.zeros(ids.size)
    ref = None
    cuts = np.flatnonzero(np.diff(batch[order])) + 1
    for rows in np.split(order, cuts):
        g = grad[rows]
        _, _, vt = np.linalg.svd(g - 0.0, full_matrices=False)
        v = vt[0]
        if ref is not None and v @ ref < 0:
            v = -v
        ref = v
        s = g @ v
        score[rows] = (s - s.mean()) / (s.std() or 1.0)
    uniq, inverse = np.unique(ids, return_inverse=True)
    votes = np.bincount(inverse, weights=score) / np.bincount(inverse)
    return uniq, votes


def _generator_blocks(name: str, seed: int, n: int) -> np.ndarray:
    """STREAMS x n uniforms a leader would draw from a seeded public generator: STREAMS arrays of n drawn one after
    the other (rng.random((3, n)) or three rng.random(n))."""
    import random

    import torch

    total = STREAMS * n
    if name == "numpy.default_rng":
        u = np.random.default_rng(seed).random(total)
    elif name == "numpy.random.RandomState":
        u = np.random.RandomState(seed).random_sample(total)
    elif name == "random.Random":
        r = random.Random(seed)
        u = np.array([r.random() for _ in range(total)])
    else:  # torch.Generator, float32 (torch.rand's default) or float64
        dtype = torch.float32 if name.endswith("float32") else torch.float64
        u = torch.rand(total, generator=torch.Generator().manual_seed(seed), dtype=dtype).numpy()
    return np.asarray(u, np.float64).reshape(STREAMS, n)


def public_uniforms(seen: np.ndarray, rows: np.ndarray, n_rows: int, seeds: list[int]) -> dict[str, dict]:
    """Every public uniform stream a leader could have drawn its noise from, per seen sample: source -> {stream ->
    uniforms}. Sources: uniform_from_ids at each candidate seed and every salt in LEGACY_SALTS; numpy's default_rng
    and RandomState, torch's Generator (float32 and float64) and Python's random.Random seeded by each candidate
    seed, drawn over the labelled split's rows in order (`rows`: each seen sample's row; ascending ids, as PSI leaves
    them), STREAMS arrays one after the other or interleaved per row (rng.random((n, 3)))."""
    out: dict[str, dict] = {}
    for seed in seeds:
        out[f"uniform_from_ids(seed={seed})"] = {f"salt {s:#x}": uniform_from_ids(seen, seed, s) for s in LEGACY_SALTS}
        for gen in GENERATORS:
            blocks = _generator_blocks(gen, seed, n_rows)
            streams = {f"stream {k} of {STREAMS} in row order": blocks[k][rows] for k in range(STREAMS)}
            interleaved = blocks.reshape(n_rows, STREAMS)
            streams.update({f"column {k} of (rows, {STREAMS})": interleaved[rows, k] for k in range(STREAMS)})
            out[f"{gen}({seed})"] = streams
    return out


def geometric_of(u: np.ndarray, eps: float) -> np.ndarray | None:
    """The one-sided geometric draw floor(ln(1 - u) / ln(alpha)) the discrete Laplace makes of a uniform (None at
    eps = inf)."""
    a = laplace_alpha(eps)
    return None if a == 0.0 else np.floor(np.log1p(-np.clip(u, 0.0, 1.0 - 2**-53)) / math.log(a))


def channel_posterior_mean(u: np.ndarray, noisy: np.ndarray, design: dict) -> np.ndarray:
    """E[row value | the output drawn, the pick uniform u] under a uniform prior over the channel's rows: the rows
    whose inverse CDF at u gives the output drawn (privacy/label/regression_mechanisms.py: sample_channel). With the
    right u this narrows the label to a few grid points; with another it is noise."""
    values, outputs, channel = (np.asarray(design[k], np.float64) for k in ("values", "outputs", "channel"))
    order = np.argsort(outputs)
    near = np.clip(np.searchsorted(outputs[order], noisy), 1, outputs.size - 1)
    left, right = outputs[order][near - 1], outputs[order][near]
    drawn = order[np.where(np.abs(noisy - left) <= np.abs(noisy - right), near - 1, near)]  # the output drawn
    cdf = np.cumsum(channel, axis=1)
    by_u = np.argsort(u)  # sorted keys make searchsorted ~10x faster
    u_sorted, drawn_sorted = u[by_u], drawn[by_u]
    total, weight = np.zeros(u.size), np.zeros(u.size)
    for r in range(values.size):
        hit = np.minimum(np.searchsorted(cdf[r], u_sorted, side="right"), outputs.size - 1) == drawn_sorted
        total += hit * values[r]
        weight += hit
    out = np.empty(u.size)
    out[by_u] = np.where(weight > 0, total / np.maximum(weight, 1.0), values.mean())
    return out


def calibrated_abs_errors(truth: np.ndarray, *regressors: np.ndarray) -> np.ndarray:
    """|y - (a + sum b_k x_k)| with the least-squares a, b (the oracle calibration)."""
    x = np.column_stack([np.ones(truth.size), *regressors])
    coef, *_ = np.linalg.lstsq(x.T @ x, x.T @ truth, rcond=None)  # the normal equations: a few columns, many rows
    return np.abs(truth - x @ coef)


def follower_view_regression(
    record: dict,
    ids: np.ndarray,
    truth: np.ndarray,
    noisy: np.ndarray,
    eps: float,
    clip,
    follower_seed: int,
    design: dict | None = None,
) -> dict:
    """The best candidate against the mechanism's own output: excess = mean(|err_attack| - |err_y~|) (negative:
    closer to the truth than y~), with its standard error, over the samples the follower saw.

    Replays (step 3) are granted the noisy label itself (what step 1 recovers): for every public source, the
    discrete Laplace noise its streams would give (all of a source's streams as regressors, so the pair that drew
    the noise cancels it), and with `design` ({values, outputs, channel} of an RR-on-Bins or unbiased release, at
    the randomizer's eps) the posterior mean of the label given each stream as the pick uniform."""
    seen, votes = residual_scores(record)
    ids = np.asarray(ids)
    at = np.searchsorted(ids, seen)
    if not np.array_equal(ids[np.minimum(at, ids.size - 1)], seen):
        raise ValueError("the record holds ids outside the labelled split")
    y, y_noisy = np.asarray(truth, np.float64)[at], np.asarray(noisy, np.float64)[at]
    base = calibrated_abs_errors(y, y_noisy)
    candidates = {"gradient residual (voted over epochs)": (votes,)}
    for source, streams in public_uniforms(seen, at, ids.size, candidate_seeds(follower_seed)).items():
        geometric = [g for g in (geometric_of(u, eps) for u in streams.values()) if g is not None]
        if geometric:
            candidates[f"y~ + laplace noise replayed from {source}"] = (y_noisy, *geometric)
        if design is not None:
            for stream, u in streams.items():
                posterior = channel_posterior_mean(u, y_noisy, design)
                candidates[f"y~ + posterior given the pick from {source} {stream}"] = (y_noisy, posterior)
    best = None
    for name, regs in candidates.items():
        d = calibrated_abs_errors(y, *regs) - base
        excess, se = float(d.mean()), float(d.std() / math.sqrt(d.size))
        if best is None or excess < best["excess"]:
            best = {"best": name, "excess": excess, "excess_se": se}
    return {
        **best,
        "noisy_mae": float(base.mean()),
        "candidates": len(candidates),
        "rows": int(seen.size),
        # how well step 1 recovers the noisy label: |corr(voted residual, y~)| (1 when the prediction is constant)
        "noisy_label_correlation": float(abs(np.corrcoef(votes, y_noisy)[0, 1])),
    }
