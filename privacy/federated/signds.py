"""SignDS: sign-based dimension selection for federated updates under local DP.

Jiang, Zhou, Grossklags, "SignDS-FL: Local Differentially Private Federated Learning with
Sign-based Dimension Selection", ACM TIST 2022 (the exponential-mechanism dimension selection of
their Sec. 4, as deployed in MindSpore Federated). Client side:
  1. flatten the update (w_new - w_old) to dimension d; k = floor(sign_k * d);
  2. sign = +1 or -1 with probability 1/2; the top-k set S holds the k largest entries for +1,
     the k smallest for -1;
  3. an output J of h indices with v = |J n S| has weight omega(v) = C(k, v) C(d-k, h-v) (how
     many such J exist), computed in log space;
  4. pmf_t(v) ~ omega(v) exp(eps * 1[v >= t]) for v = 0..h (exponential mechanism with a 0/1
     utility of sensitivity 1: the normaliser depends only on (d, k, h), so any J's probability
     changes by at most e^eps between two top-k sets: eps-LDP);
  5. the threshold t* is the first t at which E_t[v] stops increasing;
  6. with sign_dim_out = 0, h* is the largest h whose E_{t*}[v] / h >= sign_thr_ratio, else
     h = sign_dim_out;
  7. sample v ~ pmf_{t*}, then v indices uniformly from S and h - v from the rest, shuffled;
  8. upload (indices, sign): h + 1 numbers instead of d floats.
Server: each client's update is rebuilt as g * sign on its indices; the updates are averaged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from privacy.domains import Params
from privacy.field_types import Number
from privacy.label.randomized_response import check_eps

MAX_DIM_OUT = 50


class SignDSParams(Params):
    """sign_k in (0, 0.25], sign_eps in (0, 100], sign_thr_ratio in [0.5, 1], sign_global_lr > 0,
    sign_dim_out an integer in [0, 50] (MindSpore Federated's domains)."""

    sign_k: Number(0, 0.25, lo_open=True) = 0.01
    sign_eps: Number(0, 100, lo_open=True) = 100.0
    sign_thr_ratio: Number(0.5, 1) = 0.6
    sign_global_lr: Number(0, lo_open=True) = 0.1
    sign_dim_out: Number(0, MAX_DIM_OUT, integer=True) = 0


def _log_comb(n: int, r: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln  # imported on use: configs import this module for its parameter schema

    return gammaln(n + 1) - gammaln(r + 1) - gammaln(n - r + 1)


def log_omega(d: int, k: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    """(v values, log C(k, v) C(d-k, h-v)) over the feasible v in 0..h."""
    v = np.arange(max(0, h - (d - k)), min(h, k) + 1)
    return v, _log_comb(k, v) + _log_comb(d - k, h - v)


def expectations(d: int, k: int, h: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(thresholds t = 0..h+1, E_t[v]) for every threshold at once, via cumulative sums."""
    v, lw = log_omega(d, k, h)
    w = np.exp(lw - lw.max())
    ev = math.exp(eps) if eps < 700 else math.inf
    t = np.arange(0, h + 2)
    # masses below / at-or-above t (v is contiguous, so index with searchsorted)
    idx = np.searchsorted(v, t)
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cvw = np.concatenate([[0.0], np.cumsum(v * w)])
    below_w, below_vw = cw[idx], cvw[idx]
    above_w, above_vw = cw[-1] - below_w, cvw[-1] - below_vw
    if math.isinf(ev):
        e = np.where(above_w > 0, above_vw / np.where(above_w > 0, above_w, 1), below_vw / np.maximum(below_w, 1e-300))
    else:
        e = (below_vw + ev * above_vw) / (below_w + ev * above_w)
    return t, e


def optimal_threshold(d: int, k: int, h: int, eps: float) -> tuple[int, float]:
    """t* = the first t at which E_t[v] stops increasing, and E_{t*}[v]."""
    t, e = expectations(d, k, h, eps)
    for i in range(len(t) - 1):
        if e[i + 1] <= e[i]:
            return int(t[i]), float(e[i])
    return int(t[-1]), float(e[-1])


@lru_cache(maxsize=256)
def choose_dim_out(d: int, k: int, eps: float, thr_ratio: float, h_max: int = 5000) -> tuple[int, int]:
    """(h*, t*): the largest h (scanning up from 1) with E_{t*}[v] / h >= thr_ratio."""
    best = None
    for h in range(1, min(h_max, d) + 1):
        t_star, e = optimal_threshold(d, k, h, eps)
        if e / h >= thr_ratio:
            best = (h, t_star)
        else:
            break
    if best is None:
        t_star, _ = optimal_threshold(d, k, 1, eps)
        best = (1, t_star)
    return best


def selection_pmf(d: int, k: int, h: int, eps: float, t: int) -> tuple[np.ndarray, np.ndarray]:
    """(v values, P(v)) with P(v) ~ omega(v) exp(eps 1[v >= t])."""
    v, lw = log_omega(d, k, h)
    logits = lw + eps * (v >= t)
    p = np.exp(logits - logits.max())
    return v, p / p.sum()


@dataclass
class SignDSUpload:
    """What a client sends: h indices and one sign (plus the top-k magnitude, kept client-side for MagRR)."""

    indices: np.ndarray
    sign: int
    topk_mean_abs: float

    @property
    def upload_numbers(self) -> int:
        return int(self.indices.size) + 1


def signds_client(update: np.ndarray, params: SignDSParams, rng: np.random.Generator) -> SignDSUpload:
    """Steps 1-8 above for one flattened update."""
    flat = np.asarray(update, dtype=np.float64).reshape(-1)
    d = flat.size
    k = int(math.floor(params.sign_k * d))
    if k < 1:
        raise ValueError(f"sign_k * d = {params.sign_k} * {d} < 1: the top-k set would be empty")
    eps = check_eps(params.sign_eps)
    sign = 1 if rng.random() < 0.5 else -1
    order = np.argpartition(-sign * flat, k - 1)
    topk, rest = order[:k], order[k:]
    if params.sign_dim_out == 0:
        h, t = choose_dim_out(d, k, eps, float(params.sign_thr_ratio))
    else:
        h = params.sign_dim_out
        t, _ = optimal_threshold(d, k, h, eps)
    v_values, pmf = selection_pmf(d, k, h, eps, t)
    v = int(rng.choice(v_values, p=pmf))
    chosen = np.concatenate([rng.choice(topk, size=v, replace=False), rng.choice(rest, size=h - v, replace=False)])
    rng.shuffle(chosen)
    return SignDSUpload(indices=chosen.astype(np.int64), sign=sign, topk_mean_abs=float(np.mean(np.abs(flat[topk]))))


def signds_aggregate(uploads: list[tuple[np.ndarray, int]], d: int, global_lr: float) -> np.ndarray:
    """Server: mean over clients of global_lr * sign on each client's indices."""
    total = np.zeros(d)
    for indices, sign in uploads:
        np.add.at(total, indices, float(sign))
    return global_lr * total / max(len(uploads), 1)


def signds_cost(params: SignDSParams) -> dict:
    """One SignDS report is sign_eps-LDP for the client's update (delta = 0)."""
    return {"eps": float(params.sign_eps), "delta": 0.0}
