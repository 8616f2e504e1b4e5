"""Selection rules replayed on recorded curves: train every seed for all epochs (no stopping), keep each
evaluation's validation (debiased, on randomized labels under DP) and test AUC, then replay early-stopping rules
offline (patience x trailing-mean window x metric) and report each rule's test AUC against the test oracle.

What it answers: on a dataset this size, could any selection rule on the validation split come within a target of
the best evaluated test AUC? The replay never changes training: a rule's chosen step is a step the run evaluated,
and restoring it gives that evaluation's model (tested in test_model_selection).

Usage: python -m benchmarks.replay_selection --out DIR [--dataset real|synthetic] [--seeds 10] [--epochs 30]
       [--eps 1,inf] [--rows N] (synthetic) [--eval-every N] (synthetic)
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

import numpy as np

PATIENCES = (3, 5, 10, 1000)
WINDOWS = (1, 2, 3, 5)
METRICS = ("auc", "logloss")


def select(curve: list[dict], metric: str, patience: int, window: int) -> int:
    """The index early stopping would restore: vfl.training.selection's own rule, fed the trailing mean of the last
    `window` validation values (window 1 is the rule training uses)."""
    from vfl.training.selection import EarlyStopping

    rule, seen = EarlyStopping(metric, patience), []
    for i, e in enumerate(curve):
        seen.append(e[f"valid_{metric}"])
        rule.update(float(np.mean(seen[-window:])), step=i, epoch=0)
        if rule.should_stop:
            break
    return rule.best_step


def record(args) -> dict:
    from benchmarks import utility as bu
    from benchmarks.datasets import synthetic_criteo
    from vfl.centralized import train_centralized
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    if args.dataset == "real":
        if not os.path.exists(bu.REAL):
            raise SystemExit(f"error: the real sample is absent ({bu.REAL})")
        src, batch, every = bu.REAL, 64, 0
        opts = PrepareOptions(hash_buckets=1_000, vocab_min_count=10, force=True)
    else:
        src = synthetic_criteo(args.rows, os.path.join(args.out, f"synth_{args.rows}.tsv"))
        batch, every = None, args.eval_every
        opts = PrepareOptions(hash_buckets=20_000, vocab_min_count=10, force=True)
    shards = os.path.join(args.out, "shards")
    prepare(src, shards, load_parties(None), opts)
    quiet = lambda line: None  # noqa: E731
    quiet.error = print
    curves, t0 = {}, time.perf_counter()
    eps_list = [float(e) for e in args.eps.split(",")]
    total = len(eps_list) * args.seeds
    for eps in eps_list:
        for seed in range(args.seeds):
            privacy = None if math.isinf(eps) else {"eps": eps, **bu.METHODS["forward"]}
            lc, fc = bu.configs(
                shards,
                f"{args.out}/run_{eps}_{seed}",
                privacy,
                seed,
                args.epochs,
                every,
                batch,
                early_stopping={"patience": 10**4},
            )
            m = train_centralized(lc, [fc], lc.output.dir, quiet)
            curves[f"{eps}/{seed}"] = [
                {
                    "step": h["step"],
                    "test_auc": h["test_auc"],
                    "valid_auc": h["valid"]["auc"],
                    "valid_logloss": h["valid"]["logloss"],
                }
                for h in m["history"]
            ]
            done = len(curves)
            rate = done / (time.perf_counter() - t0)
            print(
                f"[{done}/{total}] eps={eps} seed {seed}: oracle test AUC "
                f"{max(e['test_auc'] for e in curves[f'{eps}/{seed}']):.4f}  (ETA {(total - done) / rate:.0f} s)",
                flush=True,
            )
    return curves


def report(curves: dict) -> list[dict]:
    rows = []
    for eps in sorted({k.split("/")[0] for k in curves}):
        runs = [c for k, c in curves.items() if k.split("/")[0] == eps]
        test = np.array([[e["test_auc"] for e in c] for c in runs])
        valid = np.array([[e["valid_auc"] for e in c] for c in runs])
        corr = statistics.mean(float(np.corrcoef(t, v)[0, 1]) for t, v in zip(test, valid))
        oracle = test.max(axis=1)
        print(
            f"\neps {eps}: {len(runs)} seeds; test oracle {oracle.mean():.4f}, last evaluation {test[:, -1].mean():.4f}; "
            f"validation-test correlation over evaluations {corr:+.2f}; best evaluation by validation AUC at "
            f"{valid.mean(0).argmax()} and by test AUC at {test.mean(0).argmax()} (mean curves)"
        )
        print("| metric | patience | window | reported test AUC | mean gap to oracle | max gap |")
        print("|---|---|---|---|---|---|")
        for metric in METRICS:
            for patience in PATIENCES:
                for window in WINDOWS:
                    picked = np.array([c[select(c, metric, patience, window)]["test_auc"] for c in runs])
                    gaps = oracle - picked
                    rows.append(
                        {
                            "eps": eps,
                            "metric": metric,
                            "patience": patience,
                            "window": window,
                            "reported": float(picked.mean()),
                            "mean_gap": float(gaps.mean()),
                            "max_gap": float(gaps.max()),
                        }
                    )
                    print(
                        f"| {metric} | {patience} | {window} | {picked.mean():.4f} ± {picked.std():.4f} | "
                        f"{gaps.mean():.4f} | {gaps.max():.4f} |"
                    )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/replay_selection")
    ap.add_argument("--dataset", choices=("real", "synthetic"), default="real")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--eps", default="1,inf")
    ap.add_argument("--rows", type=int, default=100_000, help="synthetic rows")
    ap.add_argument("--eval-every", type=int, default=200, help="synthetic: evaluate every N steps")
    args = ap.parse_args(argv)
    try:
        eps_ok = all(float(e) > 0 for e in args.eps.split(","))
    except ValueError:
        eps_ok = False
    if args.seeds < 1 or args.epochs < 1 or args.rows < 1000 or args.eval_every < 1 or not eps_ok:
        print(
            f"error: need --seeds >= 1, --epochs >= 1, --rows >= 1000, --eval-every >= 1 and every eps > 0 "
            f"(comma-separated, inf for none); got {vars(args)}",
            file=sys.stderr,
        )
        return 2
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("VFL_LABEL_DP_STORE", tempfile.mkdtemp(prefix="replay-label-dp-store-"))
    curves = record(args)
    json.dump(curves, open(os.path.join(args.out, "curves.json"), "w"))
    rows = report(curves)
    json.dump(rows, open(os.path.join(args.out, "rules.json"), "w"), indent=2)
    print(f"\nwrote {args.out}/curves.json and rules.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
