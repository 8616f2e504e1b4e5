"""K-class label DP, one table: test accuracy / macro AUC / logloss of {no DP, plain k-ary RR, forward
correction, RRWithPrior with the all-party LP-2ST prior} for each eps, on one prepared K-class shard set
(synthetic `synth --classes K` or digits). Every run is the centralized reference (split training
computes the same steps, tested) with the example's selection on randomized validation labels.

Usage: python -m benchmarks.multiclass --example multiclass|digits --shards DIR --out DIR [--eps 1,2]
       [--methods none,plain,forward,rr_prior] [--seeds 0] [--prior-epochs E]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import yaml

from benchmarks.common import cpu_model, mean_sd, spread, write_json

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = {
    "plain": {"mechanism": "rr"},
    "forward": {"mechanism": "rr", "debias": True},
    "rr_prior": {"mechanism": "rr_prior"},
}


def run(example: str, shards: str, out: str, privacy: dict | None, seed: int) -> dict:
    from vfl.centralized import train_centralized
    from vfl.config.schema import parse_config
    from vfl.obs.metrics import RunLog

    docs = []
    for name in ("leader", "follower"):
        doc = yaml.safe_load(open(os.path.join(REPO, "examples", example, f"{name}.yaml")))
        doc["data"]["path"] = os.path.join(shards, doc["party"])
        doc["output"]["dir"] = out
        doc["train"]["seed"] = seed
        doc["train"]["log_every"] = 10**6
        docs.append(doc)
    if privacy:  # the bench's own ledger (--out), where every eps of the sweep is its own release: no budget
        docs[0]["privacy"] = {"label_dp": {"budget": float("inf"), **privacy}}
    os.makedirs(out, exist_ok=True)
    leader, follower = parse_config(docs[0]), parse_config(docs[1])
    return train_centralized(leader, [follower], out, RunLog(os.path.join(out, "centralized.log")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", choices=["multiclass", "digits"], required=True)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--eps", default="1")
    ap.add_argument("--methods", default="none,plain,forward,rr_prior")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--prior-epochs", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ.setdefault("VFL_LABEL_DP_STORE", os.path.join(os.path.abspath(args.out), "label_dp_store"))
    os.makedirs(os.environ["VFL_LABEL_DP_STORE"], mode=0o700, exist_ok=True)
    methods = args.methods.split(",")
    cells = [("none", None)] if "none" in methods else []
    cells += [(m, float(e)) for e in args.eps.split(",") for m in methods if m != "none"]
    rows, t0 = [], time.perf_counter()
    for i, (method, eps) in enumerate(cells):
        runs = []
        for seed in (int(s) for s in args.seeds.split(",")):
            privacy = None if eps is None else {**METHODS[method], "eps": eps, "prior_epochs": args.prior_epochs}
            if privacy and method != "rr_prior":
                privacy.pop("prior_epochs")
            out = os.path.join(args.out, f"{method}_eps{eps}_seed{seed}")
            m = run(args.example, args.shards, out, privacy, seed)
            runs.append(m)
        ld = runs[0]["label_dp"] or {}
        row = {
            "method": method,
            "eps": eps,
            "seeds": len(runs),
            **{k: statistics.mean(r[k] for r in runs) for k in ("test_accuracy", "test_auc", "test_logloss")},
            "accuracy_sd": spread(r["test_accuracy"] for r in runs),
            "collapse_fraction": ld.get("collapse_fraction"),
            "mean_k_star": ld.get("mean_k_star"),
            "train_label_correct": None if not ld else 1.0 - ld["flipped_fraction"],
            "bayes_test_accuracy": runs[0].get("bayes_test_accuracy"),
        }
        rows.append(row)
        done = time.perf_counter() - t0
        print(
            f"[{i + 1}/{len(cells)}] {method} eps={eps}: test accuracy {row['test_accuracy']:.4f} "
            f"({done:.0f} s, ETA {done / (i + 1) * (len(cells) - i - 1):.0f} s)",
            flush=True,
        )
    print(
        f"\n{args.example}: centralized reference, seeds {args.seeds}, {cpu_model()}, {time.perf_counter() - t0:.0f} s"
    )
    print("| method | eps | test accuracy | macro AUC | logloss | train labels correct | collapse | mean k* |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        opt = lambda v: "" if v is None else f"{v:.4f}"  # noqa: E731
        acc = mean_sd(r["test_accuracy"], r["accuracy_sd"]) if r["seeds"] > 1 else f"{r['test_accuracy']:.4f}"
        kstar = "" if r["mean_k_star"] is None else f"{r['mean_k_star']:.2f}"
        print(
            f"| {r['method']} | {'none' if r['eps'] is None else r['eps']} | {acc} | {r['test_auc']:.4f} | "
            f"{r['test_logloss']:.4f} | {opt(r['train_label_correct'])} | {opt(r['collapse_fraction'])} | {kstar} |"
        )
    if rows and rows[0].get("bayes_test_accuracy"):
        print(f"Bayes-optimal test accuracy of this data: {rows[0]['bayes_test_accuracy']:.4f}")
    write_json(os.path.join(args.out, "bench_multiclass.json"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
