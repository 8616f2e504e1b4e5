"""Profile the centralized Wide&Deep step on one device: ms per step with and without the breakdown's
synchronisation, the breakdown's parts, and torch.profiler's table of the costliest kernels and CPU ops.

The step is the one every party runs (both bottoms, the top, backward, the dense and lazy Adam updates), in one
process, without the wire, evaluation, curves or logs: what the model costs on this device, to compare with
benchmarks.compute's split and centralized runs. MindSpore Federated's sizes (embedding 80, MLP 1024-512-256-128,
batch 16000). Prints the CPU (and GPU) model.
Usage: python -m benchmarks.profile_step [--device cpu|cuda] [--rows 60000] [--precision fp32|bf16] [--steps 20]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--batch", type=int, default=16000)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.rows < 4 * args.batch:
        ap.error(
            f"--batch and --steps must be >= 1 and --rows >= 4 x --batch, got rows={args.rows} batch={args.batch} "
            f"steps={args.steps}"
        )
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.common import cpu_model
    from benchmarks.runs import local_parties
    from vfl.training.step_timer import TIMER

    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    print(
        f"machine: {cpu_model()}"
        + (f", {torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else "")
        + f"; torch {torch.__version__}",
        flush=True,
    )
    work = tempfile.mkdtemp(prefix="profile_step_")
    raw = f"{work}/synth.tsv"
    print(f"== synthesizing and preparing {args.rows} rows", flush=True)
    subprocess.run(
        [sys.executable, "-m", "vfl.data", "synth", "--rows", str(args.rows), "--out", raw],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "vfl.data",
            "prepare",
            "--input",
            raw,
            "--out",
            f"{work}/shards",
            "--hash-buckets",
            "20000",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    model = {"bottom": {"embedding_dim": 80, "hidden": [1024, 512, 256, 128], "cut_dim": 2}}
    train = {
        "epochs": 1,
        "batch_size": args.batch,
        "seed": 0,
        "lr": 0.001,
        "precision": args.precision,
        "device": dev.type,
    }
    parties, top = local_parties(f"{work}/shards", model, train, args.device)
    labels = torch.from_numpy(parties[0].train_split.labels.astype(np.float32))
    n = len(parties[0].train_split)
    rng = np.random.default_rng(0)

    def step() -> float:
        rows = np.sort(rng.choice(n, args.batch, replace=False))
        cuts = [p.forward_train(rows) for p in parties]
        loss = top.loss(cuts, labels[rows])
        loss.backward()
        top.step()
        for p in parties:
            p.step_optimizer()
        return loss.item()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(5):  # warm-up: allocator, cuBLAS handles, optimizer state
        step()
    for synced in (False, True):
        TIMER.watch(dev if synced else "cpu")
        TIMER.reset()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        dt = (time.perf_counter() - t0) / args.steps
        parts = TIMER.report()["parts"]
        print(
            f"{dev.type} {args.precision}, parts synchronised={synced}: {1e3 * dt:.2f} ms/step, "
            f"{args.batch / dt:.0f} samples/s; parts (ms/step): "
            + ", ".join(f"{k} {1e3 * v / args.steps:.2f}" for k, v in parts.items()),
            flush=True,
        )
    TIMER.watch("cpu")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(10):
            step()
    key = "cuda_time_total" if dev.type == "cuda" else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
