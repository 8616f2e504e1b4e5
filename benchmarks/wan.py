"""Training across a WAN, measured: the front door's parties (examples/wide_deep_criteo, Wide&Deep, batch 1024) as two
processes over CurveZMQ, the follower connected through the shipped relay (vfl/netlink/relay.py), for links x
schedules x compression; per cell samples/s, bytes per training sample each way, wall time of PSI and training, test
AUC, and the three bounds beside it (compute alone = the loopback cell, bandwidth, latency = steps x RTT / in-flight
batches: vfl/netlink/bounds.py). Schedules and codecs are config overrides (`train.staleness=K`,
`network.compression.embedding|gradient=...`); a cell whose key this tree's config does not know is skipped with a
one-line note. PSI is run and timed in each link's first cell; the link's other cells reuse its result
(`data.psi_reuse`), since PSI depends on the link only. `--dataset flights` runs examples/flights' three parties
instead (the airline leads; the weather and aircraft followers each reach it through a relay of their own), and
`--set KEY=VALUE` changes a config key in every cell (the wide cut: cut_dim 32 with an MLP top). Prints the machine
and the load; --json writes every cell.

    bash scripts/bench_wan.sh [--quick] [--rows N] [--epochs N] [--links loopback,40ms] [--schedules sync,1,2,4,8]
        [--compression none,fp16,int8,int8+topk] [--seeds N] [--jitter-ms J] [--set KEY=VALUE ...]
        [--dataset criteo|flights] [--json OUT.json]
    bash scripts/bench_wan.sh --grid accuracy [--steps 300,500,800,2300] [--links loopback,40ms,100ms]
        [--variants sync,K,K+dc,K+lr,K+local,K+fresh,auto] [--k 4] [--seeds 3] [--dataset criteo|flights]
        [--json OUT.json]   (benchmarks/wan_accuracy.py: what a stale schedule costs in test AUC)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks.common import cpu_model, load_text, report_json, say
from benchmarks.runs import prepare
from vfl.netlink.bounds import Link, bounds
from vfl.netlink.relay import LinkSpec, Relay

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LINKS = {  # name -> (RTT ms, bandwidth Mbit/s); loopback: no relay at all
    "loopback": None,
    "10ms": (10, 1000),
    "40ms": (40, 100),
    "100ms": (100, 50),
}
SCHEDULES = {"sync": 0, "1": 1, "2": 2, "4": 4, "8": 8}
COMPRESSION = {
    "none": {},
    "fp16": {"network.compression.embedding": "fp16", "network.compression.gradient": "fp16"},
    "int8": {"network.compression.embedding": "int8", "network.compression.gradient": "int8"},
    "int8+topk": {"network.compression.embedding": "int8", "network.compression.gradient": "topk"},
}
LEADER_YAML = os.path.join(REPO, "examples", "wide_deep_criteo", "leader.yaml")
FOLLOWER_YAML = os.path.join(REPO, "examples", "wide_deep_criteo", "follower.yaml")
FLIGHTS = os.path.join(REPO, "examples", "flights")
DATASETS = {  # name -> {party: (its YAML, role)}, the leader first
    "criteo": {"leader": (LEADER_YAML, "leader"), "follower0": (FOLLOWER_YAML, "follower")},
    "flights": {
        "airline": (os.path.join(FLIGHTS, "airline.yaml"), "leader"),
        "weather": (os.path.join(FLIGHTS, "weather.yaml"), "follower"),
        "aircraft": (os.path.join(FLIGHTS, "aircraft.yaml"), "follower"),
    },
}
QUICK = {"rows": 30_000, "links": "loopback,40ms", "schedules": "sync,4", "compression": "none,int8"}
FULL = {
    "rows": 200_000,
    "links": ",".join(LINKS),
    "schedules": ",".join(SCHEDULES),
    "compression": ",".join(COMPRESSION),
}


def pairs_for(overrides: dict[str, str], role: str) -> list[str]:
    """The KEY=VALUE overrides a party of `role` takes (a leader-only key, e.g. model.top, goes to the leader alone:
    vfl/config/party_sets.py)."""
    from vfl.config.party_sets import role_of

    return [f"{k}={v}" for k, v in overrides.items() if role_of(k) in ("all", role)]


def unknown_keys(overrides: dict[str, str], dataset: str = "criteo") -> str | None:
    """None when every party's config accepts the overrides, else the config's first complaint (one line)."""
    from vfl.config.schema import ConfigError, dotted_overrides, load_config

    for path, role in DATASETS[dataset].values():
        try:
            load_config(path, dotted_overrides(pairs_for(overrides, role)))
        except ConfigError as e:
            lines = [x.strip(" -") for x in str(e).splitlines() if x.strip()]
            return (lines[1] if len(lines) > 1 else lines[0])[:200]  # the first problem, past the file's header
    return None


def run_cell(
    py: str,
    work: str,
    shards: str,
    tag: str,
    spec: LinkSpec | None,
    overrides: dict,
    timeout_s: float,
    dataset: str = "criteo",
):
    """One training run, each follower through a relay of its own; (the leader's metrics, relay bytes up/down summed
    over the followers, wall seconds) or raises RuntimeError."""
    from vfl.ports import free_port

    port = free_port()
    out = os.path.join(work, tag)
    keys = os.path.join(work, "keys")
    parties = DATASETS[dataset]
    relays = [Relay(("127.0.0.1", port), spec).start() for _ in parties] if spec is not None else []
    common = ["--out", out, "--keys", keys, "-q"]
    cmds = {}
    for i, (party, (config, role)) in enumerate(parties.items()):
        if role == "leader":
            where = ["--bind", f"tcp://127.0.0.1:{port}"]
        else:
            where = ["--connect", relays[i].endpoint if relays else f"tcp://127.0.0.1:{port}"]
        module = "leader" if role == "leader" else "follower"
        cmds[party] = [py, "-m", module, "--config", config, *where, "--data", f"{shards}/{party}", *common]
        cmds[party] += pairs_for(overrides, role)
    os.makedirs(out, exist_ok=True)
    logs = {p: open(os.path.join(out, f"{p}.console"), "w") for p in cmds}
    t0 = time.monotonic()
    procs = {p: subprocess.Popen(c, cwd=REPO, stdout=logs[p], stderr=subprocess.STDOUT) for p, c in cmds.items()}
    try:
        for p, proc in procs.items():
            left = max(1.0, timeout_s - (time.monotonic() - t0))
            if proc.wait(timeout=left) != 0:
                logs[p].close()
                tail = open(logs[p].name).read().strip().splitlines()[-1:] or ["(no output)"]
                raise RuntimeError(f"{p} exited {proc.returncode}: {tail[0][:300]}")
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"over {timeout_s:.0f} s") from None
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for relay in relays:
            relay.close()
        for f in logs.values():
            f.close()
    wall = time.monotonic() - t0
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    moved = (sum(r.bytes_up for r in relays), sum(r.bytes_down for r in relays)) if relays else None
    return metrics, moved, wall


def cell_figures(metrics: dict, relay_bytes, wall: float) -> dict:
    samples = metrics["samples_per_second"] * metrics["train_seconds"]
    psi = metrics.get("psi") or {}
    per_sample = metrics.get("wire_bytes_per_sample")
    if per_sample:
        up, down, source = per_sample["up"], per_sample["down"], "metrics"
    elif relay_bytes is not None:  # the relay's count of the whole session, PSI's own bytes taken out
        up = (relay_bytes[0] - psi.get("bytes_received", 0)) / max(samples, 1)
        down = (relay_bytes[1] - psi.get("bytes_sent", 0)) / max(samples, 1)
        source = "relay"
    else:
        up = down = None
        source = None
    return {
        "samples_per_second": metrics["samples_per_second"],
        "train_seconds": metrics["train_seconds"],
        "psi_seconds": psi.get("seconds"),
        "wall_seconds": wall,
        "test_auc": metrics.get("test_auc"),
        "bytes_up_per_sample": up,
        "bytes_down_per_sample": down,
        "bytes_source": source,
        "relay_bytes": relay_bytes,
    }


def summarise(runs: list[dict]) -> dict:
    """Mean (and sd over seeds) of each figure of a cell's runs."""
    out = {}
    for key in (
        "samples_per_second",
        "train_seconds",
        "psi_seconds",
        "wall_seconds",
        "test_auc",
        "bytes_up_per_sample",
        "bytes_down_per_sample",
    ):
        vals = [r[key] for r in runs if r.get(key) is not None]
        out[key] = statistics.fmean(vals) if vals else None
        if len(vals) > 1:
            out[key + "_sd"] = statistics.stdev(vals)
    out["bytes_source"] = runs[0]["bytes_source"]
    return out


def with_bounds(cell: dict, compute: float | None, batch: int) -> None:
    """The three bounds beside the cell (compute: the loopback cell of the same schedule and codecs, else sync)."""
    link = LINKS[cell["link"]]
    up, down = cell.get("bytes_up_per_sample"), cell.get("bytes_down_per_sample")
    if compute is None or up is None:
        return
    rtt_s = link[0] / 1000 if link else 0.0
    bw = link[1] * 1e6 / 8 if link else math.inf
    b = bounds(Link(rtt_s, bw, up, down, compute, batch), SCHEDULES[cell["schedule"]])
    cell["bounds"] = b.as_dict()


def fmt(x, spec=",.0f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench_wan.sh", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"a look in minutes: {QUICK}")
    ap.add_argument(
        "--rows", type=int, default=None, help=f"synthetic rows (default {FULL['rows']}; quick {QUICK['rows']})"
    )
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--links", default=None, help=f"of {','.join(LINKS)}")
    ap.add_argument("--schedules", default=None, help="of sync,1,2,4,8 (train.staleness)")
    ap.add_argument("--compression", default=None, help=f"of {','.join(COMPRESSION)}")
    ap.add_argument("--seeds", type=int, default=1, help="runs a cell with train.seed 0..N-1 (mean +- sd)")
    ap.add_argument("--jitter-ms", type=float, default=0.0, help="jitter of each one-way delay on every link")
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="a run's limit")
    ap.add_argument("--work", default=None, help="keep the shards and runs here (default: runs/bench_wan)")
    ap.add_argument("--json", default=None, help="write every cell here")
    ap.add_argument(
        "--dataset",
        choices=tuple(DATASETS),
        default="criteo",
        help="criteo: the front door's two parties on synthetic rows; flights: examples/flights' three parties, each "
        "follower through a relay of its own (--rows samples that many flights)",
    )
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config key for every cell (repeatable; to the parties whose role takes it), e.g. the wide cut: --set "
        "model.bottom.cut_dim=32 --set model.top.name=mlp --set 'model.top.hidden=[64,32]'",
    )
    ap.add_argument(
        "--grid",
        choices=("links", "accuracy"),
        default="links",
        help="links: links x schedules x compression (throughput and bounds); accuracy: run lengths x links x "
        "{sync, K, K + each train.staleness_correction, K + the leader's bottom fresh, auto} (test AUC, mean +- sd "
        "over --seeds; benchmarks/wan_accuracy.py)",
    )
    ap.add_argument("--steps", default="300,500,800,2300", help="accuracy grid: run lengths in training steps")
    ap.add_argument(
        "--variants", default="sync,K,K+dc,K+lr,K+local,K+fresh,auto", help="accuracy grid: the schedules compared"
    )
    ap.add_argument("--k", type=int, default=4, help="accuracy grid: the staleness K of the K variants")
    args = ap.parse_args(argv)
    extra = {}
    for pair in args.sets:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            print(f"error: --set {pair!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        extra[key] = value
    if args.grid == "accuracy":
        from benchmarks import wan_accuracy

        args.extra, args.argv = extra, list(argv if argv is not None else sys.argv[1:])
        return wan_accuracy.run_grid(args, sys.modules[__name__])
    base = QUICK if args.quick else FULL
    rows = args.rows or base["rows"]
    picks = {}
    for name, table in (("links", LINKS), ("schedules", SCHEDULES), ("compression", COMPRESSION)):
        picks[name] = (getattr(args, name) or base[name]).split(",")
        bad = [x for x in picks[name] if x not in table]
        if bad:
            print(f"error: --{name} {bad[0]!r}: allowed: {', '.join(table)}", file=sys.stderr)
            return 2
    if "loopback" in picks["links"]:  # the compute bound is measured first
        picks["links"] = ["loopback"] + [x for x in picks["links"] if x != "loopback"]
    py = sys.executable
    work = os.path.abspath(args.work or os.path.join(REPO, "runs", "bench_wan"))
    os.makedirs(work, exist_ok=True)
    command = "bash scripts/bench_wan.sh " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "load_before": load_text()}
    say(f"== {command}")
    say(f"== machine: {machine['cpu']}, {machine['cores']} cores, load {machine['load_before']}")
    shards = prepare(py, rows, work, args.dataset)
    batch = 1024  # the front door's train.batch_size
    cells, skipped, compute = [], [], {}
    grid = [(lk, s, c) for lk in picks["links"] for s in picks["schedules"] for c in picks["compression"]]
    for i, (lk, s, c) in enumerate(grid, 1):
        # PSI depends on the link only: its first cell runs (and times) it from no cache, and the cache it writes
        # serves the link's other cells
        if all(g[0] != lk for g in grid[: i - 1]):
            for party in DATASETS[args.dataset]:
                shutil.rmtree(os.path.join(shards, party, "psi_cache"), ignore_errors=True)
        overrides = {"train.epochs": str(args.epochs), "data.psi_reuse": "true", **extra, **COMPRESSION[c]}
        if SCHEDULES[s]:
            overrides["train.staleness"] = str(SCHEDULES[s])
        why = unknown_keys(overrides, args.dataset)
        if why:
            note = f"[{i}/{len(grid)}] skipped {lk} / {s} / {c}: this tree's config refuses it ({why})"
            say(note)
            skipped.append({"link": lk, "schedule": s, "compression": c, "why": why})
            continue
        link = LINKS[lk]
        spec = LinkSpec(link[0], link[1], min(args.jitter_ms, link[0] / 2)) if link else None
        runs = []
        for seed in range(args.seeds):
            tag = f"{lk}_{s}_{c.replace('+', '_')}_s{seed}"
            say(
                f"[{i}/{len(grid)}] {lk} ({spec.describe() if spec else 'no relay'}) / staleness {SCHEDULES[s]} / "
                f"{c} / seed {seed}: running (load {load_text()})"
            )
            try:
                metrics, relay_bytes, wall = run_cell(
                    py, work, shards, tag, spec, {**overrides, "train.seed": str(seed)}, args.timeout_s, args.dataset
                )
            except RuntimeError as e:
                say(f"    failed: {e}")
                skipped.append({"link": lk, "schedule": s, "compression": c, "seed": seed, "why": str(e)})
                continue
            runs.append(cell_figures(metrics, relay_bytes, wall))
        if not runs:
            continue
        cell = {
            "link": lk,
            "schedule": s,
            "compression": c,
            "seeds": len(runs),
            **summarise(runs),
            "load_after": load_text(),
        }
        if lk == "loopback":
            compute[(s, c)] = cell["samples_per_second"]
        with_bounds(cell, compute.get((s, c), compute.get(("sync", "none"))), batch)
        cells.append(cell)
        b = cell.get("bounds") or {}
        say(
            f"    {fmt(cell['samples_per_second'])} samples/s, {fmt(cell['bytes_up_per_sample'], '.0f')} B up / "
            f"{fmt(cell['bytes_down_per_sample'], '.0f')} B down a sample, PSI {fmt(cell['psi_seconds'], '.1f')} s, "
            f"training {fmt(cell['train_seconds'], '.1f')} s, test AUC {fmt(cell['test_auc'], '.4f')}; bounds: "
            f"compute {fmt(b.get('compute_sps'))}, bandwidth {fmt(b.get('bandwidth_sps'))}, latency "
            f"{fmt(b.get('latency_sps'))} (expected {fmt(b.get('expected_sps'))})"
        )
    machine["load_after"] = load_text()
    say("")
    say(
        "| link | staleness | compression | samples/s | B/sample up / down | PSI s | train s | test AUC | "
        "bounds: compute / bandwidth / latency (expected) |"
    )
    say("|---|---|---|---|---|---|---|---|---|")
    for cell in cells:
        link = LINKS[cell["link"]]
        name = "loopback" if link is None else f"{link[0]} ms / {link[1]:g} Mbit/s"
        b = cell.get("bounds") or {}
        sd = f" +- {cell['samples_per_second_sd']:,.0f}" if "samples_per_second_sd" in cell else ""
        auc_sd = f" +- {cell['test_auc_sd']:.4f}" if "test_auc_sd" in cell else ""
        say(
            f"| {name} | {SCHEDULES[cell['schedule']]} | {cell['compression']} | {fmt(cell['samples_per_second'])}{sd} "
            f"| {fmt(cell['bytes_up_per_sample'], '.0f')} / {fmt(cell['bytes_down_per_sample'], '.0f')} | "
            f"{fmt(cell['psi_seconds'], '.1f')} | {fmt(cell['train_seconds'], '.1f')} | "
            f"{fmt(cell['test_auc'], '.4f')}{auc_sd} | {fmt(b.get('compute_sps'))} / {fmt(b.get('bandwidth_sps'))} / "
            f"{fmt(b.get('latency_sps'))} ({fmt(b.get('expected_sps'))}) |"
        )
    say(
        f"machine: {machine['cpu']}, {machine['cores']} cores; load {machine['load_before']} -> "
        f"{machine['load_after']}; {args.dataset}, {rows} rows, {args.epochs} epoch(s); command: {command}"
    )
    for s in skipped:
        say(f"skipped: {s['link']} / {s['schedule']} / {s['compression']}: {s['why']}")
    if args.json:
        report_json(
            args.json,
            {
                "command": command,
                "machine": machine,
                "dataset": args.dataset,
                "rows": rows,
                "epochs": args.epochs,
                "batch_size": batch,
                "set": extra,
                "cells": cells,
                "skipped": skipped,
            },
        )
    return 0 if cells else 1


if __name__ == "__main__":
    sys.exit(main())
