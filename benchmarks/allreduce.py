"""All-reduce cost of one training step within a party at MindSpore's sizes: dense MLP gradients and sparse embedding rows.

Run under torchrun (gloo on CPU), e.g.
    .venv/bin/python -m torch.distributed.run --nproc-per-node 2 -m benchmarks.allreduce [--buckets 100000] [--batch 16000]
Rank r holds a slice of B/N rows of a global batch. Measured: (1) the all-reduce of the dense gradients (one
flat tensor, as DistributedDataParallel's buckets do), (2) gloo's sparse all-reduce of the embedding tables'
gradients (an all-gather of indices and values, so its bytes grow with N), (3) a whole DDP backward against
the same backward without DDP. Rank 0 prints the figures with the CPU model and the load average.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from benchmarks.common import cpu_model, load_text
from vfl.distributed.context import _no_buffer_sync, release_process_group
from vfl.models.wide_deep import WideDeepBottom


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16000, help="global batch rows")
    ap.add_argument("--fields", type=int, default=13, help="categorical fields of this party")
    ap.add_argument("--dense", type=int, default=7, help="dense columns of this party")
    ap.add_argument("--buckets", type=int, default=100_000, help="hash buckets per field")
    ap.add_argument("--dim", type=int, default=80)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    rows = args.batch // n
    model = WideDeepBottom([args.buckets] * args.fields, args.dense, args.dim, (1024, 512, 256, 128), 2)
    rng = np.random.default_rng(rank)
    cat = torch.from_numpy(np.minimum(rng.zipf(1.2, (rows, args.fields)) - 1, args.buckets - 1).astype(np.int64))
    dense = torch.randn(rows, args.dense)
    miss = torch.zeros(rows, args.dense)

    def backward(m):
        m(dense, miss, cat).sum().backward()

    plain = timed(lambda: (model.zero_grad(set_to_none=True), backward(model)), args.repeats)
    ddp = DistributedDataParallel(model, **_no_buffer_sync())
    with_ddp = timed(lambda: (model.zero_grad(set_to_none=True), backward(ddp)), args.repeats)
    model.zero_grad(set_to_none=True)
    backward(model)
    dense_grads = torch.cat([p.grad.flatten() for p in model.parameters() if not p.grad.is_sparse])
    sparse = [p.grad.coalesce() for p in model.parameters() if p.grad.is_sparse]
    t_dense = timed(lambda: dist.all_reduce(dense_grads), args.repeats)
    t_sparse = timed(lambda: [dist.all_reduce(g) for g in sparse], args.repeats)
    nnz_rows = sum(int(g.indices().shape[1]) for g in sparse)
    sparse_bytes = sum(int(g.indices().shape[1]) * (8 + g.values()[0].numel() * 4) for g in sparse)
    if rank == 0:
        print(f"{n} ranks (gloo), {cpu_model()}, load average {load_text()}")
        print(
            f"per rank: {rows} rows, dense gradients {dense_grads.numel() / 1e6:.2f} M floats "
            f"({dense_grads.numel() * 4 / 2**20:.1f} MiB), sparse embedding rows {nnz_rows} ({sparse_bytes / 2**20:.1f} MiB)"
        )
        print(
            f"dense all_reduce {t_dense * 1e3:.1f} ms; sparse all_reduce (gloo, all-gather of rows) {t_sparse * 1e3:.1f} ms; "
            f"backward {plain * 1e3:.0f} ms alone vs {with_ddp * 1e3:.0f} ms with DDP"
        )
    ddp = None
    release_process_group()  # gloo aborts at exit if DDP's reducer is only freed during finalization


if __name__ == "__main__":
    main()
