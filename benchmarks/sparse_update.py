"""Lazy Adam on the embedding tables of one Wide&Deep bottom: torch.optim.SparseAdam against vfl's LazyAdam.

Both run side by side in one process on the same gradients (MindSpore Federated's sizes by default: 13 fields of
20000 buckets, embedding 80 plus the wide table of width 1, batch 16000), check that the tables agree, and print
the median milliseconds per update. `--device cuda` times with CUDA events. Prints the CPU (and GPU) model.
Usage: python -m benchmarks.sparse_update [--device cpu|cuda] [--fields 13] [--buckets 20000] [--dim 80]
       [--batch 16000] [--repeats 20] [--threads N] [--missing 0.4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--fields", type=int, default=13)
    ap.add_argument("--buckets", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=80)
    ap.add_argument("--batch", type=int, default=16000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--missing",
        type=float,
        default=0.4,
        help="share of lookups that hit the field's 'missing' id (Criteo: up to ~80%% in some fields)",
    )
    args = ap.parse_args(argv)
    for name in ("fields", "buckets", "dim", "batch", "repeats", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be an integer >= 1, got {getattr(args, name)}")
    if not 0 <= args.missing <= 1:
        ap.error(f"--missing must be in [0, 1], got {args.missing}")
    import torch

    from benchmarks.common import cpu_model
    from vfl.training.lazy_adam import LazyAdam

    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{args.threads} thread(s)"
    print(f"machine: {cpu_model()}; {where}; torch {torch.__version__}", flush=True)
    rows = args.fields * args.buckets
    g = torch.Generator().manual_seed(0)
    init = {w: torch.randn(rows, w, generator=g) * 0.01 for w in (args.dim, 1)}
    # Zipf-like ids per field, offset into the shared table like WideDeepBottom
    ranks = torch.arange(1, args.buckets + 1, dtype=torch.float64)
    probs = (1.0 / ranks) / (1.0 / ranks).sum()
    ids = []
    for _ in range(4):
        per_field = torch.multinomial(probs, args.batch * args.fields, replacement=True, generator=g).view(
            args.batch, args.fields
        )
        per_field[torch.rand(per_field.shape, generator=g) < args.missing] = 0  # one very frequent id per field
        ids.append(per_field + torch.arange(args.fields) * args.buckets)
    ids = [i.to(dev) for i in ids]
    setups = {}
    for name, cls in (("SparseAdam", torch.optim.SparseAdam), ("LazyAdam", LazyAdam)):
        tables = [
            torch.nn.Embedding.from_pretrained(t.clone(), freeze=False, sparse=True).to(dev) for t in init.values()
        ]
        setups[name] = (tables, cls([t.weight for t in tables], lr=1e-3))
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    times = {name: [] for name in setups}
    for r in range(args.repeats + 3):
        batch = ids[r % len(ids)]
        for name, (tables, opt) in setups.items():
            opt.zero_grad(set_to_none=True)
            sum(t(batch).float().pow(2).sum() for t in tables).backward()
            sync()
            t0 = time.perf_counter()
            opt.step()
            sync()
            if r >= 3:  # warm-up
                times[name].append(time.perf_counter() - t0)
    a, b = (setups[n][0] for n in ("SparseAdam", "LazyAdam"))
    diff = max(float((x.weight - y.weight).detach().abs().max()) for x, y in zip(a, b))
    unique = int(torch.unique(ids[0]).numel())
    med = {n: 1e3 * statistics.median(t) for n, t in times.items()}
    print(
        f"{args.fields} fields x {args.buckets} buckets, dim {args.dim} + wide 1, batch {args.batch}, {args.missing:.0%} missing "
        f"({unique} unique rows a batch); median of {args.repeats} updates:"
    )
    for n, ms in med.items():
        print(f"  {n:10s} {ms:8.2f} ms")
    print(
        f"  LazyAdam / SparseAdam: {med['SparseAdam'] / med['LazyAdam']:.2f}x faster; max |table difference| {diff:.3g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
