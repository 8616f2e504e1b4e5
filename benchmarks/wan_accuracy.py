"""bench_wan.sh --grid accuracy: what a stale schedule costs in test AUC, and what each correction wins back.

Run lengths x links x variants x seeds, side by side in one run: for each run length S (training steps), a data set
sized so that 2 epochs of batch 1024 take S steps (criteo: the front door's synthetic rows; flights: a public sample
of that many flights' worth); for each link (loopback: no relay; else the shipped relay, vfl/netlink/relay.py) every
variant: sync (staleness 0), K (train.staleness K, plain delayed SGD, every bottom stale), K+dc / K+lr / K+local
(with train.staleness_correction delay_compensation / staleness_lr / local_updates, every bottom stale), K+fresh (the
leader's own bottom synchronous, train.staleness_leader_bottom fresh), K+local+fresh (both) and auto (the defaults) (train.staleness auto: what it chose is recorded). Each
cell runs with train.seed 0..N-1 and reports the mean +- sd of test AUC and samples/s, the AUC against the loopback
synchronous cell of its run length (the reference every variant is judged by) and samples/s as a share of it.

    bash scripts/bench_wan.sh --grid accuracy [--steps 300,500,800,2300] [--links loopback,40ms,100ms]
        [--variants sync,K,K+dc,K+lr,K+local,K+fresh,auto] [--k 4] [--seeds 3] [--dataset criteo|flights]
        [--json OUT.json]
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import statistics

from benchmarks.common import report_json

STALE_BOTTOM = {"train.staleness_leader_bottom": "stale"}
VARIANTS = {  # name -> config overrides beyond train.staleness (K: --k); auto runs the defaults
    "sync": {},
    "K": {"train.staleness_correction": "none", **STALE_BOTTOM},
    "K+dc": {"train.staleness_correction": "delay_compensation", **STALE_BOTTOM},
    "K+lr": {"train.staleness_correction": "staleness_lr", **STALE_BOTTOM},
    "K+local": {"train.staleness_correction": "local_updates", **STALE_BOTTOM},
    "K+fresh": {"train.staleness_correction": "none", "train.staleness_leader_bottom": "fresh"},
    "K+local+fresh": {"train.staleness_correction": "local_updates", "train.staleness_leader_bottom": "fresh"},
    "auto": {},
}
EPOCHS = 2
BATCH = 1024
TRAIN_SHARE = 0.8  # prepare's default test and valid fractions, 0.1 each


def rows_for(steps: int) -> int:
    """Rows whose training split (TRAIN_SHARE) makes `steps` steps in EPOCHS epochs of BATCH."""
    return math.ceil(math.ceil(steps / EPOCHS) * BATCH / TRAIN_SHARE)


def staleness_of(variant: str, k: int) -> str:
    return "0" if variant == "sync" else "auto" if variant == "auto" else str(k)


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def pm(mean, sd, spec: str) -> str:
    if mean is None:
        return "-"
    return format(mean, spec) + ("" if sd is None else " +- " + format(sd, spec))


def run_grid(args, bench) -> int:
    """The accuracy grid (`bench`: the bench_wan module: its links, prepare, run_cell, say)."""
    say = bench.say
    steps_list = [int(x) for x in args.steps.split(",")]
    links = args.links.split(",") if args.links else ["loopback", "40ms"]
    variants = args.variants.split(",")
    for name, picks, table in (("links", links, bench.LINKS), ("variants", variants, VARIANTS)):
        bad = [x for x in picks if x not in table]
        if bad:
            say(f"error: --{name} {bad[0]!r}: allowed: {', '.join(table)}")
            return 2
    if "loopback" not in links:
        links = ["loopback", *links]  # the reference of every cell
    py = bench.sys.executable
    work = os.path.abspath(args.work or os.path.join(bench.REPO, "runs", "bench_wan_accuracy"))
    os.makedirs(work, exist_ok=True)
    command = "bash scripts/bench_wan.sh " + " ".join(shlex.quote(a) for a in args.argv)
    machine = {"cpu": bench.cpu_model(), "cores": os.cpu_count(), "load_before": bench.load_text()}
    say(f"== {command}")
    say(f"== machine: {machine['cpu']}, {machine['cores']} cores, load {machine['load_before']}")
    cells, failed = [], []
    for steps in steps_list:
        rows = rows_for(steps)
        sub = os.path.join(work, f"{args.dataset}_{rows}")
        shards = bench.prepare(py, rows, sub, args.dataset)
        for party in bench.DATASETS[args.dataset]:  # PSI is timed by the link grid; here it runs once and is reused
            shutil.rmtree(os.path.join(shards, party, "psi_cache"), ignore_errors=True)
        reference = None
        for lk in links:
            link = bench.LINKS[lk]
            spec = bench.LinkSpec(link[0], link[1], min(args.jitter_ms, link[0] / 2)) if link else None
            for variant in variants if lk != "loopback" else ["sync"]:
                overrides = {
                    "train.epochs": str(EPOCHS),
                    "data.psi_reuse": "true",
                    "train.staleness": staleness_of(variant, args.k),
                    **VARIANTS[variant],
                    **args.extra,
                }
                runs = []
                for seed in range(args.seeds):
                    tag = f"s{steps}_{lk}_{variant.replace('+', '_')}_seed{seed}"
                    say(f"[{steps} steps] {lk} / {variant} (K {overrides['train.staleness']}) / seed {seed}: "
                        f"running (load {bench.load_text()})")  # fmt: skip
                    try:
                        metrics, _, wall = bench.run_cell(
                            py, sub, shards, tag, spec, {**overrides, "train.seed": str(seed)}, args.timeout_s,
                            args.dataset,
                        )  # fmt: skip
                    except RuntimeError as e:
                        say(f"    failed: {e}")
                        failed.append({"steps": steps, "link": lk, "variant": variant, "seed": seed, "why": str(e)})
                        continue
                    chosen = (metrics.get("staleness_auto") or {}).get("staleness", metrics.get("staleness"))
                    runs.append(
                        {
                            "test_auc": metrics.get("test_auc"),
                            "samples_per_second": metrics["samples_per_second"],
                            "steps": metrics["steps"],
                            "staleness": chosen,
                            "wall_seconds": wall,
                        }
                    )
                    say(f"    test AUC {runs[-1]['test_auc']:.4f}, {runs[-1]['samples_per_second']:,.0f} samples/s, "
                        f"{metrics['steps']} steps, staleness {chosen}")  # fmt: skip
                if not runs:
                    continue
                auc, auc_sd = mean_sd([r["test_auc"] for r in runs])
                sps, sps_sd = mean_sd([r["samples_per_second"] for r in runs])
                cell = {
                    "steps": steps,
                    "rows": rows,
                    "link": lk,
                    "variant": variant,
                    "staleness": sorted({r["staleness"] for r in runs}),
                    "seeds": len(runs),
                    "test_auc": auc,
                    "test_auc_sd": auc_sd,
                    "samples_per_second": sps,
                    "samples_per_second_sd": sps_sd,
                    "runs": runs,
                    "load_after": bench.load_text(),
                }
                if lk == "loopback" and variant == "sync":
                    reference = cell
                if reference is not None:
                    cell["auc_vs_loopback_sync"] = auc - reference["test_auc"]
                    cell["share_of_loopback"] = sps / reference["samples_per_second"]
                cells.append(cell)
    machine["load_after"] = bench.load_text()
    say("")
    say("| steps | link | variant | K | test AUC (mean +- sd) | vs loopback sync | samples/s | of loopback |")
    say("|---|---|---|---|---|---|---|---|")
    for c in cells:
        link = bench.LINKS[c["link"]]
        name = "loopback" if link is None else f"{link[0]} ms / {link[1]:g} Mbit/s"
        delta = c.get("auc_vs_loopback_sync")
        share = c.get("share_of_loopback")
        say(
            f"| {c['steps']} | {name} | {c['variant']} | {','.join(map(str, c['staleness']))} | "
            f"{pm(c['test_auc'], c['test_auc_sd'], '.4f')} | {'-' if delta is None else format(delta, '+.4f')} | "
            f"{pm(c['samples_per_second'], c['samples_per_second_sd'], ',.0f')} | "
            f"{'-' if share is None else format(share, '.2f')} |"
        )
    say(
        f"machine: {machine['cpu']}, {machine['cores']} cores; load {machine['load_before']} -> "
        f"{machine['load_after']}; {args.dataset}, {EPOCHS} epochs of batch {BATCH}, {args.seeds} seed(s); "
        f"command: {command}"
    )
    for f in failed:
        say(f"failed: {f['steps']} steps / {f['link']} / {f['variant']} / seed {f['seed']}: {f['why']}")
    if args.json:
        report_json(
            args.json,
            {"command": command, "machine": machine, "dataset": args.dataset, "k": args.k, "seeds": args.seeds,
             "epochs": EPOCHS, "batch_size": BATCH, "set": args.extra, "cells": cells, "failed": failed},
        )  # fmt: skip
    return 0 if cells else 1
