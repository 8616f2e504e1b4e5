"""Label DP and embedding DP together: test AUC and the leader's attack on the follower's columns per (label eps,
embedding eps), on the front door's synthetic data, each cell a real two-process run on 127.0.0.1.

Every cell trains leader + follower0 (the default Criteo split of `vfl-data synth` rows: the follower holds I8-I13
and C14-C26) for --epochs epochs; the follower records what it sends (debug.record_cuts: the leader's view), the
leader's metrics.json gives the test AUC. The attack (privacy/attacks/embedding_inversion.py) links every training
send of a row (their mean), knows 1% of the follower's training rows, and decodes each follower column: the table
prints the strongest categorical column's accuracy against its majority prior, and the best numeric column's R^2.

Usage: python scripts/bench_embedding_dp.py [--rows N] [--epochs E] [--label-eps LIST] [--embedding-eps LIST]
       [--clip C] [--out DIR]   (LIST: comma-separated numbers, `none` = off)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _eps_list(text: str) -> list[float | None]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if part in ("none", "off"):
            out.append(None)
            continue
        try:
            value = float(part)
        except ValueError:
            raise SystemExit(f"bench_embedding_dp: eps must be a number > 0 or none, got {part!r}") from None
        if not value > 0:
            raise SystemExit(f"bench_embedding_dp: eps must be a number > 0 or none, got {part!r}")
        out.append(value)
    return out


def _prepare(work: str, rows: int) -> str:
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare
    from vfl.data.synth.criteo import write_synthetic
    from vfl.wire.keys import create_key_pair

    raw = os.path.join(work, "rows.tsv")
    write_synthetic(raw, rows, seed=7, max_vocab=2_000)
    shards = os.path.join(work, "shards")
    prepare(raw, shards, load_parties(None), PrepareOptions(hash_buckets=2_000, seed=0))
    for party in ("leader", "follower0"):
        create_key_pair(party, os.path.join(work, "keys"))
    return shards


def _configs(work: str, shards: str, cell: str, epochs: int, label_eps, emb_eps, clip: float) -> dict[str, str]:
    from vfl.ports import free_port
    from vfl.wire.keys import key_paths

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    keys = {p: key_paths(os.path.join(work, "keys"), p) for p in ("leader", "follower0")}
    out = os.path.join(work, cell)
    train = {"epochs": epochs, "batch_size": 512, "seed": 0, "log_every": 10**6, "lr": 0.01, "threads": 1}
    model = {"bottom": {"embedding_dim": 8, "hidden": [64, 32], "cut_dim": 8}}
    leader = {
        "role": "leader",
        "party": "leader",
        "network": {
            "bind": endpoint,
            "followers": ["follower0"],
            "timeout_s": 120,
            "secret_key_file": keys["leader"][1],
            "follower_keys": {"follower0": keys["follower0"][0]},
        },
        "data": {"path": os.path.join(shards, "leader")},
        "model": {**model, "top": {"name": "mlp", "hidden": [32]}},
        "train": train,
        "output": {"dir": out},
    }
    if label_eps is not None:  # a throwaway store per cell: each cell is its own release
        store = os.path.join(out, "label_dp_store")
        leader["privacy"] = {"label_dp": {"eps": label_eps, "budget": math.inf, "store_dir": store}}
    follower = {
        "role": "follower",
        "party": "follower0",
        "network": {
            "connect": endpoint,
            "timeout_s": 120,
            "secret_key_file": keys["follower0"][1],
            "leader_key_file": keys["leader"][0],
        },
        "data": {"path": os.path.join(shards, "follower0")},
        "model": model,
        "train": train,
        "output": {"dir": out},
        "debug": {"record_cuts": os.path.join(out, "cuts.npz")},
    }
    if emb_eps is not None:
        follower["privacy"] = {"embedding_dp": {"eps": emb_eps, "delta": 1e-5, "clip": clip}}
    os.makedirs(out, exist_ok=True)
    paths = {}
    for name, doc in (("leader", leader), ("follower0", follower)):
        paths[name] = os.path.join(out, f"{name}.yaml")
        with open(paths[name], "w") as f:
            yaml.safe_dump(doc, f)
    return paths


def _run(paths: dict[str, str]) -> None:
    procs = {}
    try:
        for name, module in (("leader", "leader"), ("follower0", "follower")):
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", module, "--config", paths[name]],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        for name, p in procs.items():
            _, err = p.communicate(timeout=1800)
            if p.returncode != 0:
                raise SystemExit(f"bench_embedding_dp: {name} failed: {err.strip().splitlines()[-1:]}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def _attack(shards: str, cuts_path: str) -> dict:
    from privacy.attacks.embedding_inversion import attack_columns, link_sends
    from vfl.data.shards import PartyShard

    shard = PartyShard(os.path.join(shards, "follower0"))
    train = shard.split("train")
    n = len(train)
    dense, missing, cat = (t.numpy() for t in train.features(np.arange(n)))
    columns = {
        c: ("numeric", np.where(missing[:, i] > 0, np.nan, dense[:, i])) for i, c in enumerate(shard.dense_columns)
    }
    columns.update({f"cat{i}": ("categorical", cat[:, i]) for i in range(cat.shape[1])})
    with np.load(cuts_path) as z:
        space, row, cut = z["space"].astype(str), z["row"], z["cut"]
    mine = space == "train"
    linked, _ = link_sends(row[mine], cut[mine], n)
    return attack_columns(linked, columns, np.random.default_rng(0), known_fraction=0.01)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--label-eps", default="none,1")
    ap.add_argument("--embedding-eps", default="none,16,4,1")
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory)")
    args = ap.parse_args(argv)
    label_eps, emb_eps = _eps_list(args.label_eps), _eps_list(args.embedding_eps)
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
        platform.processor(),
    )
    print(f"# {cpu}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(f"# python scripts/bench_embedding_dp.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"# {args.rows} synthetic rows, {args.epochs} epochs, cut_dim 8, clip {args.clip:g}, delta 1e-5")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or tmp
        os.makedirs(work, exist_ok=True)
        shards = _prepare(work, args.rows)
        print(
            "| label eps | embedding eps | test AUC | strongest categorical: accuracy / prior | best numeric R^2 "
            "| exact linkage | s |"
        )
        print("|---|---|---|---|---|---|---|")
        for le in label_eps:
            for ee in emb_eps:
                cell = f"label_{le}_emb_{ee}"
                t0 = time.perf_counter()
                paths = _configs(work, shards, cell, args.epochs, le, ee, args.clip)
                _run(paths)
                metrics = json.load(open(os.path.join(work, cell, "metrics.json")))
                rep = _attack(shards, os.path.join(work, cell, "cuts.npz"))
                best = rep["strongest_categorical"]
                r2 = max((r["r2"] for r in rep["columns"].values() if r["kind"] == "numeric"), default=float("nan"))
                print(
                    f"| {le if le is not None else 'off'} | {ee if ee is not None else 'off'} "
                    f"| {metrics['test_auc']:.4f} | {best['column']}: {best['accuracy']:.3f} / {best['prior']:.3f} "
                    f"| {r2:.3f} | {rep['exact_linkage']:.3f} | {time.perf_counter() - t0:.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
