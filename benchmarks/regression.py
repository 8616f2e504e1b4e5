"""Utility of label DP for real-valued labels, one command: test RMSE and R^2 of the selected model for eps in
{0.5, 1, 2, 4, 8, inf} x {laplace, rr_on_bins, unbiased}, mean +- sd over seeds, on three data sets: the flights
example's arrival delay (minutes, clipped to [-60, 180]), the bikeshare example's bikers per hour (clipped to
[0, 700]) and a synthetic set with a known noise floor (sd 1.0). Linear regression on the true labels (no DP) is the
floor each cell is read against, beside the same MLP on the true labels (the eps = inf column).

Each cell draws its noisy training and validation labels through the leader's own code path
(privacy/label/regression_release.py: draw_regression, the DP-histogram prior at prior_eps_fraction 0.1, 32 bins) with a
fresh scratch key per seed and no ledger (a benchmark on public data; nothing here is a protected release), trains a
small MLP (one hidden layer of 64) on the standardized noisy label with MSE, selects the epoch on the randomized
validation labels (the least validation MSE, debiased by the noise variance where the mechanism is unbiased, as
the leader does), and scores it on the true test labels. In-process and centralized: split training computes the
same steps (tests).

Usage: python -m benchmarks.regression [--rows N] [--seeds K] [--eps 0.5,1,2,4,8,inf] [--epochs E] [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

from benchmarks.common import RunProgress, cpu_model, load_avg, mean_sd, spread, write_json
from benchmarks.datasets import example_parties

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MECHANISMS = ("laplace", "rr_on_bins", "unbiased")
CLIPS = {"flights": (-60.0, 180.0), "bikeshare": (0.0, 700.0), "synthetic": (0.0, 20.0)}
SYNTH_NOISE = 1.0


def _one_hot(frame, columns):
    import pandas as pd

    return pd.get_dummies(frame[columns].astype(str), dtype=np.float32).to_numpy()


def _standardized(frame, columns):
    x = frame[columns].to_numpy(np.float64)
    missing = np.isnan(x)
    x = np.where(missing, np.nanmean(x, axis=0), x)
    x = (x - x.mean(0)) / np.maximum(x.std(0), 1e-9)
    return np.hstack([x, missing[:, missing.any(0)]]).astype(np.float32)


def flights(rows: int, rng: np.random.Generator):
    """The flights example's airline and weather columns (what the leader and the weather service hold) and the
    arrival delay in minutes: a random sample of `rows` flights that arrived."""
    import pandas as pd

    package_file = example_parties("flights").package_file

    f = pd.read_csv(package_file("flights.csv.zip"))
    f = f[f["arr_delay"].notna()].reset_index(drop=True)
    f = f.iloc[np.sort(rng.choice(len(f), size=min(rows, len(f)), replace=False))].reset_index(drop=True)
    w = pd.read_csv(package_file("weather.csv"))
    f = f.merge(w, on=["origin", "time_hour"], how="left", suffixes=("", "_w"))
    f["weekday"] = pd.to_datetime(f[["year", "month", "day"]]).dt.day_of_week
    f["sched_hour"] = f["sched_dep_time"] // 100
    top = f["dest"].value_counts().index[:30]
    f["dest"] = f["dest"].where(f["dest"].isin(top), "other")
    x = np.hstack(
        [
            _one_hot(f, ["carrier", "origin", "dest", "month", "weekday", "sched_hour"]),
            _standardized(f, ["distance", "temp", "dewp", "humid", "wind_speed", "precip", "pressure", "visib"]),
        ]
    )
    return x, f["arr_delay"].to_numpy(np.float64)


def bikeshare(rows: int, rng: np.random.Generator):
    """The bikeshare example's operator and weather columns and bikers per hour (all 8,645 hours)."""
    from ISLP import load_data

    d = load_data("Bikeshare")
    x = np.hstack(
        [
            _one_hot(d, ["season", "mnth", "hr", "holiday", "weekday", "workingday", "weathersit"]),
            _standardized(d, ["day", "temp", "atemp", "hum", "windspeed"]),
        ]
    )
    return x, d["bikers"].to_numpy(np.float64)


def synthetic(rows: int, rng: np.random.Generator):
    """y = 10 + 4 tanh(x w / sqrt(d)) + 2 sin(x_0) + N(0, 1): the Bayes RMSE is 1.0 (before clipping, which
    almost never binds)."""
    x = rng.normal(size=(rows, 12)).astype(np.float32)
    w = rng.normal(size=12)
    y = 10 + 4 * np.tanh(x @ w / math.sqrt(12)) + 2 * np.sin(x[:, 0]) + rng.normal(0, SYNTH_NOISE, rows)
    return x, y


def noisy_labels(mechanism, eps, y_train, y_valid, clip, seed):
    """The leader's release for this cell (draw_regression), keyed by a scratch key of the seed: (train, valid,
    noise variance or None)."""
    from privacy.label.ledger.release_names import key_fingerprint, release_id
    from privacy.label.regression_release import draw_regression
    from privacy.label.release_plans import RegressionSpec

    if math.isinf(eps):
        return y_train.clip(*clip), y_valid.clip(*clip), 0.0
    key = hashlib.sha256(f"bench_regression scratch key {seed}".encode()).digest()
    spec = RegressionSpec(clip, 32, "dp_histogram", 0.1)
    name = lambda m, p: release_id("bench", key_fingerprint(key), m, p)
    plan = spec.plan(mechanism, eps, name)
    record = lambda pl: (name(*pl[0]), True, {})
    ids = np.arange(y_train.size + y_valid.size, dtype=np.int64)
    d = draw_regression(
        spec, mechanism, eps, plan, y_train, ids[: y_train.size], y_valid, ids[y_train.size :], key, record
    )
    return d.noisy, d.valid_noisy, d.noise_variance


def train_mlp(x, y_noisy, xv, yv_noisy, noise_var, xt, yt, epochs, seed):
    """Adam on MSE of the standardized noisy label; the epoch the leader would select (the least unclamped debiased
    noisy validation MSE)."""
    import torch

    from privacy.label.noisy_metrics import noisy_regression_metrics
    from vfl.training.selection import selection_value

    torch.manual_seed(seed)
    mean, sd = float(y_noisy.mean()), float(y_noisy.std()) or 1.0
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xs, ys = torch.from_numpy(x), torch.from_numpy(((y_noisy - mean) / sd).astype(np.float32))
    predict = lambda a: model(torch.from_numpy(a)).squeeze(1).double().numpy() * sd + mean
    gen = torch.Generator().manual_seed(seed)
    best = (math.inf, None)
    for _ in range(epochs):
        for rows in torch.randperm(len(xs), generator=gen).split(256):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xs[rows]).squeeze(1), ys[rows]).backward()
            opt.step()
        with torch.no_grad():
            valid = selection_value("rmse", noisy_regression_metrics(yv_noisy, predict(xv), noise_var))[0]
            if valid < best[0]:
                best = (valid, predict(xt))
    return scores(best[1], yt)


def scores(pred, y) -> dict:
    err = pred - y
    return {"rmse": float(np.sqrt(np.mean(err * err))), "r2": float(1 - np.mean(err * err) / np.var(y))}


def run(args) -> dict:
    import torch
    from sklearn.linear_model import LinearRegression

    torch.set_num_threads(1)
    loaders = {"flights": flights, "bikeshare": bikeshare, "synthetic": synthetic}
    cells = [(d, m, e) for d in args.datasets for e in args.eps for m in (MECHANISMS if math.isfinite(e) else ("-",))]
    progress = RunProgress(len(cells) * args.seeds)
    results: dict = {}
    for name in args.datasets:
        rng = np.random.default_rng(0)
        x, y = loaders[name](args.rows, rng)
        clip = CLIPS[name]
        y = y.clip(*clip)  # the clipped label is the task (the schema's label clip); noise is measured from it
        order = rng.permutation(y.size)
        n_test = n_valid = y.size * 15 // 100
        test, valid, train = order[:n_test], order[n_test : n_test + n_valid], order[n_test + n_valid :]
        lin = LinearRegression().fit(x[train], y[train])
        entry = {"rows": int(y.size), "clip": list(clip), "label_sd": float(y[test].std())}
        entry["linear_no_dp"] = scores(lin.predict(x[test]), y[test])
        if name == "synthetic":
            entry["noise_floor_rmse"] = SYNTH_NOISE
        for _, mech, eps in [c for c in cells if c[0] == name]:
            runs = []
            for seed in range(args.seeds):
                ytr, yva, var = noisy_labels(mech, eps, y[train], y[valid], clip, seed)
                runs.append(train_mlp(x[train], ytr, x[valid], yva, var, x[test], y[test], args.epochs, seed))
                print(progress.line(f"{name} {mech} eps={eps}: test rmse {runs[-1]['rmse']:.3f}"), flush=True)
            entry[f"{mech}@{eps}"] = {
                k: {
                    "mean": statistics.fmean(r[k] for r in runs),
                    "sd": spread(r[k] for r in runs),
                }
                for k in ("rmse", "r2")
            }
        results[name] = entry
    return results


def table(results: dict, eps_list) -> str:
    lines = []
    for name, entry in results.items():
        lin = entry["linear_no_dp"]
        floor = f"; noise floor RMSE {entry['noise_floor_rmse']}" if "noise_floor_rmse" in entry else ""
        inf = entry.get("-@inf", {}).get("rmse")
        mlp = f"; MLP without DP {mean_sd(inf['mean'], inf['sd'], 3, '+-')}" if inf else ""
        lines.append(
            f"\n{name} ({entry['rows']} rows, clip {entry['clip']}, test label sd {entry['label_sd']:.3f}): linear "
            f"regression without DP RMSE {lin['rmse']:.3f}, R^2 {lin['r2']:.3f}{mlp}{floor}\n"
        )
        finite = [e for e in eps_list if math.isfinite(e)]
        lines.append("| mechanism | " + " | ".join(f"eps {e:g}" for e in finite) + " |")
        lines.append("| --- |" + " --- |" * len(finite))
        for mech in MECHANISMS:
            cells = []
            for e in finite:
                c = entry[f"{mech}@{e}"]
                cells.append(f"{mean_sd(c['rmse']['mean'], c['rmse']['sd'], 3, '+-')} (R^2 {c['r2']['mean']:.2f})")
            lines.append(f"| {mech} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000, help="flights and synthetic rows (bikeshare has 8,645)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--eps", default="0.5,1,2,4,8,inf")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--datasets", default="flights,bikeshare,synthetic")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    args.eps = [float(e) for e in args.eps.split(",")]
    args.datasets = [d for d in args.datasets.split(",") if d]
    bad = [d for d in args.datasets if d not in CLIPS]
    if bad or args.seeds < 1 or args.rows < 100:
        ap.error(f"--datasets must be among {list(CLIPS)} (got {bad}), --seeds >= 1, --rows >= 100")
    start = time.time()
    results = run(args)
    cpu, load = cpu_model(), load_avg()
    machine = {"cpu": cpu, "cores": os.cpu_count(), "load": load, "python": platform.python_version()}
    print(table(results, args.eps))
    print(f"\n{time.time() - start:.0f} s on {cpu} ({os.cpu_count()} cores), load {load[0]:.1f}")
    if args.json:
        write_json(
            args.json, {"results": results, "machine": machine, "seconds": time.time() - start, "args": vars(args)}
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
