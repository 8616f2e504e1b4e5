"""Utility under label DP, one command: test AUC / logloss of the selected model for eps in
{0.5, 1, 2, 4, 8, none} x {plain RR, forward correction, posterior soft labels, RRWithPrior}, mean and
spread (the sample sd, benchmarks.common.spread) over training seeds, on synthetic data (with its Bayes ceiling) and on
the real 1k sample.

Every run is the centralized reference (split training computes the same steps; see the tests) with
the validation split, early stopping on randomized validation labels and best-step restore, so each
cell reports the method and the selected step. A logistic regression on the same split and the same
(randomized) training labels is the floor every cell should beat (rr_prior cells show the floor on plain-RR labels).

Usage: python -m benchmarks.utility --out DIR [--rows N] [--seeds K] [--eps 0.5,1,2,4,8,inf] [--epochs E]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

from benchmarks.common import RunProgress, mean_sd, spread, write_json

REAL = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "criteo_raw_1k.tsv"
)
METHODS = {
    "plain": {"mechanism": "rr", "debias": False},
    "forward": {"mechanism": "rr", "debias": True},
    "posterior": {"mechanism": "rr", "debias": True, "correction": "posterior"},
    "rr_prior": {"mechanism": "rr_prior"},
}


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "wide_deep_criteo")


def configs(
    shards: str,
    out: str,
    privacy: dict | None,
    seed: int,
    epochs: int,
    eval_every: int,
    batch: int | None,
    lr: float | None = None,
    early_stopping: dict | None = None,
    wide_cut: bool = False,
    example: str = EXAMPLE,
):
    """The example configs (examples/wide_deep_criteo, or `example`: model, lr, batch, early stopping) with this cell's data,
    output, seed, epochs, evaluation interval, privacy, and (where given) batch size, lr and early-stopping fields.
    wide_cut: cut_dim 8 on every party and an MLP top (hidden [64]), so the top can learn cross-party interactions."""
    import yaml

    from vfl.config.schema import parse_config

    docs = {}
    for name in ("leader", "follower"):
        with open(os.path.join(example, f"{name}.yaml")) as f:
            doc = yaml.safe_load(f)
        doc["data"]["path"] = f"{shards}/{doc['party']}"
        doc["output"] = {"dir": out}
        doc["train"].update({"epochs": epochs, "seed": seed, "log_every": 10**6, "eval_every_steps": eval_every})
        if batch is not None:
            doc["train"]["batch_size"] = batch
        if lr is not None:
            doc["train"]["lr"] = lr
        if wide_cut:
            doc["model"]["bottom"]["cut_dim"] = 8
            if name == "leader":
                doc["model"]["top"] = {"name": "mlp", "hidden": [64]}
        docs[name] = doc
    if early_stopping:
        docs["leader"]["train"]["early_stopping"].update(early_stopping)
    docs["leader"].pop("privacy", None)
    if privacy:  # a throwaway ledger (main), where every eps of the sweep is its own release: no budget
        docs["leader"]["privacy"] = {"label_dp": {"budget": math.inf, **privacy}}
    return parse_config(docs["leader"]), parse_config(docs["follower"])


def logistic_baseline(shards: str, train_labels, seed: int) -> float:
    """Logistic regression on one-hot categoricals + dense values of all parties, trained on train_labels."""
    import numpy as np
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from vfl.data.shards import PartyShard

    def design(split):
        blocks = []
        for party in ("leader", "follower0"):
            s = PartyShard(f"{shards}/{party}").split(split)
            cat = np.asarray(s.cat, np.int64)
            offs = np.cumsum([0] + [int(cat[:, j].max(initial=0)) + 1 for j in range(cat.shape[1])])[:-1]
            blocks.append((np.asarray(s.dense), np.asarray(s.dense_missing), cat, offs))
        return blocks

    tr, te = design("train"), design("test")
    mats_tr, mats_te = [], []
    for (d, m, c, _), (d2, m2, c2, _) in zip(tr, te):
        width = max(int(c.max(initial=0)), int(c2.max(initial=0))) + 1
        cols_tr = (c + np.arange(c.shape[1]) * width).ravel()
        cols_te = (c2 + np.arange(c2.shape[1]) * width).ravel()
        shape = c.shape[1] * width
        oh_tr = sparse.csr_matrix(
            (np.ones(cols_tr.size), (np.repeat(np.arange(c.shape[0]), c.shape[1]), cols_tr)), (c.shape[0], shape)
        )
        oh_te = sparse.csr_matrix(
            (np.ones(cols_te.size), (np.repeat(np.arange(c2.shape[0]), c2.shape[1]), cols_te)), (c2.shape[0], shape)
        )
        mats_tr += [sparse.csr_matrix(np.hstack([d, m])), oh_tr]
        mats_te += [sparse.csr_matrix(np.hstack([d2, m2])), oh_te]
    x_tr, x_te = sparse.hstack(mats_tr).tocsr(), sparse.hstack(mats_te).tocsr()
    y_te = PartyShard(f"{shards}/leader").split("test").labels
    lr = LogisticRegression(C=0.1, solver="liblinear", max_iter=200, random_state=seed).fit(
        x_tr, np.asarray(train_labels)
    )
    return float(roc_auc_score(y_te, lr.predict_proba(x_te)[:, 1]))


def run_dataset(
    name: str,
    shards: str,
    out: str,
    eps_list,
    seeds: int,
    epochs: int,
    eval_every: int,
    batch: int | None,
    progress,
    methods: list[str],
    lr: float | None = None,
    wide_cut: bool = False,
    example: str = EXAMPLE,
) -> list[dict]:
    from vfl.centralized import train_centralized
    from vfl.config.schema import LabelDPConfig
    from vfl.data.shards import PartyShard
    from vfl.labeldp.release import LabelDPRelease, leader_training_labels

    quiet = lambda line: None  # noqa: E731
    quiet.error = print
    cells = []
    floors: dict = {}  # (eps, mechanism) -> logistic regression AUC on the same randomized training labels
    grid = [(eps, meth) for eps in eps_list for meth in (methods if not math.isinf(eps) else ["none"])]
    for eps, meth in grid:
        runs = []
        for seed in range(seeds):
            privacy = None if math.isinf(eps) else {"eps": eps, **METHODS[meth]}
            lc, fc = configs(
                shards,
                f"{out}/{name}/{meth}_{eps}_{seed}",
                privacy,
                seed,
                epochs,
                eval_every,
                batch,
                lr,
                wide_cut=wide_cut,
                example=example,
            )
            m = train_centralized(lc, [fc], lc.output.dir, quiet)
            runs.append(m)
            progress(f"{name} eps={eps} {meth} seed {seed}: test AUC {m['test_auc']:.4f} at step {m['model_step']}")
        mech = "none" if math.isinf(eps) else METHODS[meth]["mechanism"]
        if (eps, mech) not in floors:
            ld = None if math.isinf(eps) else LabelDPConfig(eps=eps, mechanism="rr")
            labels = leader_training_labels(LabelDPRelease.from_config(ld), PartyShard(f"{shards}/leader")).labels
            floors[(eps, mech)] = logistic_baseline(shards, labels, 0)
        aucs = [r["test_auc"] for r in runs]
        # the oracle: the best test AUC any evaluated step reached (reported only; selection never reads test)
        oracle = [max(h["test_auc"] for h in r["history"]) for r in runs]
        lls = [r["test_logloss"] for r in runs]
        cells.append(
            {
                "dataset": name,
                "eps": "none" if math.isinf(eps) else eps,
                "method": meth,
                "test_auc_mean": statistics.mean(aucs),
                "test_auc_sd": spread(aucs),
                "test_logloss_mean": statistics.mean(lls),
                "test_logloss_sd": spread(lls),
                "oracle_test_auc_mean": statistics.mean(oracle),
                "max_gap_to_oracle": max(o - a for o, a in zip(oracle, aucs)),
                "selected_steps": [r["model_step"] for r in runs],
                "steps_trained": [r["steps"] for r in runs],
                "logistic_regression_auc": floors[(eps, mech)],
                "bayes_test_auc": runs[0].get("bayes_test_auc"),
            }
        )
    return cells


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/bench_utility")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--eps", default="0.5,1,2,4,8,inf")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=0, help="synthetic: evaluate every N steps (default rows/1000)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"subset of {','.join(METHODS)}")
    ap.add_argument("--datasets", default="synthetic,real", help="subset of synthetic,real")
    ap.add_argument(
        "--real-min-count",
        type=int,
        default=10,
        help="real sample: vocabulary of values seen >= N times, rarer ones share one id (0 = hash 1000 "
        "buckets); 10 as in the BARS Criteo preprocessing (Zhu et al., CIKM 2021)",
    )
    ap.add_argument(
        "--lr", type=float, default=None, help="the learning rate of every run (default: the example configs')"
    )
    ap.add_argument(
        "--synth-min-count",
        type=int,
        default=10,
        help="synthetic data: vocabulary of values seen >= N times (0 = hash 20000 buckets); 10 as the "
        "front door (run_vfl_train_local.sh) prepares it",
    )
    ap.add_argument(
        "--label-seed",
        type=int,
        default=None,
        help="synthetic data: the seed of its label world (default: a secret one per generated file, so each run "
        "draws its own world); give one to compare examples side by side in one world, or to repeat a run",
    )
    ap.add_argument(
        "--wide-cut",
        action="store_true",
        help="cut_dim 8 on every party and an MLP top (hidden [64]) instead of the examples' 2-value cut and linear top",
    )
    ap.add_argument(
        "--example",
        default=EXAMPLE,
        help="the directory of the leader.yaml / follower.yaml every run starts from (default: examples/wide_deep_criteo; "
        "examples/recipe_criteo: the small-table recipe that beats the logistic regression, docs/models.md)",
    )
    args = ap.parse_args(argv)
    eps_list = [float(e) for e in args.eps.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    if any(m not in METHODS for m in methods):
        print(f"error: --methods must be a subset of {','.join(METHODS)}, got {args.methods!r}", file=sys.stderr)
        return 2
    datasets_wanted = {d for d in args.datasets.split(",") if d}
    if not datasets_wanted or datasets_wanted - {"synthetic", "real"}:
        print(f"error: --datasets must be a non-empty subset of synthetic,real, got {args.datasets!r}", file=sys.stderr)
        return 2
    for flag in ("real_min_count", "synth_min_count"):
        if getattr(args, flag) < 0:
            print(f"error: --{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    if (
        args.rows < 1000
        or args.seeds < 1
        or args.epochs < 1
        or any(e <= 0 for e in eps_list)
        or (args.lr is not None and not args.lr > 0)
    ):
        print(
            f"error: need --rows >= 1000, --seeds >= 1, --epochs >= 1, every eps > 0, --lr > 0; got {vars(args)}",
            file=sys.stderr,
        )
        return 2
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("VFL_LABEL_DP_STORE", tempfile.mkdtemp(prefix="bench-label-dp-store-"))  # a throwaway ledger

    from benchmarks.datasets import synthetic_criteo
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    datasets = []
    if "synthetic" in datasets_wanted:
        world = "" if args.label_seed is None else f"_world{args.label_seed}"
        synth = os.path.join(args.out, f"synth_{args.rows}{world}.tsv")
        synthetic_criteo(args.rows, synth, label_seed=args.label_seed)
        prepare(
            synth,
            os.path.join(args.out, "shards_synth"),
            load_parties(None),
            PrepareOptions(hash_buckets=20_000, vocab_min_count=args.synth_min_count or None, force=True),
        )
        datasets.append(
            (
                "synthetic",
                os.path.join(args.out, "shards_synth"),
                args.eval_every or max(args.rows // 10_000, 1) * 10,
                None,
            )
        )
    if "real" in datasets_wanted and os.path.exists(REAL):
        opts = PrepareOptions(hash_buckets=1_000, vocab_min_count=args.real_min_count or None, force=True)
        prepare(REAL, os.path.join(args.out, "shards_real"), load_parties(None), opts)
        datasets.append(("real 1k sample", os.path.join(args.out, "shards_real"), 0, 64))
    elif "real" in datasets_wanted:
        print(f"real sample absent ({REAL}): synthetic only")
    total = sum(
        args.seeds
        * (sum(len(methods) for e in eps_list if not math.isinf(e)) + sum(1 for e in eps_list if math.isinf(e)))
        for _ in datasets
    )
    run_progress = RunProgress(total)

    def progress(line: str) -> None:
        print(run_progress.line(line), flush=True)

    cells = []
    for name, shards, eval_every, batch in datasets:
        cells += run_dataset(
            name,
            shards,
            args.out,
            eps_list,
            args.seeds,
            args.epochs,
            eval_every,
            batch,
            progress,
            methods,
            args.lr,
            args.wide_cut,
            args.example,
        )
    for c in cells:  # which world the synthetic cells came from (None: a secret one)
        c.setdefault("label_seed", args.label_seed if c["dataset"] == "synthetic" else None)
    write_json(os.path.join(args.out, "utility.json"), cells)
    print(
        "\n| data | eps | method | test AUC (mean ± sd) | best-step test AUC (oracle) | max gap | test logloss | "
        "selected steps | LR baseline AUC | Bayes AUC |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        bayes = f"{c['bayes_test_auc']:.4f}" if c["bayes_test_auc"] else "-"
        print(
            f"| {c['dataset']} | {c['eps']} | {c['method']} | {mean_sd(c['test_auc_mean'], c['test_auc_sd'])} | {c['oracle_test_auc_mean']:.4f} | "
            f"{c['max_gap_to_oracle']:.4f} | {mean_sd(c['test_logloss_mean'], c['test_logloss_sd'])} | {c['selected_steps']} of {c['steps_trained']} | "
            f"{c['logistic_regression_auc']:.4f} | {bayes} |"
        )
    print(f"\nwrote {os.path.join(args.out, 'utility.json')} ({time.perf_counter() - run_progress.t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
