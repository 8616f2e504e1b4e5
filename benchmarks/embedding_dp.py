"""Label DP and embedding DP together: test AUC and the leader's attack on the followers' columns per (label eps,
embedding eps), on the front door's synthetic data or on flights, each cell a real multi-process run on 127.0.0.1.

--dataset flights: the flights example's three parties (examples/flights: the airline leader, the weather and the
aircraft followers, the example's models; batches of 256 at lr 0.001, as benchmarks.models) on the flights whose id
falls in a public 1-in-N sample of --rows, each follower with the same embedding eps; the table gives the attack
on each follower.

Every cell trains leader + follower0 (the default Criteo split of `vfl-data synth` rows: the follower holds I8-I13
and C14-C26) for --epochs epochs; the follower records what it sends (debug.record_cuts: the leader's view), the
leader's metrics.json gives the test AUC. The attack (privacy/attacks/embedding_inversion.py) links every training
send of a row (their mean), knows 1% of the follower's training rows, and decodes each follower column: the table
prints the strongest categorical column's accuracy against its majority prior, and the best numeric column's R^2.

Usage: python -m benchmarks.embedding_dp [--dataset synthetic|flights] [--rows N] [--epochs E] [--label-eps LIST]
       [--embedding-eps LIST] [--clip C] [--out DIR]   (LIST: comma-separated numbers, `none` = off)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

from benchmarks.common import cpu_model, load_text
from benchmarks.datasets import prepare_flights

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _prepare(work: str, rows: int) -> tuple[str, dict[str, dict]]:
    """The synthetic shards (leader, follower0) and each party's config over the bench's model: {party: doc}."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare
    from vfl.data.synth.criteo import write_synthetic

    raw = os.path.join(work, "rows.tsv")
    write_synthetic(raw, rows, seed=7, max_vocab=2_000)
    shards = os.path.join(work, "shards")
    prepare(raw, shards, load_parties(None), PrepareOptions(hash_buckets=2_000, seed=0))
    model = {"bottom": {"embedding_dim": 8, "hidden": [64, 32], "cut_dim": 8}}
    train = {"batch_size": 512, "seed": 0, "lr": 0.01}
    leader = {"role": "leader", "party": "leader", "model": {**model, "top": {"name": "mlp", "hidden": [32]}}}
    follower = {"role": "follower", "party": "follower0", "model": model}
    return shards, {d["party"]: {**d, "train": dict(train)} for d in (leader, follower)}


def _prepare_flights(work: str, rows: int) -> tuple[str, dict[str, dict]]:
    """The flights example's parties on a public 1-in-N sample of about `rows` flights (benchmarks.datasets.prepare_flights);
    {party: the example's role, model and train}, batches of 256 at lr 0.001 and no early stopping."""
    shards, docs = os.path.join(work, "shards"), {}
    for party, path in prepare_flights(work, rows, shards).items():
        with open(path) as f:
            doc = yaml.safe_load(f)
        doc["train"].pop("early_stopping", None)  # every cell trains its --epochs
        doc["train"].update(batch_size=256, lr=0.001)  # benchmarks.models' flights settings: enough steps on 20k rows
        docs[party] = {k: doc[k] for k in ("role", "party", "model", "train")}
    return shards, docs


def _configs(work: str, shards: str, docs: dict, cell: str, epochs: int, label_eps, emb_eps, clip: float) -> dict:
    """Each party's YAML for one cell: `docs`' role, model and train, with this cell's epochs, endpoint, keys, privacy,
    output, and each follower's sends recorded (debug.record_cuts: the leader's view). {party: path}."""
    from vfl.ports import free_port
    from vfl.wire.curve_keys import create_key_pair, key_paths

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    keys = {}
    for party in docs:
        if not os.path.exists(key_paths(os.path.join(work, "keys"), party)[1]):
            create_key_pair(party, os.path.join(work, "keys"))
        keys[party] = key_paths(os.path.join(work, "keys"), party)
    leader = next(p for p, d in docs.items() if d["role"] == "leader")
    followers = [p for p in docs if p != leader]
    out = os.path.join(work, cell)
    os.makedirs(out, exist_ok=True)
    paths = {}
    for party, base in docs.items():
        doc = {
            **base,
            "train": {**base["train"], "epochs": epochs, "log_every": 10**6, "threads": 1},
            "data": {"path": os.path.join(shards, party)},
            "output": {"dir": out},
        }
        if party == leader:
            doc["network"] = {
                "bind": endpoint,
                "followers": followers,
                "timeout_s": 120,
                "secret_key_file": keys[leader][1],
                "follower_keys": {f: keys[f][0] for f in followers},
            }
            if label_eps is not None:  # a throwaway store per cell: each cell is its own release
                store = os.path.join(out, "label_dp_store")
                doc["privacy"] = {"label_dp": {"eps": label_eps, "budget": math.inf, "store_dir": store}}
        else:
            doc["network"] = {
                "connect": endpoint,
                "timeout_s": 120,
                "secret_key_file": keys[party][1],
                "leader_key_file": keys[leader][0],
            }
            doc["debug"] = {"record_cuts": os.path.join(out, f"cuts_{party}.npz")}
            if emb_eps is not None:
                doc["privacy"] = {"embedding_dp": {"eps": emb_eps, "delta": 1e-5, "clip": clip}}
        paths[party] = os.path.join(out, f"{party}.yaml")
        with open(paths[party], "w") as f:
            yaml.safe_dump(doc, f)
    return paths


def _run(paths: dict[str, str]) -> None:
    procs = {}
    try:
        for name, path in paths.items():
            module = "leader" if yaml.safe_load(open(path))["role"] == "leader" else "follower"
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", module, "--config", path],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        for name, p in procs.items():
            _, err = p.communicate(timeout=3600)
            if p.returncode != 0:
                raise SystemExit(f"bench_embedding_dp: {name} failed: {err.strip().splitlines()[-1:]}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def _attack(shards: str, parties: list[str], follower: str, cuts_path: str, decoders=("linear",)) -> dict:
    """The leader's attack on `follower`'s columns from its recorded training sends: its training split as the run
    saw it (restricted to the intersection of every party's ids, as PSI left it)."""
    from privacy.attacks.embedding_inversion import attack_columns, link_sends
    from vfl.data.shards import PartyShard

    common = None
    for party in parties:
        ids = PartyShard(os.path.join(shards, party)).all_ids()
        common = ids if common is None else np.intersect1d(common, ids)
    shard = PartyShard(os.path.join(shards, follower))
    shard.restrict(common)
    train = shard.split("train")
    n = len(train)
    dense, missing, cat = (t.numpy() for t in train.features(np.arange(n)))
    columns = {
        c: ("numeric", np.where(missing[:, i] > 0, np.nan, dense[:, i])) for i, c in enumerate(shard.dense_columns)
    }
    columns.update({c: ("categorical", cat[:, i]) for i, c in enumerate(shard.categorical_columns)})
    with np.load(cuts_path) as z:
        space, row, cut = z["space"].astype(str), z["row"], z["cut"]
    mine = space == "train"
    linked, _ = link_sends(row[mine], cut[mine], n)
    return attack_columns(linked, columns, np.random.default_rng(0), known_fraction=0.01, decoders=decoders)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=("synthetic", "flights"), default="synthetic")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--label-eps", default="none,1")
    ap.add_argument("--embedding-eps", default="none,16,4,1")
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument(
        "--decoders", default="linear",
        help="the leader's decoders, any of linear,knn,mlp (each column's figure is the best; missing flags attacked)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    label_eps, emb_eps = _eps_list(args.label_eps), _eps_list(args.embedding_eps)
    decoders = tuple(d.strip() for d in args.decoders.split(",") if d.strip())
    print(f"# {cpu_model()}, {os.cpu_count()} cores, load {load_text()}")
    print(f"# python -m benchmarks.embedding_dp {' '.join(argv if argv is not None else sys.argv[1:])}")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or tmp
        os.makedirs(work, exist_ok=True)
        shards, docs = (_prepare_flights if args.dataset == "flights" else _prepare)(work, args.rows)
        followers = [p for p, d in docs.items() if d["role"] == "follower"]
        cut = {p: docs[p]["model"]["bottom"]["cut_dim"] for p in followers}
        print(
            f"# {args.dataset}, about {args.rows} rows, {args.epochs} epochs, cut_dim {cut}, clip {args.clip:g}, delta 1e-5"
        )
        heads = "".join(f" {f}: strongest categorical accuracy / prior | {f}: best numeric R^2 |" for f in followers)
        print(f"| label eps | embedding eps | test AUC |{heads} exact linkage | s |")
        print("|---|---|---|" + "---|---|" * len(followers) + "---|---|")
        for le in label_eps:
            for ee in emb_eps:
                cell = f"label_{le}_emb_{ee}"
                t0 = time.perf_counter()
                paths = _configs(work, shards, docs, cell, args.epochs, le, ee, args.clip)
                _run(paths)
                metrics = json.load(open(os.path.join(work, cell, "metrics.json")))
                row, linkage = "", []
                for f in followers:
                    rep = _attack(shards, list(docs), f, os.path.join(work, cell, f"cuts_{f}.npz"), decoders)
                    best = rep.get("strongest_categorical")
                    r2 = max((r["r2"] for r in rep["columns"].values() if r["kind"] == "numeric"), default=math.nan)
                    acc = "-" if best is None else f"{best['column']}: {best['accuracy']:.3f} / {best['prior']:.3f}"
                    row += f" {acc} | {r2:.3f} |"
                    linkage.append(f"{rep['exact_linkage']:.3f}")
                print(
                    f"| {le if le is not None else 'off'} | {ee if ee is not None else 'off'} "
                    f"| {metrics['test_auc']:.4f} |{row} {' / '.join(linkage)} | {time.perf_counter() - t0:.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
