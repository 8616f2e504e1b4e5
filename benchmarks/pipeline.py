"""Micro-batch pipelining where one party's work follows the other's: a label party with few columns and a heavy top.

At MindSpore Federated's sizes (benchmarks/compute.py) each party runs its own bottom at the same time as the
other, so neither waits long and micro-batches have little to fill (that bench prints the bound). Pipelining pays
when the parties' work is sequential: here the leader holds the labels and 3 dense columns (a small bottom) and a
heavy MLP top, and the follower holds the other 36 columns (MindSpore's bottom). With M = 1 the follower idles
while the leader runs the top, and the leader idles while the follower runs its bottom; with M micro-batches the
leader's top on micro-batch i overlaps the follower's bottom on micro-batch i + 1 (GPipe, Huang et al., NeurIPS
2019, Sec. 2.2; here across two parties instead of two devices). Each party is pinned to its own core (taskset),
as two machines would run it. The bound is the busier party's own work: step(M=1) / max(leader, follower).

Run through scripts/bench_pipeline.sh (it builds the venv); prints the curve, the CPU model and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import yaml

from benchmarks.common import cpu_model, load_text, report_json, say
from benchmarks.runs import prepare_data, run_split, write_configs

LEADER_DENSE = ["I1", "I2", "I3"]


def write_parties(path: str) -> str:
    """The leader: labels and 3 dense columns; follower0: the other 10 dense and all 26 categorical columns."""
    from vfl.data.presets.criteo import CATEGORICAL_COLUMNS, DENSE_COLUMNS

    doc = {
        "leader": {"dense": LEADER_DENSE, "categorical": [], "label": True},
        "follower0": {
            "dense": [c for c in DENSE_COLUMNS if c not in LEADER_DENSE],
            "categorical": list(CATEGORICAL_COLUMNS),
        },
    }
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=16000)
    ap.add_argument("--cut-dim", type=int, default=64, help="each bottom's output width (the top's input is 2x)")
    ap.add_argument("--top-hidden", default="1024,1024,1024,512", help="the leader's MLP top")
    ap.add_argument("--microbatches", default="1,2,4,8")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    ms = [int(m) for m in args.microbatches.split(",")]
    if 1 not in ms or any(m < 1 or m > args.batch for m in ms):
        ap.error(f"--microbatches must include 1 and hold integers in [1, {args.batch}], got {args.microbatches}")
    top_hidden = [int(h) for h in args.top_hidden.split(",")]
    if not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        ap.error("this bench pins each party to its own core: it needs taskset and at least 2 cores")

    py, cpu = sys.executable, cpu_model()
    say(f"== machine: {cpu}, {os.cpu_count()} cores; load {load_text()}")
    follower_model = {"bottom": {"embedding_dim": 80, "hidden": [1024, 512, 256, 128], "cut_dim": args.cut_dim}}
    leader_model = {
        "bottom": {"embedding_dim": 80, "hidden": [64], "cut_dim": args.cut_dim},
        "top": {"name": "mlp", "hidden": top_hidden},
    }
    train = {
        "epochs": 1,
        "batch_size": args.batch,
        "seed": 0,
        "log_every": 10**6,
        "lr": 0.001,
        "eval_batch_size": 65536,
        "threads": 1,
    }
    work = tempfile.mkdtemp(prefix="bench_pipeline_")
    curve, breakdown = {}, None
    try:
        shards = prepare_data(py, args.rows, work, parties=write_parties(os.path.join(work, "parties.yaml")))
        say(
            f"== leader: labels + {len(LEADER_DENSE)} dense columns, bottom MLP [64], top MLP {top_hidden}; follower0: "
            f"36 columns, bottom MLP 1024-512-256-128; cut {args.cut_dim} each; batch {args.batch}; pinned to cores 0 / 1"
        )
        for m in ms:
            cfgs = write_configs(
                py, work, shards, f"m{m}", follower_model, {**train, "microbatches": m}, leader_model=leader_model
            )
            s = run_split(py, cfgs, pin=True)
            curve[m] = {
                "samples_per_second": round(s["samples_per_second"], 1),
                "test_auc": s["test_auc"],
                "load_average": load_text(),
            }
            if m == 1:
                breakdown = {"leader": s["step_breakdown"], "follower0": s["follower_breakdown"]}
            say(
                f"  M={m}: {s['samples_per_second']:9.0f} samples/s  test AUC {s['test_auc']:.4f}  (load {load_text()})"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    from benchmarks.compute import pipeline_bound

    best = max(curve, key=lambda m: curve[m]["samples_per_second"])
    gain = curve[best]["samples_per_second"] / curve[1]["samples_per_second"]
    result = {
        "cpu": cpu,
        "sizes": vars(args),
        "curve": {f"m{m}": v for m, v in curve.items()},
        "best": {**curve[best], "microbatches": best},
        "best_over_m1": round(gain, 3),
        "bound_from_idle": pipeline_bound(breakdown),
        "breakdown_m1": breakdown,
        "load_average_end": load_text(),
    }
    say("")
    say(f"machine: {cpu}; load average at the end {load_text()}")
    say(
        "pipeline (top-heavy leader, pinned): "
        + ", ".join(f"M={m} {v['samples_per_second']:.0f}/s" for m, v in curve.items())
        + f"; best M={best} is {gain:.2f}x M=1; the idle-time bound at M=1 is {result['bound_from_idle']:.2f}x"
    )
    for name, b in breakdown.items():
        steps = max(b["steps"], 1)
        say(
            f"  M=1 {name}: {1e3 * b['step_seconds'] / steps:.0f} ms/step, waiting on the wire "
            f"{1e3 * b['parts'].get('wire_wait', 0.0) / steps:.0f} ms"
        )
    if args.json:
        report_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
