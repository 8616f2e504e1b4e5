"""Baselines of the real examples (flights, caravan, bikeshare): what the leader's columns alone and all columns
pooled give with scikit-learn, on the rows and the train / valid / test split the split model uses.

Each example's parties write their own raw CSV (examples/<name>/make_parties.py); the rows are the ids every party
holds (the PSI intersection); the split is `vfl.data.prepare.split_of` of the ids, a public function of the id. The
columns, their kinds and transforms are read from the party YAMLs (`data.schema`), so the baselines see exactly the
columns the split model sees. Models: logistic regression (linear regression for a regression task) on one-hot
categoricals and standardized numerics with missing flags, and HistGradientBoosting on native categoricals, early
stopped on the valid split. Figures are on the test split: AUC (binary) or RMSE, MAE and R^2 (regression).

    bash scripts/bench_examples.sh [--examples flights caravan bikeshare] [--out runs/bench_examples]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import pandas as pd
import yaml

from benchmarks.common import cpu_model, write_json
from benchmarks.datasets import example_parties

REPO = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ("flights", "caravan", "bikeshare")
SPLIT_NAMES = ("train", "valid", "test")


def party_configs(name: str) -> dict[str, dict]:
    """{party: its YAML document} of examples/<name>/, the leader first."""
    docs = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples" / name).glob("*.yaml"))]
    docs = [d for d in docs if isinstance(d, dict) and "schema" in d.get("data", {})]
    docs.sort(key=lambda d: d["role"] != "leader")
    return {d["party"]: d for d in docs}


def column_specs(schema: dict) -> dict[str, tuple[str, dict]]:
    """{column: (kind, transform as a dict)} of a `data.schema`, with the default transforms filled in."""
    specs = {}
    for column, spec in schema["columns"].items():
        kind, transform = (spec, None) if isinstance(spec, str) else (spec["kind"], spec.get("transform"))
        if transform is None:
            transform = {"vocabulary": {"min_count": 2}} if kind == "categorical" else "standardize"
        if isinstance(transform, str):
            transform = {transform: {}}
        specs[column] = (kind, transform)
    return specs


def joined_table(name: str, raw_dir: pathlib.Path) -> tuple[pd.DataFrame, dict, dict]:
    """The parties' files joined on the ids they all hold, plus {party: column specs} and facts (rows per party)."""
    configs = party_configs(name)
    paths = example_parties(name).main(raw_dir)
    table, specs, rows = None, {}, {}
    for party, doc in configs.items():
        schema = doc["data"]["schema"]
        specs[party] = column_specs(schema)
        text = {schema["id"]: str} | {c: str for c, (kind, _) in specs[party].items() if kind == "categorical"}
        frame = pd.read_csv(paths[party], dtype=text, keep_default_na=False, na_values=[""])
        frame = frame.rename(columns={schema["id"]: "id"})
        rows[party] = len(frame)
        table = frame if table is None else table.merge(frame, on="id", how="inner", validate="1:1")
    return table, specs, {"rows_per_party": rows, "intersection": len(table)}


def split_column(ids: pd.Series, seed: int, test_fraction: float, valid_fraction: float) -> np.ndarray:
    from vfl.data.ids import ids64
    from vfl.data.prepare import PrepareOptions, split_of

    opts = PrepareOptions(seed=seed, test_fraction=test_fraction, valid_fraction=valid_fraction)
    return split_of(ids64(ids.to_numpy()), opts)


def _signed_log1p(x):
    return np.sign(x) * np.log1p(np.abs(x))


def linear_features(specs: dict[str, tuple[str, dict]]):
    """One-hot categoricals (rare values pooled, as a vocabulary's min_count) and numerics after the schema's
    transform, mean-imputed with a missing flag and standardized."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, StandardScaler

    parts = []
    for column, (kind, transform) in specs.items():
        if kind == "categorical":
            min_count = transform.get("vocabulary", {}).get("min_count", 1)
            enc = OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=min_count, sparse_output=True)
            parts.append((column, make_pipeline(SimpleImputer(strategy="constant", fill_value="NA"), enc), [column]))
        else:
            steps = [FunctionTransformer(_signed_log1p)] if "log1p" in transform else []
            steps += [SimpleImputer(strategy="mean", add_indicator=True), StandardScaler()]
            parts.append((column, make_pipeline(*steps), [column]))
    return ColumnTransformer(parts, sparse_threshold=1.0)


def tree_features(specs: dict[str, tuple[str, dict]]):
    """Categoricals as ordinal codes (rare and unseen values missing), numerics as they are (NaN kept)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OrdinalEncoder

    cats = [c for c, (kind, _) in specs.items() if kind == "categorical"]
    nums = [c for c, (kind, _) in specs.items() if kind != "categorical"]
    min_count = {c: specs[c][1].get("vocabulary", {}).get("min_count", 1) for c in cats}
    parts = [
        (
            c,
            OrdinalEncoder(
                handle_unknown="use_encoded_value",
                unknown_value=np.nan,
                encoded_missing_value=np.nan,
                min_frequency=min_count[c],
            ),
            [c],
        )
        for c in cats
    ]
    if nums:
        parts.append(("numeric", "passthrough", nums))
    mask = np.array([True] * len(cats) + [False] * len(nums))
    return ColumnTransformer(parts), mask


def _metrics(task: str, y: np.ndarray, pred: np.ndarray) -> dict:
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score, roc_auc_score

    if task == "regression":
        return {
            "rmse": float(np.sqrt(mean_squared_error(y, pred))),
            "mae": float(mean_absolute_error(y, pred)),
            "r2": float(r2_score(y, pred)),
        }
    lo, hi = _bootstrap_interval(roc_auc_score, y, pred)
    return {"auc": float(roc_auc_score(y, pred)), "auc_95": [lo, hi]}


def _bootstrap_interval(metric, y: np.ndarray, pred: np.ndarray, rounds: int = 200) -> tuple[float, float]:
    """A 95% percentile interval of metric(y, pred) over test rows resampled with replacement (seeded)."""
    rng = np.random.default_rng(0)
    values = []
    for _ in range(rounds):
        i = rng.integers(0, y.size, y.size)
        if 0 < y[i].sum() < y.size:
            values.append(metric(y[i], pred[i]))
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def fit_linear(task: str, specs, X: dict, y: dict) -> dict:
    from sklearn.linear_model import LinearRegression, LogisticRegression

    prep = linear_features(specs)
    Xtr = prep.fit_transform(X["train"])
    model = LinearRegression() if task == "regression" else LogisticRegression(max_iter=5000)
    model.fit(Xtr, y["train"])
    Xte = prep.transform(X["test"])
    pred = model.predict(Xte) if task == "regression" else model.predict_proba(Xte)[:, 1]
    return _metrics(task, y["test"], pred)


def fit_trees(task: str, specs, X: dict, y: dict, seed: int) -> dict:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    prep, mask = tree_features(specs)
    Xtr, Xva, Xte = prep.fit_transform(X["train"]), prep.transform(X["valid"]), prep.transform(X["test"])
    cls = HistGradientBoostingRegressor if task == "regression" else HistGradientBoostingClassifier
    model = cls(max_iter=2000, early_stopping=True, n_iter_no_change=30, categorical_features=mask, random_state=seed)
    model.fit(Xtr, y["train"], X_val=Xva, y_val=y["valid"])
    pred = model.predict(Xte) if task == "regression" else model.predict_proba(Xte)[:, 1]
    return {**_metrics(task, y["test"], pred), "iterations": int(model.n_iter_)}


def label_values(doc: dict, table: pd.DataFrame) -> tuple[str, np.ndarray]:
    """(task, the label as numbers): binary 0/1 (classes [negative, positive] mapped when declared) or floats."""
    task = doc.get("train", {}).get("task", "binary")
    label = doc["data"]["schema"]["label"]
    raw = table[label["column"]]
    if task == "regression":
        return task, raw.to_numpy(float)
    classes = label.get("classes")
    if classes:
        return task, raw.astype(str).map({str(classes[0]): 0, str(classes[1]): 1}).to_numpy(int)
    return task, raw.astype(int).to_numpy()


def bench_example(name: str, out: pathlib.Path, seed: int, test_fraction: float, valid_fraction: float) -> dict:
    table, specs, facts = joined_table(name, out / name / "raw")
    configs = party_configs(name)
    leader = next(iter(configs))
    task, y_all = label_values(configs[leader], table)
    split = split_column(table["id"], seed, test_fraction, valid_fraction)
    facts["split_rows"] = {s: int((split == i).sum()) for i, s in enumerate(SPLIT_NAMES)}
    if task != "regression":
        facts["positive_rate"] = float(y_all.mean())
        facts["test_positives"] = int(y_all[split == 2].sum())
    feature_sets = {"leader": specs[leader], "pooled": {c: s for party in specs.values() for c, s in party.items()}}
    results = []
    for features, fs in feature_sets.items():
        X = {s: table.loc[split == i, list(fs)] for i, s in enumerate(SPLIT_NAMES)}
        y = {s: y_all[split == i] for i, s in enumerate(SPLIT_NAMES)}
        for model in ("linear", "hgb"):
            t0 = time.perf_counter()
            m = fit_linear(task, fs, X, y) if model == "linear" else fit_trees(task, fs, X, y, seed)
            results.append({"features": features, "model": model, **m, "seconds": time.perf_counter() - t0})
            print(f"  {name} {features:<6} {model:<6} {_fmt(task, m)}  ({results[-1]['seconds']:.1f} s)", flush=True)
    return {
        "task": task,
        "leader": leader,
        "columns": {p: list(s) for p, s in specs.items()},
        **facts,
        "results": results,
    }


def _fmt(task: str, m: dict) -> str:
    if task == "regression":
        return f"RMSE {m['rmse']:.2f}  MAE {m['mae']:.2f}  R^2 {m['r2']:.4f}"
    return f"AUC {m['auc']:.4f} [{m['auc_95'][0]:.3f}, {m['auc_95'][1]:.3f}]"


def table_lines(report: dict) -> list[str]:
    lines = [
        f"CPU: {report['cpu']}; scikit-learn {report['sklearn']}; split seed {report['seed']}; "
        "AUC with a 95% bootstrap interval over the test rows",
        "| example | rows (train/valid/test) | features | linear | HistGradientBoosting |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, ex in report["examples"].items():
        sizes = "/".join(str(ex["split_rows"][s]) for s in SPLIT_NAMES)
        if "test_positives" in ex:
            sizes += f" ({ex['test_positives']} positive in test)"
        for features in ("leader", "pooled"):
            by = {r["model"]: r for r in ex["results"] if r["features"] == features}
            lines.append(
                f"| {name} | {sizes} | {features} | {_fmt(ex['task'], by['linear'])} | {_fmt(ex['task'], by['hgb'])} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    from vfl.data.prepare import PrepareOptions

    d = PrepareOptions()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", nargs="+", choices=EXAMPLES, default=list(EXAMPLES))
    ap.add_argument("--out", default="runs/bench_examples", help="raw party files and bench_examples.json go here")
    ap.add_argument("--seed", type=int, default=d.seed, help="the split's seed (prepare's --seed)")
    ap.add_argument("--test-fraction", type=float, default=d.test_fraction)
    ap.add_argument("--valid-fraction", type=float, default=d.valid_fraction)
    args = ap.parse_args(argv)
    import sklearn

    out = pathlib.Path(args.out)
    report = {
        "command": " ".join(["python", "-m", "benchmarks.examples", *(sys.argv[1:] if argv is None else argv)]),
        "cpu": cpu_model(),
        "sklearn": sklearn.__version__,
        "seed": args.seed,
        "test_fraction": args.test_fraction,
        "valid_fraction": args.valid_fraction,
        "examples": {},
    }
    for name in args.examples:
        print(f"== {name}", flush=True)
        report["examples"][name] = bench_example(name, out, args.seed, args.test_fraction, args.valid_fraction)
    write_json(str(out / "bench_examples.json"), report)
    print("\n".join(table_lines(report)))
    print(f"== {out / 'bench_examples.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
