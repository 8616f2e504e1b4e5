"""Compute benchmark: matmul peak, FLOPs per sample, split/centralized samples/s and MFU in fp32 and bf16,
the per-party step-time breakdown, and the micro-batch pipeline curve with the parties pinned to cores.

Run through scripts/bench_compute.sh (it builds the venv). Every figure comes from this one run; the CPU
model and the load average are printed beside them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from benchmarks.common import cpu_model, load_text, report_json, say
from benchmarks.runs import local_parties, prepare_data, run_central, run_split, write_configs


# -- the machine ---------------------------------------------------------------------------------
def matmul_gflops(m: int, k: int, n: int, dtype, device, budget_s: float = 3.0) -> float:
    """Best GFLOP/s of (m x k) @ (k x n) with F.linear, over repeats that fit in about budget_s."""
    import torch

    a = torch.randn(m, k, device=device).to(dtype)
    w = torch.randn(n, k, device=device).to(
        dtype
    )  # F.linear, the kernel nn.Linear runs (bf16 `@` is 15x slower on AVX2)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    torch.nn.functional.linear(a, w)
    sync()
    best, spent = float("inf"), 0.0
    while spent < budget_s or best == float("inf"):
        t0 = time.perf_counter()
        torch.nn.functional.linear(a, w)
        sync()
        dt = time.perf_counter() - t0
        best, spent = min(best, dt), spent + dt
        if spent > budget_s and best < float("inf"):
            break
    return 2.0 * m * k * n / best / 1e9


def peaks(threads: int, model_shape: tuple[int, int, int], quick: bool, native_bf16: bool, device: str = "cpu") -> dict:
    """{fp32, bf16: best GFLOP/s, shapes: {...}} over square sizes and the model's largest layer."""
    import torch

    torch.set_num_threads(threads)
    out: dict = {"shapes": {}}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        emulated = name == "bf16" and not native_bf16 and device == "cpu"
        squares = [1024, 2048] if quick or emulated else [1024, 2048, 4096]  # emulated bf16: ~6 GFLOP/s on AVX2
        if device == "cuda" and not quick:
            squares.append(8192)  # a GPU needs a large product to reach its peak
        shapes = [(s, s, s) for s in squares] + [model_shape]
        best = 0.0
        for m, k, n in shapes:
            g = matmul_gflops(m, k, n, dtype, device, 1.0 if quick else 3.0)
            out["shapes"][f"{name} {m}x{k}x{n}"] = round(g, 1)
            say(f"  peak {device} {name} {m}x{k}x{n}: {g:8.1f} GFLOP/s  (load {load_text()})")
            best = max(best, g)
        out[name] = round(best, 1)
    return out


def flop_per_sample(shards: str, model: dict, train: dict, rows: int = 256) -> tuple[float, tuple[int, int, int]]:
    """Forward + backward FLOPs per sample of every bottom and the top (torch.utils.flop_counter), and the
    largest Linear layer as (batch, in, out)."""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    parties, top = local_parties(shards, model, train)
    sel = np.arange(min(rows, len(parties[0].train_split)))
    with FlopCounterMode(display=False) as counter:
        loss = top.loss([p.forward_train(sel) for p in parties], torch.zeros(sel.size))
        loss.backward()
    widest = (0, 0)
    for p in parties:
        for mod in p.model.modules():
            if isinstance(mod, torch.nn.Linear) and mod.in_features * mod.out_features > widest[0] * widest[1]:
                widest = (mod.in_features, mod.out_features)
    return counter.get_total_flops() / sel.size, (train["batch_size"], *widest)


# -- report -----------------------------------------------------------------------------------
def pipeline_bound(breakdown: dict) -> float:
    """The most micro-batching can gain: a step cannot be shorter than the busiest party's own work (its step
    minus its wire wait), so the speed-up is at most step / max over parties of (step - wire wait)."""
    busy = max((b["step_seconds"] - b["parts"].get("wire_wait", 0.0)) / max(b["steps"], 1) for b in breakdown.values())
    step = max(b["step_seconds"] / max(b["steps"], 1) for b in breakdown.values())
    return round(step / busy, 3)


def breakdown_table(name: str, b: dict) -> list[str]:
    steps = max(b["steps"], 1)
    lines = [f"  {name}: {b['steps']} steps, {1e3 * b['step_seconds'] / steps:.1f} ms/step"]
    for part, s in b["parts"].items():
        lines.append(f"    {part:16s} {1e3 * s / steps:9.2f} ms  {100 * s / max(b['step_seconds'], 1e-12):5.1f}%")
    lines.append(
        f"    {'(sum of parts)':16s} {1e3 * b['parts_seconds'] / steps:9.2f} ms; residual "
        f"{100 * b['residual_fraction']:+.1f}% of the step (target within 10%)"
    )
    lines.append(f"    {'evaluation':16s} {b['evaluation_seconds']:9.2f} s in all, outside the steps")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=None, help="default 16000 (2000 with --quick)")
    ap.add_argument("--emb", type=int, default=80)
    ap.add_argument("--bottom", default="wide_deep", help="model.bottom.name of both parties (docs/models.md)")
    ap.add_argument("--hidden", default="1024,512,256,128")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--microbatches", default="1,2,4,8", help="the pipeline curve's M values")
    ap.add_argument("--quick", action="store_true", help="batch 2000, smaller peak sizes, 1 s per peak shape")
    ap.add_argument("--no-bf16", action="store_true", help="skip the bf16 training runs (the peak is still measured)")
    ap.add_argument(
        "--bf16-rows",
        type=int,
        default=None,
        help="rows of the bf16 training runs; default: --rows where bf16 is native, else 1500 (emulated bf16 "
        "trains at tens of samples/s)",
    )
    ap.add_argument(
        "--bf16-batch", type=int, default=None, help="batch of the bf16 runs; default: --batch, else 250 when emulated"
    )
    ap.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="cuda: both parties and the centralized run on the one GPU, batches gathered on the device; "
        "MFU against the measured CUDA peak",
    )
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args(argv)
    batch = args.batch or (2000 if args.quick else 16000)
    hidden = [int(h) for h in args.hidden.split(",")]
    ms = [int(m) for m in args.microbatches.split(",")]
    if any(m < 1 or m > batch for m in ms):
        ap.error(f"--microbatches values must be integers in [1, {batch}], got {args.microbatches}")

    import torch

    from vfl.training.precision import bf16_native

    py = sys.executable
    cores = os.cpu_count() or 1
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here")
    native, why = bf16_native(args.device)
    cpu = cpu_model()
    gpu = torch.cuda.get_device_name(0) if cuda else None
    say(
        f"== machine: {cpu}, {cores} cores" + (f", {gpu}" if gpu else "") + f"; bf16 native: {native} ({why}); "
        f"torch {torch.__version__}; load {load_text()}"
    )
    model = {"bottom": {"name": args.bottom, "embedding_dim": args.emb, "hidden": hidden, "cut_dim": 2}}
    train = {
        "epochs": args.epochs,
        "batch_size": batch,
        "seed": 0,
        "log_every": 10**6,
        "lr": 0.001,
        "eval_batch_size": 65536,
    }
    work = tempfile.mkdtemp(prefix="bench_compute_")
    result: dict = {
        "cpu": cpu,
        "cores": cores,
        "device": gpu or "cpu",
        "bf16_native": native,
        "bf16_native_reason": why,
        "torch": torch.__version__,
        "sizes": {
            "rows": args.rows,
            "batch": batch,
            "embedding_dim": args.emb,
            "hidden": hidden,
            "epochs": args.epochs,
        },
        "load_average": {},
    }
    try:
        shards = prepare_data(py, args.rows, work)
        fps, widest = flop_per_sample(shards, model, train)
        result["flop_per_sample"] = fps
        result["largest_layer"] = list(widest)
        say(
            f"== model: {fps / 1e6:.2f} MFLOP per sample (forward + backward, both parties; torch.utils.flop_counter); "
            f"largest layer {widest[0]}x{widest[1]}x{widest[2]}"
        )
        if cuda:
            say(f"== matmul peak on {gpu} (F.linear; fp32 without TF32, as training runs it)")
            result["peak_gflops"] = peaks(1, widest, args.quick, True, "cuda")
            result["peak_gflops"]["cuda"] = {k: result["peak_gflops"][k] for k in ("fp32", "bf16")}
        else:
            say(
                f"== matmul peak on {cores} threads (the threads training uses: 1 per party in split, {cores} centralized)"
            )
            result["peak_gflops"] = peaks(cores, widest, args.quick, native)
            if torch.cuda.is_available():
                result["peak_gflops"]["cuda"] = peaks(1, widest, args.quick, True, "cuda")
            else:
                say("  no CUDA device: the GPU path is not measured (--device cuda where one is)")
        result["load_average"]["after_peaks"] = load_text()

        def figures(m: dict, precision: str) -> dict:
            sps = m["samples_per_second"]
            g = sps * fps / 1e9
            return {
                "samples_per_second": round(sps, 1),
                "gflops": round(g, 2),
                "mfu": round(g / result["peak_gflops"][precision], 4),
                "test_auc": m["test_auc"],
                "load_average": load_text(),
            }

        result["split"], result["centralized"] = {}, {}
        bf16_rows = args.bf16_rows or (args.rows if native else 1500)
        bf16_batch = args.bf16_batch or (batch if native else 250)
        bf16_shards = shards if bf16_rows == args.rows else prepare_data(py, bf16_rows, work, "shards_bf16")
        if (bf16_rows, bf16_batch) != (args.rows, batch) and not args.no_bf16:
            say(
                f"== bf16 is emulated here: its runs use {bf16_rows} rows and batch {bf16_batch} (fp32: {args.rows}, {batch})"
            )
        result["sizes"]["bf16_runs"] = {"rows": bf16_rows, "batch": bf16_batch}
        pin = shutil.which("taskset") is not None and cores >= 2 and not cuda
        where = (
            "both parties on one GPU, not pinned"
            if cuda
            else "leader pinned to core 0, follower0 to core 1 (taskset)"
            if pin
            else "NOT pinned (taskset missing or one core)"
        )
        if cuda:
            train.update(device="cuda", threads=2)
        for precision in ("fp32",) + (() if args.no_bf16 else ("bf16",)):
            tr = {**train, "precision": precision, "threads": 2 if cuda else 1}
            if precision == "bf16":
                tr["batch_size"] = bf16_batch
            data = bf16_shards if precision == "bf16" else shards
            # the split fp32 run is also the pipeline curve's M = 1 point: each party on its own core, as two
            # machines would run it (one run fewer: each run at 200k rows pays ~40 s of PSI)
            say(f"== split {precision}: leader + follower0 over tcp, 1 thread each, {where} (load {load_text()})")
            s = run_split(py, write_configs(py, work, data, f"split_{precision}", model, tr), pin=pin)
            result["split"][precision] = figures(s, precision)
            if precision == "fp32":
                split_fp32_run = s
            if precision == "fp32":
                result["breakdown"] = {"leader": s["step_breakdown"], "follower0": s["follower_breakdown"]}
            say(f"== centralized {precision}: one process, {cores} threads (load {load_text()})")
            c = run_central(py, write_configs(py, work, data, f"central_{precision}", model, tr))
            result["centralized"][precision] = figures(c, precision)
            result["centralized"][precision]["breakdown"] = c["step_breakdown"]
        say(f"== pipeline: split fp32 over M in {ms}, 1 thread each, {where}; M=1 is the split fp32 run above")
        curve = {}
        for m in ms:
            s = (
                split_fp32_run
                if m == 1
                else run_split(
                    py,
                    write_configs(
                        py, work, shards, f"pipe_m{m}", model, {**train, "microbatches": m, "threads": 2 if cuda else 1}
                    ),
                    pin=pin,
                )
            )
            curve[m] = {
                "samples_per_second": round(s["samples_per_second"], 1),
                "test_auc": s["test_auc"],
                "load_average": load_text(),
            }
            say(
                f"  M={m}: {s['samples_per_second']:9.0f} samples/s  test AUC {s['test_auc']:.4f}  (load {load_text()})"
            )
        best = max(curve, key=lambda m: curve[m]["samples_per_second"])
        base = curve.get(1, curve[ms[0]])["samples_per_second"]
        result["pipeline"] = {
            "pinned": pin,
            "curve": {f"m{m}": v for m, v in curve.items()},
            "m1": curve.get(1, curve[ms[0]]),
            "best": {**curve[best], "microbatches": best},
            "best_over_m1": round(curve[best]["samples_per_second"] / base, 3),
            "bound_from_idle": pipeline_bound(result["breakdown"]),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_average"]["end"] = load_text()

    say("")
    say(
        f"machine: {cpu} ({cores} cores)" + (f", {gpu}" if gpu else "") + f"; bf16 native: {native}; "
        f"load average at the end {load_text()}"
    )
    say(
        f"model: Wide&Deep embedding {args.emb}, MLP {args.hidden}, batch {batch}, {args.rows} rows; "
        f"{fps / 1e6:.2f} MFLOP/sample"
    )
    pk = result["peak_gflops"]
    say(
        f"matmul peak ({gpu if cuda else f'{cores} threads'}): fp32 {pk['fp32']:.1f} GFLOP/s, bf16 {pk['bf16']:.1f} GFLOP/s"
        + (f"; CUDA fp32 {pk['cuda']['fp32']:.0f}, bf16 {pk['cuda']['bf16']:.0f}" if "cuda" in pk else "")
    )
    say(f"{'run':22s} {'samples/s':>10s} {'GFLOP/s':>9s} {'MFU':>7s} {'test AUC':>9s}")
    for mode in ("split", "centralized"):
        for precision, f in result[mode].items():
            say(
                f"{mode + ' ' + precision:22s} {f['samples_per_second']:10.0f} {f['gflops']:9.1f} {100 * f['mfu']:6.1f}% "
                f"{f['test_auc']:9.4f}"
            )
    if "bf16" in result["split"]:
        r = result["split"]["bf16"]["samples_per_second"] / result["split"]["fp32"]["samples_per_second"]
        result["bf16_over_fp32"] = round(r, 3)
        say(f"bf16 / fp32 split samples/s: {r:.2f}x (target >= 2.5x where bf16 is native; native here: {native})")
    say(f"split fp32 MFU {100 * result['split']['fp32']['mfu']:.1f}% of the fp32 peak (target >= 70%)")
    p = result["pipeline"]
    say(
        "pipeline ("
        + ("pinned: leader core 0, follower0 core 1" if p["pinned"] else "not pinned")
        + "): "
        + ", ".join(f"M={k[1:]} {v['samples_per_second']:.0f}/s" for k, v in p["curve"].items())
        + f"; best M={p['best']['microbatches']} is {p['best_over_m1']:.2f}x M=1 (target >= 1.5x)"
    )
    say(
        f"  micro-batches can only fill a party's idle time (its wire wait at M=1): at most {p['bound_from_idle']:.2f}x here"
    )
    say("where a split fp32 step goes (ms per step; parts timed with perf_counter, nested parts excluded):")
    for name, b in result["breakdown"].items():
        for line in breakdown_table(name, b):
            say(line)
    if args.json:
        report_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
