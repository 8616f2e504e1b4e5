"""Model selection on your own table: is the reported model (selected on randomized validation labels) within a
target of the best test AUC of any evaluated step (the oracle)? Each release is a fresh key (its own label-DP store),
trained as real processes over CurveZMQ with PSI; releases run side by side.

A BENCHMARK FOR PUBLIC DATA: every release draws from a fresh key in its own scratch ledger (OUT/.../store), so the
releases are never added up and no budget applies (3 releases at each of eps 4, 2 and 1 spend 21 on the same labels).
On labels that need protecting, run releases through the leader's real store instead, where the ledger charges
each one and the budget refuses what goes over. The script refuses to run without --scratch-ledgers, which says so.

Usage: python -m benchmarks.selection --scratch-ledgers --configs examples/flights --shards runs/flights/shards
       [--eps 1] [--releases 3] [--parallel 3] [--out runs/bench_selection] [--set KEY=VALUE ...]
Prints one line per release (reported test AUC, oracle, gap, steps, where it stopped) and the mean gap, with the
CPU model and load; writes OUT/bench_selection.json. The shards come from `vfl-data prepare --config` (or
`bash scripts/run_vfl_train_local.sh --example flights`, which leaves them in runs/flights/shards).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks.common import cpu_model, load_avg, write_json
from vfl.local_parties import LocalParties

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _start_release(args, plan, r: int) -> tuple[str, LocalParties]:
    from vfl.ports import free_port

    out = os.path.abspath(os.path.join(args.out, f"eps{args.eps}-release{r}"))
    keys, store = os.path.join(out, "keys"), os.path.join(out, "store")
    os.makedirs(out, exist_ok=True)
    for _, name, _, _ in plan:
        if not os.path.exists(os.path.join(keys, f"{name}.key_secret")):
            subprocess.run(
                [sys.executable, "-m", "vfl.keys", "new", name, "--dir", keys], check=True, capture_output=True
            )
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    env = {
        "VFL_LABEL_DP_STORE": store,
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }
    parties = LocalParties(cwd=ROOT)
    leader = plan[0][1]
    for role, name, config, _ in plan:
        sets = [f"--set={kv}" for kv in args.set]
        if role == "leader":
            flag = "--bind"
            if args.eps != "none":
                sets.append(f"--set=privacy.label_dp.eps={args.eps}")
        else:
            flag = "--connect"
            sets.append(f"--set=network.leader_key_file={os.path.join(keys, leader + '.key')}")
        cmd = [
            sys.executable,
            "-m",
            role,
            "--config",
            config,
            flag,
            endpoint,
            "--data",
            os.path.join(args.shards, name),
            "--out",
            out,
            "--keys",
            keys,
            "--quiet",
            *sets,
        ]
        parties.start(name, cmd, stderr=os.path.join(out, f"{name}.stderr"), env=env)
    return out, parties


def _result(out: str, parties: LocalParties) -> dict:
    failure = parties.wait(stop_at_failure=False)
    codes = [p.returncode for p in parties.procs.values()]
    if failure is not None:
        tails = []
        for f in sorted(os.listdir(out)):
            if f.endswith(".stderr"):
                tails.append(f"{f}: {' '.join(open(os.path.join(out, f)).read().split()[-30:])}")
        return {"out": out, "failed": codes, "why": tails}
    m = json.load(open(os.path.join(out, "metrics.json")))
    oracle = max(h["test_auc"] for h in m["history"])
    return {
        "out": out,
        "test_auc": m["test_auc"],
        "oracle_test_auc": oracle,
        "gap": oracle - m["test_auc"],
        "evaluations": len(m["history"]),
        "model_step": m.get("model_step"),
        "steps": m.get("steps"),
        "stopped_early": (m.get("selection") or {}).get("stopped_early"),
        "label_dp": m.get("label_dp"),
        "psi_seconds": (m.get("psi") or {}).get("seconds"),
    }


def main(argv=None) -> int:
    from vfl.data.table_plan import PlanError, plan

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", required=True)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--eps", default="1", help="label DP eps of every release, or none")
    ap.add_argument("--releases", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--out", default="runs/bench_selection")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every party (e.g. train.epochs=10)")
    ap.add_argument(
        "--scratch-ledgers",
        action="store_true",
        help="required: each release gets a fresh key and a scratch ledger, outside any budget (public data only)",
    )
    args = ap.parse_args(argv)
    if not args.scratch_ledgers and args.eps != "none":
        print(
            "error: each release of this benchmark draws from a fresh key in a scratch ledger, outside the label-DP "
            "budget: for public data only; say so with --scratch-ledgers",
            file=sys.stderr,
        )
        return 2
    if args.eps != "none":
        print(f"bench_selection: {args.releases} release(s) at eps {args.eps}, each in a scratch ledger (no budget)")
    args.shards = os.path.abspath(args.shards)
    names = [os.path.basename(p) for p in os.listdir(args.shards)]
    try:
        # the plan checks the configs; the tables are the shards here (their parties must match)
        rows = plan(args.configs, [f"{n}={os.path.join(args.shards, n, 'manifest.json')}" for n in names])
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0, load = time.time(), load_avg()[0]
    results, running, next_release = [], [], 0
    try:
        while next_release < args.releases or running:
            while next_release < args.releases and len(running) < args.parallel:
                running.append(_start_release(args, rows, next_release))
                next_release += 1
            out, parties = running[0]
            results.append(_result(out, parties))
            running.pop(0)
            r = results[-1]
            if "failed" in r:
                print(f"{os.path.basename(out)}: failed {r['failed']}: {r['why']}")
            else:
                print(
                    f"{os.path.basename(out)}: reported test AUC {r['test_auc']:.4f}, oracle "
                    f"{r['oracle_test_auc']:.4f}, gap {r['gap']:.4f} ({r['evaluations']} evaluations, model step "
                    f"{r['model_step']} of {r['steps']}, stopped early: {r['stopped_early']})"
                )
    finally:  # an interrupted bench leaves no release running
        for _, parties in running:
            parties.close()
    ok = [r for r in results if "failed" not in r]
    summary = {
        "configs": args.configs,
        "eps": args.eps,
        "releases": results,
        "mean_gap": statistics.mean(r["gap"] for r in ok) if ok else None,
        "mean_test_auc": statistics.mean(r["test_auc"] for r in ok) if ok else None,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_before": load,
        "seconds": round(time.time() - t0, 1),
        "command": " ".join([os.path.basename(sys.executable), "-m", "benchmarks.selection", *(argv or sys.argv[1:])]),
    }
    if ok:
        print(
            f"mean over {len(ok)} release(s) at eps {args.eps}: reported {summary['mean_test_auc']:.4f}, gap to the "
            f"oracle {summary['mean_gap']:.4f} ({summary['cpu']}, {summary['cores']} cores, load {load:.1f}, "
            f"{summary['seconds']:.0f} s)"
        )
    write_json(os.path.join(args.out, "bench_selection.json"), summary, indent=1)
    return 0 if len(ok) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
