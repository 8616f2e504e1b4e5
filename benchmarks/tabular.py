"""The split model against pooled boosted trees on tables: every example table and three ISLP tables, side by side.

Tables: the examples flights, caravan (binary) and bikeshare (regression), each split between its parties as its
YAMLs declare (examples/<name>/); and three tables that ship inside the ISLP package, each split between two parties
by one rule: the label goes to the leader; the feature columns, in the table's own order, alternate leader, follower,
leader, ... (the leader holds positions 0, 2, 4, ...); pandas categoricals are `categorical`, numbers `numeric`:
- Default (binary `default`, 10,000 rows): leader student, income; follower balance.
- OJ (binary `Purchase` = MM, 1,070 rows): 17 columns alternated.
- Wage (regression `wage`; `logwage` dropped, being the label's log): 9 columns alternated.

Rows are the ids every party holds; the train / valid / test split is prepare's public function of the id (seed 0,
10% / 10%). Models per table, each over `--seeds`:
- pooled HistGradientBoosting (early stopped on the valid split), pooled logistic / linear regression, and
  HistGradientBoosting on the leader's columns alone (scripts/bench_examples.py's baselines, same features);
- the split model with today's defaults (TODAY: what vfl/training/table_defaults.py chose before the tuned recipe,
  written out: wide_deep, embedding 16, hidden [256, 128], a 2-wide cut, a linear top, >= 300 steps) and with the
  table defaults of this checkout (every model and schedule key left unset: the tuned recipe), each trained by
  vfl/centralized.py's in-process reference on the parties' prepared shards: split training equals it
  (tests/models/test_numeric_embeddings.py, tests/models/test_models_split.py), so no socket is opened;
- with `--label-dp`, both split models again at label DP eps 1 and 4 (RR, the leader's default mechanism);
- `--variants` names the split models to run: split_today, split_new, or the recipe search's candidates (SEARCH).

Test AUC (RMSE for regression): mean ± sd over seeds and a 95% t-interval of the mean (one seed: the test rows'
bootstrap interval). Machine (lscpu model) and load are printed; OUT/bench_tabular.json keeps every figure.

    bash scripts/bench_tabular.sh [--tables flights caravan ...] [--seeds 0 1 2] [--label-dp] [--out DIR]
        [--variants split_today split_new sqrt_1200 ...]
"""

from __future__ import annotations

import argparse
import copy
import math
import pathlib
import sys
import time

import numpy as np
import pandas as pd

from benchmarks import datasets
from benchmarks import examples as ex
from benchmarks.common import cpu_model, load_text, write_json

EXAMPLES = ("flights", "caravan", "bikeshare")
ISLP_TABLES = {  # name -> (label column, task, positive class or None, dropped columns)
    "Default": ("default", "binary", "Yes", ()),
    "OJ": ("Purchase", "binary", "MM", ()),
    "Wage": ("wage", "regression", None, ("logwage",)),
}
# a regression label's stated range (data.schema.label.clip), which label DP needs: Wage's wages in $1000s, a round
# bound stated from the table's documentation (yearly wages of male workers), not read from its rows
LABEL_CLIP = {"Wage": [0.0, 350.0]}
TABLES = EXAMPLES + tuple(ISLP_TABLES)
# today's table defaults (vfl/training/table_defaults.py before the tuned recipe), written out
TODAY = {"model": {"bottom": {"name": "wide_deep", "embedding_dim": 16, "hidden": [256, 128], "cut_dim": 2},
                   "top": {"name": "linear"}},
         "schedule": "sized"}  # fmt: skip
EPS = (1.0, 4.0)
# the recipe search's candidates (docs/own-table.md, "How the recipe was chosen"), run with `--variants NAME ...`
# beside or instead of split_today / split_new. Keys: `model` (the leader's model; the followers get its bottom),
# `train` (train keys set at every party), `steps` (optimizer steps: the epochs that reach them at the sized batch),
# `epochs`, `batch_share` (the batch as a share of the training rows, within [64, 4096]), `lr_sqrt` ({base, ref,
# cap}: lr = base * sqrt(batch / ref) within [base, cap], Adam's square-root scaling rule as
# vfl/training/table_defaults.py's recipe_lr applies it), `schema` (flights only: {party: {column: spec}}, those
# columns' specs replaced and the parties' shards prepared again under them).
RECIPE = {"model": {"bottom": {"name": "wide_deep", "embedding_dim": 16, "hidden": [256, 128], "cut_dim": 16},
                    "top": {"name": "mlp", "hidden": [128]}}}  # fmt: skip
SQRT = {"base": 1e-3, "ref": 256, "cap": 4e-3}
WARM_LIN = {"lr_schedule": {"name": "linear", "warmup_steps": 50}}
WARM_COS = {"lr_schedule": {"name": "cosine", "warmup_steps": 50}}
PLE = {"kind": "numeric", "transform": {"embedding": "piecewise_linear", "bins": 32, "dim": 8}}
FLIGHT_NUMERICS = {"weather": {c: PLE for c in ("temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust",
                                                "pressure", "visib")},
                   "aircraft": {c: PLE for c in ("plane_year", "seats")}, "airline": {"distance": PLE}}  # fmt: skip
CUT32 = {"model": {"bottom": {**RECIPE["model"]["bottom"], "cut_dim": 32}, "top": {"name": "mlp", "hidden": [256]}}}
H128 = {"model": {"bottom": {**RECIPE["model"]["bottom"], "hidden": [128, 64]}, "top": RECIPE["model"]["top"]}}
SEARCH = {
    "lr3e-3": {**RECIPE, "steps": 1200, "train": {"lr": 3e-3}},
    "sqrt_300": {**RECIPE, "lr_sqrt": SQRT, "steps": 300},
    "sqrt_600": {**RECIPE, "lr_sqrt": SQRT, "steps": 600},
    "sqrt_600_lin": {**RECIPE, "lr_sqrt": SQRT, "steps": 600, "train": WARM_LIN},
    "sqrt_600_cos": {**RECIPE, "lr_sqrt": SQRT, "steps": 600, "train": WARM_COS},
    "sqrt_900": {**RECIPE, "lr_sqrt": SQRT, "steps": 900},
    "sqrt_1200": {**RECIPE, "lr_sqrt": SQRT, "steps": 1200},
    "sqrt_1200_lin": {**RECIPE, "lr_sqrt": SQRT, "steps": 1200, "train": WARM_LIN},
    "sqrt_1200_h128": {**H128, "lr_sqrt": SQRT, "steps": 1200},
    "sqrt_1200_h128_lin": {**H128, "lr_sqrt": SQRT, "steps": 1200, "train": WARM_LIN},
    "sqrt_800_h128_lin": {**H128, "lr_sqrt": SQRT, "steps": 800, "train": WARM_LIN},
    "sqrt_2000_h128_lin": {**H128, "lr_sqrt": SQRT, "steps": 2000, "train": WARM_LIN},
    "b4096_sqrt_1200_lin": {**RECIPE, "batch_share": 1.0, "lr_sqrt": SQRT, "steps": 1200, "train": WARM_LIN},
    "b0.5_sqrt_6ep": {**RECIPE, "batch_share": 0.005, "lr_sqrt": SQRT, "epochs": 6},
    "b0.5_lr3e-3_6ep": {**RECIPE, "batch_share": 0.005, "train": {"lr": 3e-3}, "epochs": 6},
    "b0.25_sqrt_6ep": {**RECIPE, "batch_share": 0.0025, "lr_sqrt": SQRT, "epochs": 6},
    "sqrt_600_ple": {**RECIPE, "lr_sqrt": SQRT, "steps": 600, "schema": FLIGHT_NUMERICS},
    "sqrt_600_cut32": {**CUT32, "lr_sqrt": SQRT, "steps": 600},
    "sqrt_1200_cut32": {**CUT32, "lr_sqrt": SQRT, "steps": 1200},
    "sqrt_1200_ple": {**RECIPE, "lr_sqrt": SQRT, "steps": 1200, "schema": FLIGHT_NUMERICS},
    "sqrt_1200_ple_weather": {
        **RECIPE,
        "lr_sqrt": SQRT,
        "steps": 1200,
        "schema": {"weather": FLIGHT_NUMERICS["weather"]},
    },  # fmt: skip
}


def islp_parties(name: str) -> tuple[pd.DataFrame, dict, str]:
    """(table with `id`, {party: schema doc}, task) of an ISLP table split by the alternating rule."""
    from ISLP import load_data

    label, task, positive, dropped = ISLP_TABLES[name]
    frame = load_data(name).drop(columns=list(dropped)).reset_index(drop=True)
    frame.insert(0, "id", np.arange(len(frame)))
    features = [c for c in frame.columns if c not in ("id", label)]
    kinds = {c: "categorical" if isinstance(frame[c].dtype, pd.CategoricalDtype) else "numeric" for c in features}
    for c in features:
        if kinds[c] == "categorical":
            frame[c] = frame[c].astype(str)
    lab = {"column": label, **({"clip": LABEL_CLIP[name]} if name in LABEL_CLIP else {})}
    if task == "binary":
        negative = next(str(v) for v in frame[label].astype(str).unique() if str(v) != positive)
        frame[label] = frame[label].astype(str)
        lab["classes"] = [negative, positive]
    schemas = {
        "leader": {"id": "id", "columns": {c: kinds[c] for c in features[0::2]}, "label": lab},
        "follower": {"id": "id", "columns": {c: kinds[c] for c in features[1::2]}},
    }
    return frame, schemas, task


def example_parties(name: str, raw: pathlib.Path) -> tuple[pd.DataFrame, dict, str, dict]:
    """(joined table with `id`, {party: schema doc}, task, {party: raw csv}) of an example, the leader first."""
    configs = ex.party_configs(name)
    paths = datasets.example_parties(name).main(raw)
    table, _, _ = ex.joined_table(name, raw)
    leader = next(iter(configs))
    task = configs[leader].get("train", {}).get("task", "binary")
    return table, {p: d["data"]["schema"] for p, d in configs.items()}, task, paths


def prepare_parties(work: pathlib.Path, files: dict, schemas: dict, task: str) -> dict[str, str]:
    """{party: shard dir}: each party's own file prepared under its schema (the leader first)."""
    from vfl.config.table_schema import SchemaConfig
    from vfl.data.prepare import PrepareOptions
    from vfl.data.prepare_table import prepare_table

    shards = {}
    for i, (party, schema) in enumerate(schemas.items()):
        shard = str(work / party)
        prepare_table(str(files[party]), shard, party, SchemaConfig.model_validate(schema), task if i == 0 else None,
                      PrepareOptions(force=True), log=lambda _: None)  # fmt: skip
        shards[party] = shard
    return shards


def party_configs(shards: dict, schemas: dict, task: str, seed: int, variant: dict, eps, work: pathlib.Path):
    """[leader config, *follower configs] of one split-model run: only task, seed and the variant's keys set."""
    from vfl.config.schema import parse_config
    from vfl.training.table_defaults import size_table_run

    parties = list(shards)
    out = []
    for i, party in enumerate(parties):
        doc = {"role": "leader" if i == 0 else "follower", "party": party,
               "data": {"path": shards[party], "schema": schemas[party]},
               "train": {**({"task": task} if i == 0 else {}), "seed": seed, "threads": 1},
               "output": {"dir": str(work / "out")}}  # fmt: skip
        doc["network"] = (
            {"bind": "tcp://127.0.0.1:1", "followers": parties[1:]} if i == 0 else {"connect": "tcp://127.0.0.1:1"}
        )
        if "model" in variant:
            doc["model"] = copy.deepcopy(variant["model"]) if i == 0 else {"bottom": variant["model"]["bottom"]}
        if i == 0 and eps is not None:
            doc["privacy"] = {"label_dp": {"eps": eps, "store_dir": str(work / f"store_{eps:g}")}}
        out.append(parse_config(doc))
    from vfl.data.shards import PartyShard

    sized, lines = [], []
    common = None
    all_shards = [PartyShard(shards[p]) for p in parties]
    for s in all_shards:
        common = s.all_ids() if common is None else np.intersect1d(common, s.all_ids())
    for cfg, shard in zip(out, all_shards):
        shard.restrict(common)
        cfg2, _ = size_table_run(cfg, shard, lines.append)
        sized.append(searched(cfg2, variant, len(shard.split("train"))))
    return sized, lines


def searched(cfg, variant: dict, train_rows: int):
    """A sized config with a search variant's train keys, steps and learning-rate rule applied (SEARCH)."""
    from vfl.config.schema import LRScheduleConfig

    update = dict(variant.get("train", {}))
    if "lr_schedule" in update:
        update["lr_schedule"] = LRScheduleConfig.model_validate(update["lr_schedule"])
    batch = cfg.train.batch_size
    if "batch_share" in variant:
        batch = update["batch_size"] = min(max(round(train_rows * variant["batch_share"]), 64), 4096)
    if "epochs" in variant:
        update["epochs"] = variant["epochs"]
    if "steps" in variant:
        update["epochs"] = max(1, math.ceil(variant["steps"] / math.ceil(train_rows / batch)))
    if "lr_sqrt" in variant:
        r = variant["lr_sqrt"]
        update["lr"] = min(max(r["base"] * math.sqrt(batch / r["ref"]), r["base"]), r["cap"])
    return cfg.model_copy(update={"train": cfg.train.model_copy(update=update)}) if update else cfg


def run_split(shards, schemas, task, seed, variant, eps, work) -> dict:
    from vfl.centralized import train_centralized
    from vfl.obs.metrics import RunLog

    work.mkdir(parents=True, exist_ok=True)
    cfgs, lines = party_configs(shards, schemas, task, seed, variant, eps, work)
    log = RunLog(str(work / "run.log"), "bench")
    t0 = time.perf_counter()
    m = train_centralized(cfgs[0], cfgs[1:], str(work / "out"), log)
    key = "test_rmse" if task == "regression" else "test_auc"
    t = cfgs[0].train
    said = f"batch {t.batch_size}, epochs {t.epochs}, lr {t.lr:.4g}, schedule {t.lr_schedule.name}"
    return {
        "value": float(m[key]),
        "seconds": time.perf_counter() - t0,
        "defaults": lines[:1] + [said],
        "steps": m.get("trained_steps", m.get("steps")),
        "said": said,
    }


def summary(values: list[float]) -> dict:
    """mean, sd and a 95% t-interval of the mean over seeds."""
    from scipy import stats

    v = np.asarray(values, float)
    mean = float(v.mean())
    if v.size < 2:
        return {"mean": mean, "sd": None, "ci95": None, "n": int(v.size)}
    sd = float(v.std(ddof=1))
    half = float(stats.t.ppf(0.975, v.size - 1) * sd / math.sqrt(v.size))
    return {"mean": mean, "sd": sd, "ci95": [mean - half, mean + half], "n": int(v.size)}


def baselines(table: pd.DataFrame, specs: dict, leader: str, task: str, y_all: np.ndarray, seeds) -> dict:
    split = ex.split_column(table["id"], 0, 0.1, 0.1)
    pooled = {c: s for party in specs.values() for c, s in party.items()}
    out: dict[str, list] = {"pooled_hgb": [], "pooled_linear": [], "leader_hgb": []}
    key = "rmse" if task == "regression" else "auc"
    for name, fs, fit in (("pooled_hgb", pooled, "trees"), ("pooled_linear", pooled, "linear"),
                          ("leader_hgb", specs[leader], "trees")):  # fmt: skip
        X = {s: table.loc[split == i, list(fs)] for i, s in enumerate(ex.SPLIT_NAMES)}
        y = {s: y_all[split == i] for i, s in enumerate(ex.SPLIT_NAMES)}
        for seed in seeds if fit == "trees" else seeds[:1]:  # the linear fit has no seed
            m = ex.fit_trees(task, fs, X, y, seed) if fit == "trees" else ex.fit_linear(task, fs, X, y)
            out[name].append(m[key])
    return out


def bench_table(name: str, out: pathlib.Path, seeds: list[int], label_dp: bool, variants: dict) -> dict:
    raw = out / name / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    if name in EXAMPLES:
        table, schemas, task, files = example_parties(name, raw)
    else:
        frame, schemas, task = islp_parties(name)
        files = {}
        for party, schema in schemas.items():
            cols = ["id", *schema["columns"], *([schema["label"]["column"]] if "label" in schema else [])]
            files[party] = str(raw / f"{party}.csv")
            frame[cols].to_csv(files[party], index=False)
        table = frame.copy()
        table["id"] = table["id"].astype(str)
    leader = next(iter(schemas))
    specs = {p: ex.column_specs(s) for p, s in schemas.items()}
    doc = {"data": {"schema": schemas[leader]}, "train": {"task": task}}
    _, y_all = ex.label_values(doc, table)
    results = {k: {"values": v} for k, v in baselines(table, specs, leader, task, y_all, seeds).items()}
    print(f"== {name}: {len(table)} rows, {task}, parties {list(schemas)}", flush=True)
    shards = prepare_parties(out / name / "shards", files, schemas, task)
    for vname, variant in variants.items():
        if "schema" in variant and name == "flights":
            changed = {
                p: {**s, "columns": {**s["columns"], **variant["schema"].get(p, {})}} for p, s in schemas.items()
            }
            v_shards = prepare_parties(out / name / f"shards_{vname}", files, changed, task)
        else:
            v_shards = shards
        for eps in (None, *(EPS if label_dp else ())):
            label = vname if eps is None else f"{vname}_eps{eps:g}"
            runs = []
            for seed in seeds:
                r = run_split(v_shards, schemas, task, seed, variant, eps, out / name / label / f"seed{seed}")
                runs.append(r)
                print(
                    f"  {name} {label:<14} seed {seed}: {r['value']:.4f} ({r['seconds']:.0f} s; {r['said']}, "
                    f"trained steps {r['steps']})",
                    flush=True,
                )
            results[label] = {"values": [r["value"] for r in runs], "seconds": [r["seconds"] for r in runs],
                              "defaults": runs[0]["defaults"]}  # fmt: skip
    for r in results.values():
        r.update(summary(r["values"]))
    return {"task": task, "rows": len(table), "parties": {p: list(s["columns"]) for p, s in schemas.items()},
            "metric": "rmse" if task == "regression" else "auc", "results": results}  # fmt: skip


def _cell(r: dict) -> str:
    if r.get("sd") is None:
        return f"{r['mean']:.4f}"
    return f"{r['mean']:.4f} ± {r['sd']:.4f} [{r['ci95'][0]:.4f}, {r['ci95'][1]:.4f}]"


def table_lines(report: dict) -> list[str]:
    cols = ["pooled_hgb", "pooled_linear", "leader_hgb", "split_today", "split_new"]
    extra = sorted({k for t in report["tables"].values() for k in t["results"] if k not in cols})
    cols += extra
    lines = ["| table | metric | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for name, t in report["tables"].items():
        cells = [_cell(t["results"][c]) if c in t["results"] else "-" for c in cols]
        lines.append(f"| {name} | {t['metric']} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", choices=TABLES, default=list(TABLES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--label-dp", action="store_true", help="the split models at label DP eps 1 and 4 too")
    ap.add_argument("--out", default="runs/bench_tabular")
    ap.add_argument("--variants", nargs="+", default=["split_today", "split_new"],
                    choices=["split_today", "split_new", *SEARCH], help="the split models to run (SEARCH: the "
                    "recipe search's candidates)")  # fmt: skip
    args = ap.parse_args(argv)
    import torch

    from vfl.obs.logs import set_verbosity

    torch.set_num_threads(1)
    set_verbosity(quiet=True)
    out = pathlib.Path(args.out)
    variants = {k: {"split_today": TODAY, "split_new": {}, **SEARCH}[k] for k in args.variants}
    report = {
        "command": " ".join(["bash scripts/bench_tabular.sh", *(sys.argv[1:] if argv is None else argv)]),
        "cpu": cpu_model(),
        "load_before": load_text(),
        "seeds": args.seeds,
        "split_model_path": "vfl/centralized.py (in-process; split training equals it)",
        "tables": {},
    }
    print(f"machine: {report['cpu']}; load: {report['load_before']}", flush=True)
    for name in args.tables:
        report["tables"][name] = bench_table(name, out, args.seeds, args.label_dp, variants)
        write_json(str(out / "bench_tabular.json"), report)
    report["load_after"] = load_text()
    write_json(str(out / "bench_tabular.json"), report)
    print("\n".join(table_lines(report)))
    print(f"load after: {report['load_after']}\n== {out / 'bench_tabular.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
