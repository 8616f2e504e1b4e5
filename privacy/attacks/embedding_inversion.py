"""The leader's attack on a follower's columns: decode each column from the cut embeddings the leader received.

The leader's full view of one follower: every cut it received with the row it belongs to (it names the rows: its own
batch order and EVAL ranges), its own labels and columns, and, as side knowledge, the follower's true values on a
small share of rows (`known_fraction`, e.g. 1%: customers both parties once shared). The attack:

1. **Link**: all sends of a row are averaged (the strongest use of repeated sends: under embedding DP with fresh
   noise per send the average's noise shrinks as 1/sqrt(sends), which the accountant's composition charges for).
   Without DP, identical inputs give identical cuts, and `exact_linkage` counts the rows whose cut equals a known
   row's cut (read with no decoder at all).
2. **Decode**: on the known rows, fit a decoder from the (averaged) cut, beside the leader's own features if given,
   to each follower column: multinomial logistic regression for a categorical column (scored by accuracy against
   the majority-class prior: the most common class's share of the attacked rows, the best guess without cuts),
   ridge regression for a numeric one (scored by R^2 on the rest).
   Both are cross-validated for their penalty on the known rows only, so the score on the other rows is honest.
   `decoders` adds nonlinear ones: k-nearest neighbours (k cross-validated on the known rows) and a one-hidden-layer
   MLP; each is scored alike, and a column's figure is the best of them (an attacker who could pick the decoder on
   the attacked rows: optimistic for it). A numeric column with missing values is also attacked as the binary
   column "is it missing" (`<name>:missing`).

What embedding DP bounds is the per-row likelihood ratio of the whole sequence of a row's sends ((eps, delta) over
its releases; privacy/embedding_dp.py); the decoder's excess accuracy over the prior is one visible consequence, not
the guarantee itself. Pure functions over arrays: no framework import, the randomness (which rows are known) from
the generator passed in.
"""

from __future__ import annotations

import warnings

import numpy as np

MAX_KNOWN_CLASSES = 64  # a categorical column's classes decoded as such; rarer ones fold into one "other" class


def link_sends(rows: np.ndarray, cuts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the mean cut of each row 0..n-1 over all its sends, the number of sends of each row)."""
    rows = np.asarray(rows, np.int64)
    sums = np.zeros((n, cuts.shape[1]), np.float64)
    np.add.at(sums, rows, cuts.astype(np.float64))
    sends = np.bincount(rows, minlength=n)
    mean = sums / np.maximum(sends, 1)[:, None]
    return mean.astype(np.float32), sends


def exact_linkage(cuts: np.ndarray, known: np.ndarray) -> float:
    """The share of the other rows whose cut equals, bit for bit, the cut of some known row (read with no decoder)."""
    keys = {cuts[i].tobytes() for i in np.flatnonzero(known)}
    others = np.flatnonzero(~known)
    if others.size == 0:
        return 0.0
    return float(np.mean([cuts[i].tobytes() in keys for i in others]))


def _features(cuts: np.ndarray, own: np.ndarray | None) -> np.ndarray:
    x = cuts if own is None else np.hstack([cuts, own])
    mu, sd = x.mean(axis=0), x.std(axis=0)
    return (x - mu) / np.where(sd > 0, sd, 1.0)


DECODERS = ("linear", "knn", "mlp")


def _nonlinear(name: str, classify: bool, x_known: np.ndarray, y_known: np.ndarray):
    """A fitted k-NN (k by 3-fold CV among 5, 15, 45) or MLP (64 hidden units, early stopping) decoder."""
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    if name == "mlp":
        cls = MLPClassifier if classify else MLPRegressor
        return cls(hidden_layer_sizes=(64,), max_iter=500, early_stopping=len(y_known) >= 50, random_state=0).fit(
            x_known, y_known
        )
    cls = KNeighborsClassifier if classify else KNeighborsRegressor
    ks = [k for k in (5, 15, 45) if k < len(y_known) * 2 // 3] or [1]
    best = ks[0]
    if len(ks) > 1:
        scores = []
        for k in ks:
            try:
                scores.append(float(np.mean(cross_val_score(cls(n_neighbors=k), x_known, y_known, cv=3))))
            except ValueError:
                scores.append(-np.inf)
        best = ks[int(np.argmax(scores))]
    return cls(n_neighbors=best).fit(x_known, y_known)


def _categorical(x: np.ndarray, y: np.ndarray, known: np.ndarray, decoders=("linear",)) -> dict:
    from sklearn.linear_model import LogisticRegression

    values, counts = np.unique(y[known], return_counts=True)
    rest = ~known
    prior = float(np.max(np.unique(y[rest], return_counts=True)[1]) / rest.sum())  # the majority class's share
    if values.size < 2:  # one class among the known rows: the decoder can say only that
        return {"kind": "categorical", "accuracy": prior, "prior": prior, "advantage": 0.0, "classes": 1}
    top = values[np.argsort(-counts)][:MAX_KNOWN_CLASSES]
    target = np.where(np.isin(y, top), y, -1)
    by = {}
    for name in decoders:
        if name == "linear":
            c = _penalty(x[known], target[known], classify=True)
            model = LogisticRegression(C=c, max_iter=2000).fit(x[known], target[known])
        else:
            model = _nonlinear(name, True, x[known], target[known])
        by[name] = float(np.mean(model.predict(x[rest]) == y[rest]))
    decoder = max(by, key=by.get)
    accuracy = by[decoder]
    return {
        "kind": "categorical",
        "accuracy": accuracy,
        "prior": prior,
        "advantage": accuracy - prior,
        "classes": int(np.unique(y).size),
        "decoder": decoder,
        "by_decoder": by,
    }


def _numeric(x: np.ndarray, y: np.ndarray, known: np.ndarray, decoders=("linear",)) -> dict:
    from sklearn.linear_model import Ridge

    ok = np.isfinite(y)
    k, rest = known & ok, ~known & ok
    if k.sum() < 3 or rest.sum() < 2:
        return {"kind": "numeric", "r2": float("nan"), "known_rows": int(k.sum())}
    total = np.sum((y[rest] - y[k].mean()) ** 2)  # the attacker's no-cut guess: the known rows' mean
    by = {}
    for name in decoders:
        if name == "linear":
            model = Ridge(alpha=1.0 / _penalty(x[k], y[k], classify=False)).fit(x[k], y[k])
        else:
            model = _nonlinear(name, False, x[k], y[k])
        resid = np.sum((y[rest] - model.predict(x[rest])) ** 2)
        by[name] = float(1 - resid / total) if total > 0 else float("nan")
    decoder = max(by, key=lambda d: -np.inf if np.isnan(by[d]) else by[d])
    return {"kind": "numeric", "r2": by[decoder], "known_rows": int(k.sum()), "decoder": decoder, "by_decoder": by}


def _penalty(x: np.ndarray, y: np.ndarray, classify: bool) -> float:
    """The inverse penalty C (alpha = 1 / C) with the best 3-fold score on the known rows (a grid of 7)."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.model_selection import cross_val_score

    grid = [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0]
    if len(y) < 9:
        return 1.0
    scores = []
    for c in grid:
        model = LogisticRegression(C=c, max_iter=2000) if classify else Ridge(alpha=1.0 / c)
        try:
            scores.append(float(np.mean(cross_val_score(model, x, y, cv=3))))
        except ValueError:  # a class too rare for 3 folds
            scores.append(-np.inf)
    return grid[int(np.argmax(scores))]


def attack_columns(
    cuts: np.ndarray,
    columns: dict[str, tuple[str, np.ndarray]],
    rng: np.random.Generator,
    known_fraction: float = 0.01,
    own: np.ndarray | None = None,
    decoders: tuple[str, ...] = ("linear",),
) -> dict:
    """Decode every follower column from the leader's per-row cuts `cuts` (n, d) (one row per sample: linked with
    `link_sends`). `columns`: {name: ("categorical" | "numeric", values (n,))}; `own`: the leader's own features of
    the same rows (n, k), or None. A share `known_fraction` of rows (at least 20) is known to the attacker;
    `decoders`: any of DECODERS (each column's figure is the best)."""
    n = cuts.shape[0]
    if not 0 < known_fraction < 1:
        raise ValueError(f"known_fraction must be in (0, 1), got {known_fraction}")
    bad = [d for d in decoders if d not in DECODERS]
    if bad or not decoders:
        raise ValueError(f"decoders must be a non-empty subset of {list(DECODERS)}, got {list(decoders)}")
    k = min(n - 1, max(20, int(round(known_fraction * n))))
    known = np.zeros(n, bool)
    known[rng.choice(n, size=k, replace=False)] = True
    x = _features(cuts.astype(np.float64), own)
    with warnings.catch_warnings():  # sklearn's notes on rare classes among the few known rows (a fold holding one
        warnings.simplefilter("ignore", UserWarning)  # class fails its fit, scored nan): expected here
        warnings.simplefilter("ignore", RuntimeWarning)  # sklearn's FitFailedWarning is one
        return _decode_all(cuts, x, columns, known, k, tuple(decoders))


def _decode_all(cuts: np.ndarray, x: np.ndarray, columns: dict, known: np.ndarray, k: int, decoders) -> dict:
    n = cuts.shape[0]
    report: dict = {"rows": n, "known_rows": k, "exact_linkage": exact_linkage(cuts, known), "columns": {}}
    for name, (kind, values) in columns.items():
        if kind not in ("categorical", "numeric"):
            raise ValueError(f"column {name}: kind must be 'categorical' or 'numeric', got {kind!r}")
        values = np.asarray(values)
        fit = _categorical if kind == "categorical" else _numeric
        values = values if kind == "categorical" else values.astype(np.float64)
        report["columns"][name] = fit(x, values, known, decoders)
        if kind == "numeric" and np.isnan(values).any() and not np.isnan(values).all():
            report["columns"][f"{name}:missing"] = _categorical(x, np.isnan(values).astype(np.int64), known, decoders)
    cats = {c: r for c, r in report["columns"].items() if r["kind"] == "categorical"}
    if cats:
        strongest = max(cats, key=lambda c: cats[c]["advantage"])
        report["strongest_categorical"] = {"column": strongest, **cats[strongest]}
    return report
