"""Validation metrics from randomized labels: what model selection may look at under label DP.

Early stopping that reads true validation labels would let the stopping step (which followers see)
depend on them. These estimators read only the randomized labels y~ (binary RR with flip rate rho)
and public eps, so everything chosen from them is post-processing of the release.

* Class prior: E[y~] = rho + (1 - 2 rho) pi, so pi^ = (mean(y~) - rho) / (1 - 2 rho).
* AUC: with a = P(y=1 | y~=1) and b = P(y=1 | y~=0) (Bayes' rule with pi^), the noisy AUC mixes the
  true AUC over the four label pairs: AUC~ - 1/2 = (a - b)(AUC - 1/2), so
  AUC^ = 1/2 + (AUC~ - 1/2) / (a - b). Its standard error is Hanley & McNeil's (1982, Eq. 2) on the
  noisy labels, divided by (a - b).
* Logloss: the unbiased surrogate of Natarajan et al. 2013 ("Learning with Noisy Labels", Lemma 1)
  with symmetric noise, l^(p, y~) = ((1 - rho) l(p, y~) - rho l(p, 1 - y~)) / (1 - 2 rho), whose
  expectation over the flip is the true logloss.

K classes under k-ary RR (keep p1 = e^eps/(K-1+e^eps), move to each other class with q = (1-p1)/(K-1)):
* Accuracy is affine in the true one: acc~ = p1 acc + q (1 - acc), so acc^ = (acc~ - q) / (p1 - q).
* Class priors: E[freq~_c] = q + (p1 - q) pi_c, so pi^_c = (freq~_c - q) / (p1 - q).
* One-vs-rest AUC of class c: the binary argument holds for any label channel that is independent
  of the features given the label, with a = P(y=c | y~=c) = pi p1 / (pi p1 + (1-pi) q) and
  b = P(y=c | y~!=c) = pi (1-p1) / (pi (1-p1) + (1-pi)(1-q)); the macro AUC averages the per-class
  estimates, each clipped to [0, 1] (with few rows a class's plug-in prior can be ~0, and a - b with it).
* Cross-entropy: the backward-corrected loss of Patrini et al. 2017 ("Making Deep Neural Networks
  Robust to Label Noise: a Loss Correction Approach", Theorem 1), l^(p, y~) = (T^-1 l(p))_{y~} with
  T the k-ary RR channel, is unbiased for the true-label loss.
"""

from __future__ import annotations

import math

import numpy as np

from privacy.label.randomized_response import flip_probability, kary_transition, keep_probability
from privacy.rank_metrics import roc_auc

_CLIP = 1e-7


def class_prior_from_noisy(noisy: np.ndarray, eps: float) -> float:
    """pi^ = (mean(y~) - rho) / (1 - 2 rho), clipped to [1e-6, 1 - 1e-6]; ValueError at eps = 0."""
    rho = flip_probability(eps)
    if rho == 0.5:
        raise ValueError("eps = 0: randomized labels carry no information about the class prior")
    noisy = np.asarray(noisy, dtype=np.float64)
    if noisy.size == 0:
        raise ValueError("no labels to estimate the class prior from")
    pi = (noisy.mean() - rho) / (1.0 - 2.0 * rho)
    return float(min(max(pi, 1e-6), 1.0 - 1e-6))


def posterior_rates(pi: float, eps: float) -> tuple[float, float]:
    """(a, b) = (P(y=1 | y~=1), P(y=1 | y~=0)) for class prior pi and flip rate rho(eps)."""
    rho = flip_probability(eps)
    a = pi * (1 - rho) / (pi * (1 - rho) + (1 - pi) * rho)
    b = pi * rho / (pi * rho + (1 - pi) * (1 - rho))
    return a, b


def auc_standard_error(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley & McNeil (1982), Eq. 2: the standard error of an empirical AUC."""
    if n_pos == 0 or n_neg == 0:
        return math.nan
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))


def debiased_logloss(noisy: np.ndarray, probs: np.ndarray, eps: float) -> float:
    """Natarajan et al. 2013, Lemma 1: an unbiased estimate of the true-label logloss from y~."""
    rho = flip_probability(eps)
    p = np.clip(np.asarray(probs, dtype=np.float64), _CLIP, 1 - _CLIP)
    y = np.asarray(noisy, dtype=np.float64)
    loss_y = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    loss_flip = -((1 - y) * np.log(p) + y * np.log1p(-p))
    return float(np.mean(((1 - rho) * loss_y - rho * loss_flip) / (1 - 2 * rho)))


def noisy_validation_metrics(noisy: np.ndarray, probs: np.ndarray, eps: float | None) -> dict:
    """Noisy AUC/logloss and their debiased estimates (with a 95% interval for the AUC).
    eps None (no label DP): the labels are the true ones and the estimates equal the plain metrics."""
    y = np.asarray(noisy, dtype=np.int64)
    p = np.clip(np.asarray(probs, dtype=np.float64), _CLIP, 1 - _CLIP)
    n_pos, n_neg = int(y.sum()), int(y.size - y.sum())
    auc_noisy = roc_auc(y, p) if n_pos and n_neg else math.nan
    ll_noisy = float(np.mean(-(y * np.log(p) + (1 - y) * np.log1p(-p)))) if y.size else math.nan
    se = auc_standard_error(auc_noisy, n_pos, n_neg) if not math.isnan(auc_noisy) else math.nan
    if eps is None or math.isinf(eps):
        auc, ll, scale, pi = auc_noisy, ll_noisy, 1.0, (y.mean() if y.size else math.nan)
    else:
        pi = class_prior_from_noisy(y, eps)
        a, b = posterior_rates(pi, eps)
        scale = a - b
        auc = 0.5 + (auc_noisy - 0.5) / scale
        ll = debiased_logloss(y, p, eps)
    half = 1.96 * se / scale if not math.isnan(se) else math.nan
    return {
        "auc_noisy": auc_noisy,
        "auc": auc,
        "auc_ci95": [auc - half, auc + half],
        "logloss_noisy": ll_noisy,
        "logloss": ll,
        "class_prior": float(pi),
        "rows": int(y.size),
    }


def _per_class_auc(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """One-vs-rest AUC per class; NaN for a class with one outcome only."""
    out = np.full(p.shape[1], math.nan)
    for c in range(p.shape[1]):
        pos = int(np.sum(y == c))
        if 0 < pos < y.size:
            out[c] = roc_auc(y == c, p[:, c])
    return out


def debiased_multiclass_logloss(noisy: np.ndarray, probs: np.ndarray, eps: float, k: int) -> float:
    """Patrini et al. 2017, Theorem 1 (backward correction): mean of (T^-1 l(p))_{y~}, unbiased for the true logloss."""
    t_inv = np.linalg.inv(kary_transition(k, eps))
    losses = -np.log(np.clip(np.asarray(probs, dtype=np.float64), _CLIP, 1.0))  # (n, K): l(p, j)
    corrected = losses @ t_inv.T  # [n, i] = sum_j T^-1[i, j] l(p_n, j)
    y = np.asarray(noisy, dtype=np.int64)
    return float(np.mean(corrected[np.arange(y.size), y]))


def noisy_multiclass_validation_metrics(noisy: np.ndarray, probs: np.ndarray, eps: float | None, k: int) -> dict:
    """Accuracy, macro one-vs-rest AUC and cross-entropy on K-class randomized labels, and their debiased
    estimates. eps None (no label DP): the labels are the true ones and the estimates equal the plain metrics."""
    y = np.asarray(noisy, dtype=np.int64)
    p = np.clip(np.asarray(probs, dtype=np.float64), _CLIP, 1.0)
    p = p / p.sum(axis=1, keepdims=True)
    n = y.size
    acc_noisy = float(np.mean(np.argmax(p, axis=1) == y)) if n else math.nan
    auc_c = _per_class_auc(y, p)
    auc_noisy = float(np.nanmean(auc_c)) if np.isfinite(auc_c).any() else math.nan
    ll_noisy = float(np.mean(-np.log(p[np.arange(n), y]))) if n else math.nan
    freq = np.bincount(y, minlength=k) / max(n, 1)
    acc_se = math.sqrt(acc_noisy * (1 - acc_noisy) / n) if n else math.nan  # binomial standard error
    if eps is None or math.isinf(eps):
        return {
            "accuracy_noisy": acc_noisy,
            "accuracy": acc_noisy,
            "accuracy_ci95": [acc_noisy - 1.96 * acc_se, acc_noisy + 1.96 * acc_se],
            "auc_noisy": auc_noisy,
            "auc": auc_noisy,
            "logloss_noisy": ll_noisy,
            "logloss": ll_noisy,
            "class_prior": freq.tolist(),
            "rows": int(n),
        }
    p1 = keep_probability(eps, k)
    q = (1.0 - p1) / (k - 1)
    if p1 - q <= 0:
        raise ValueError("eps = 0: k-ary randomized labels carry no information about the classes")
    pi = np.clip((freq - q) / (p1 - q), 1e-6, 1.0 - 1e-6)
    a = pi * p1 / (pi * p1 + (1 - pi) * q)
    b = pi * (1 - p1) / (pi * (1 - p1) + (1 - pi) * (1 - q))
    # clipped to [0, 1]: a class whose estimated prior is near 0 (few rows, small eps) has a - b near 0
    auc_hat = np.clip(0.5 + (auc_c - 0.5) / np.maximum(a - b, 1e-12), 0.0, 1.0)
    return {
        "accuracy_noisy": acc_noisy,
        "accuracy": (acc_noisy - q) / (p1 - q),
        "accuracy_ci95": [
            (acc_noisy - 1.96 * acc_se - q) / (p1 - q),
            (acc_noisy + 1.96 * acc_se - q) / (p1 - q),
        ],
        "auc_noisy": auc_noisy,
        "auc": float(np.nanmean(auc_hat)) if np.isfinite(auc_hat).any() else math.nan,
        "logloss_noisy": ll_noisy,
        "logloss": debiased_multiclass_logloss(y, p, eps, k) if n else math.nan,
        "class_prior": pi.tolist(),
        "rows": int(n),
    }


def noisy_regression_metrics(noisy: np.ndarray, predictions: np.ndarray, noise_variance: float | None) -> dict:
    """Validation metrics of real-valued predictions against randomized labels y~.

    With an unbiased mechanism (E[y~ | y] = y, noise independent of the prediction) E[(f - y~)^2] = E[(f - y)^2] + v,
    v = E[Var(y~ | y)] known from the mechanism, so mse = mean (f - y~)^2 - v is unbiased for the true MSE. It is
    kept unclamped: at small eps v can exceed the noisy MSE, and clamping at 0 would make every step tie. Every
    model is scored on the same y~, so mse, mse_noisy and the true MSE rank steps alike in expectation; selection
    (vfl/training/selection.py) ranks by mse. Reported:
    * mse, mse_ci95 (mean +- 1.96 sd((f - y~)^2) / sqrt(n)), mse_noisy, and rmse_noisy = sqrt(mse_noisy);
    * rmse = sqrt(mse), NaN when v was subtracted and mse <= 0 (not estimable: the noise hides it), and
      rmse_ci95, the MSE interval's ends through sqrt(max(., 0)) (an interval for the true RMSE, which is >= 0,
      whatever the sign of mse);
    * r2 = 1 - mse / (var(y~) - v), NaN where rmse is or where var(y~) - v <= 0 (label_variance, the debiased
      variance of the labels; label_variance_noisy = var(y~));
    * mae, the noisy one (there is no such identity for it); debiased: whether v was subtracted.
    noise_variance None (a biased mechanism such as RR-on-Bins): every metric is on the noisy labels as they are."""
    y = np.asarray(noisy, dtype=np.float64)
    err = np.asarray(predictions, dtype=np.float64) - y
    v = float(noise_variance or 0.0)
    if y.size == 0:
        nan2 = [math.nan, math.nan]
        return {
            **dict.fromkeys(("mse", "mse_noisy", "rmse", "rmse_noisy", "mae", "r2"), math.nan),
            **{"mse_ci95": nan2, "rmse_ci95": nan2, "label_variance": math.nan, "label_variance_noisy": math.nan},
            "debiased": noise_variance is not None,
        }
    sq = err * err
    mse_noisy = float(np.mean(sq))
    mse = mse_noisy - v
    half = 1.96 * float(np.std(sq)) / math.sqrt(y.size)
    var_noisy = float(np.var(y))
    sst = var_noisy - v
    estimable = mse > 0 or noise_variance is None  # nothing subtracted: mse is the noisy MSE, >= 0
    return {
        "mse": mse,
        "mse_ci95": [mse - half, mse + half],
        "mse_noisy": mse_noisy,
        "rmse": math.sqrt(mse) if estimable else math.nan,
        "rmse_ci95": [math.sqrt(max(mse - half, 0.0)), math.sqrt(max(mse + half, 0.0))],
        "rmse_noisy": math.sqrt(mse_noisy),
        "mae": float(np.mean(np.abs(err))),
        "r2": 1.0 - mse / sst if estimable and sst > 0 else math.nan,
        "label_variance": sst,
        "label_variance_noisy": var_noisy,
        "debiased": noise_variance is not None,
    }
