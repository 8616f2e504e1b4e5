"""Utility of label DP variants on synthetic data: test AUC, logloss and the gap to the Bayes AUC.

Runs the centralized reference (split training computes the same losses; see the tests) for
eps in {0.5, 1, 2, 4, 8, inf} x {plain RR, RR + forward correction (debias), RRWithPrior (LP-2ST)}.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

from vfl.centralized import train_centralized
from vfl.config import parse_config
from vfl.metrics import RunLog



def configs(shards: str, out: str, privacy: dict | None):
    model = {"bottom": {"embedding_dim": 16, "hidden": [128, 64], "cut_dim": 2}}
    train = {"epochs": 1, "batch_size": 1024, "seed": 0, "log_every": 10**6, "lr": 0.001}
    net = {"timeout_s": 60}
    leader = {"role": "leader", "party": "leader", "network": {**net, "bind": "tcp://127.0.0.1:1", "followers": ["follower0"]},
              "data": {"path": f"{shards}/leader"}, "model": {**model, "top": {"name": "linear"}}, "train": train,
              "output": {"dir": out}}
    if privacy:
        leader["privacy"] = {"label_dp": privacy}
    follower = {"role": "follower", "party": "follower0", "network": {**net, "connect": "tcp://127.0.0.1:1"},
                "data": {"path": f"{shards}/follower0"}, "model": model, "train": train, "output": {"dir": out}}
    return parse_config(leader), parse_config(follower)


def main() -> int:
    shards, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    log = RunLog(None)
    quiet = lambda line: None  # noqa: E731
    quiet.error = log.error
    variants = {"plain": {"mechanism": "rr"}, "debias": {"mechanism": "rr", "debias": True}, "rr_prior": {"mechanism": "rr_prior"}}
    rows = []
    for eps in (0.5, 1.0, 2.0, 4.0, 8.0, math.inf):
        for name, extra in variants.items():
            t0 = time.perf_counter()
            lc, fc = configs(shards, f"{out}/{name}_{eps}", {"eps": eps, **extra})
            m = train_centralized(lc, [fc], lc.output.dir, quiet)
            ld = m["label_dp"]
            rows.append({"eps": "inf" if math.isinf(eps) else eps, "variant": name, "test_auc": m["test_auc"],
                         "test_logloss": m["test_logloss"], "gap_to_bayes": m["bayes_test_auc"] - m["test_auc"],
                         "flipped_fraction": ld["flipped_fraction"], "collapse_fraction": ld.get("collapse_fraction"),
                         "seconds": round(time.perf_counter() - t0, 1)})
            r = rows[-1]
            print(f"eps {str(r['eps']):>4}  {name:<8}  AUC {r['test_auc']:.4f}  logloss {r['test_logloss']:.4f}  "
                  f"gap {r['gap_to_bayes']:.4f}  flipped {r['flipped_fraction']:.3f}"
                  + (f"  collapse {r['collapse_fraction']:.2f}" if r["collapse_fraction"] is not None else ""), flush=True)
    bayes = m["bayes_test_auc"]
    json.dump({"bayes_test_auc": bayes, "rows": rows}, open(f"{out}/label_dp_bench.json", "w"), indent=2)
    print(f"\nBayes-optimal test AUC {bayes:.4f}\n")
    print("| eps | variant | test AUC | test logloss | gap to Bayes | flipped |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['eps']} | {r['variant']} | {r['test_auc']:.4f} | {r['test_logloss']:.4f} | {r['gap_to_bayes']:.4f} | {r['flipped_fraction']:.3f} |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return 0
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    xs = [0.5, 1, 2, 4, 8, 16]
    for name in variants:
        sel = [r for r in rows if r["variant"] == name]
        axes[0].plot(xs, [r["test_auc"] for r in sel], marker="o", label=name)
        axes[1].plot(xs, [r["test_logloss"] for r in sel], marker="o", label=name)
    axes[0].axhline(bayes, color="k", ls="--", label="Bayes-optimal")
    for ax, title in zip(axes, ("test AUC", "test logloss")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, ["0.5", "1", "2", "4", "8", "inf"])
        ax.set_xlabel("eps")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(f"{out}/label_dp_auc.png", dpi=100)
    print(f"plot: {out}/label_dp_auc.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
