"""Evaluation metrics (privacy/rank_metrics.py: scikit-learn's values in numpy) and the seed's loss-line format (the run log itself is vfl/obs/logs.py)."""

from __future__ import annotations

import math
import os

import numpy as np

from privacy import durable_files
from privacy.rank_metrics import binary_cross_entropy, cross_entropy, roc_auc
from vfl.obs.logs import RunLog  # noqa: F401  (re-exported: callers import the run log from here)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC; NaN when only one class is present."""
    labels = np.asarray(labels)
    if labels.size == 0 or np.unique(labels).size < 2:
        return math.nan
    return roc_auc(labels, scores)


def logloss(labels: np.ndarray, probs: np.ndarray) -> float:
    """Binary cross-entropy of probabilities clipped to [1e-7, 1 - 1e-7]."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return math.nan
    return binary_cross_entropy(labels, np.clip(np.asarray(probs, dtype=np.float64), 1e-7, 1 - 1e-7))


def multiclass_auc(labels: np.ndarray, probs: np.ndarray) -> float:
    """Macro one-vs-rest ROC AUC over the classes present with both outcomes (scikit-learn's
    `roc_auc_score(multi_class="ovr", average="macro")` when every class occurs); NaN when none does."""
    labels = np.asarray(labels, dtype=np.int64)
    per_class = [
        roc_auc(labels == c, probs[:, c]) for c in range(probs.shape[1]) if 0 < int(np.sum(labels == c)) < labels.size
    ]
    return float(np.mean(per_class)) if per_class else math.nan


def multiclass_logloss(labels: np.ndarray, probs: np.ndarray) -> float:
    """Cross-entropy of (n, K) class probabilities (clipped to [1e-7, 1] and renormalised)."""
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size == 0:
        return math.nan
    p = np.clip(np.asarray(probs, dtype=np.float64), 1e-7, 1.0)
    return cross_entropy(labels, p / p.sum(axis=1, keepdims=True))


def regression_metrics(labels: np.ndarray, predictions: np.ndarray) -> dict:
    """{rmse, mae, r2} of real-valued predictions (n,); r2 = 1 - SSE / SST, NaN when the labels are constant."""
    y = np.asarray(labels, dtype=np.float64)
    err = np.asarray(predictions, dtype=np.float64) - y
    if y.size == 0:
        return {"rmse": math.nan, "mae": math.nan, "r2": math.nan}
    sse, sst = float(np.sum(err * err)), float(np.sum((y - y.mean()) ** 2))
    rmse = math.sqrt(sse / y.size)
    # delta method: se(mean e^2) = sd(e^2) / sqrt(n), and d sqrt(m) = dm / (2 sqrt(m))
    half = 1.96 * float(np.std(err * err)) / math.sqrt(y.size) / (2 * rmse) if rmse > 0 else 0.0
    return {
        "rmse": rmse,
        "rmse_ci95": [rmse - half, rmse + half],
        "mae": float(np.mean(np.abs(err))),
        "r2": 1.0 - sse / sst if sst > 0 else math.nan,
    }


def test_metrics(labels: np.ndarray, probs: np.ndarray, regression: bool = False) -> dict:
    """The test split's metrics: {test_auc, test_logloss} of click probabilities (n,), plus test_accuracy
    (argmax) with macro one-vs-rest AUC and cross-entropy for class probabilities (n, K); {test_rmse, test_mae,
    test_r2} of real-valued predictions (n,) when `regression`."""
    if regression:
        return {f"test_{k}": v for k, v in regression_metrics(labels, probs).items() if not k.endswith("_ci95")}
    probs = np.asarray(probs)
    if probs.ndim == 1:
        return {"test_auc": auc(labels, probs), "test_logloss": logloss(labels, probs)}
    labels = np.asarray(labels, dtype=np.int64)
    accuracy = float(np.mean(np.argmax(probs, axis=1) == labels)) if labels.size else math.nan
    return {
        "test_accuracy": accuracy,
        "test_auc": multiclass_auc(labels, probs),
        "test_logloss": multiclass_logloss(labels, probs),
    }


def metrics_text(m: dict, prefix: str = "test_") -> str:
    """`test_accuracy: 0.912345 test_auc: ... test_logloss: ...` (accuracy only when present), or
    `test_rmse: ... test_mae: ... test_r2: ...` for a regression."""
    names = ("accuracy", "auc", "logloss", "rmse", "mae", "r2")
    keys = [f"{prefix}{k}" for k in names if f"{prefix}{k}" in m]
    return " ".join(f"{k}: {m[k]:.6f}" for k in keys)


def regression_valid_text(valid: dict) -> str:
    """A regression's validation metrics for an evaluation's log line: `valid_rmse: ... valid_mae: ... valid_r2: ...`;
    under label DP (privacy/label/noisy_metrics.noisy_regression_metrics) the RMSE with its 95% interval and the
    noisy RMSE, and, where the debiased MSE is <= 0, `not estimable` with the MSE and its interval (never a 0)."""
    if "mse" not in valid:
        return metrics_text({f"valid_{k}": v for k, v in valid.items()}, "valid_")
    lo, hi = valid["rmse_ci95"]
    if valid["rmse"] == valid["rmse"]:
        rmse = f"{valid['rmse']:.6f} (95% interval [{lo:.6g}, {hi:.6g}]"
    else:
        mlo, mhi = valid["mse_ci95"]
        bound = f"RMSE at most {hi:.6g}" if hi > 0 else "no positive MSE in it"
        rmse = f"not estimable (debiased MSE {valid['mse']:.6g} <= 0, 95% interval [{mlo:.6g}, {mhi:.6g}]: {bound}"
    r2 = f"{valid['r2']:.6f}" if valid["r2"] == valid["r2"] else "not estimable"
    labels = f"debiased; noisy {valid['rmse_noisy']:.6f}" if valid.get("debiased") else "on the noisy labels"
    return f"valid_rmse: {rmse}; {labels}) valid_mae: {valid['mae']:.6f} (noisy) valid_r2: {r2}"


def final_line(m: dict) -> str:
    """The last line of a run: the selected model's test metrics next to the data's Bayes-optimal ones."""
    bayes_auc, bayes_acc = m.get("bayes_test_auc"), m.get("bayes_test_accuracy")
    return (
        "final "
        + metrics_text(m)
        + (f" (Bayes-optimal test AUC {bayes_auc:.6f})" if bayes_auc is not None else "")
        + (f" (Bayes-optimal test accuracy {bayes_acc:.6f})" if bayes_acc is not None else "")
        + f" samples/s: {m['samples_per_second']:.0f}"
    )


def loss_line(epoch: int, step: int, steps: int, loss: float) -> str:
    """The seed's format: `epoch 0 step 100/2582 loss: 0.588637` (step counts from 1)."""
    return f"epoch {epoch} step {step}/{steps} loss: {loss:.6f}"


def write_json(path: str, doc: dict) -> None:
    """Write JSON durably (privacy/durable_files.py), its directory created."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    durable_files.write_json(path, doc, indent=2, allow_nan=True)
