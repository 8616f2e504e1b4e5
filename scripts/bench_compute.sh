#!/usr/bin/env bash
# Compute benchmark: the machine's matmul peak (fp32, bf16, CUDA when present), FLOPs per sample, split and
# centralized samples/s / GFLOP/s / MFU / test AUC in fp32 and bf16, where each party's step time goes, and
# the micro-batch pipeline curve with leader and follower pinned to separate cores. Names the CPU and prints
# the load average beside the figures.
# Usage: bash scripts/bench_compute.sh [--rows N] [--batch B] [--emb D] [--hidden 1024,512,256,128] [--epochs N]
#                                      [--microbatches 1,2,4,8] [--quick] [--no-bf16] [--json FILE]
# Default: MindSpore Federated's sizes (embedding 80, MLP 1024-512-256-128, batch 16000, 200k rows).
# Quick look: bash scripts/bench_compute.sh --rows 20000 --quick   (batch 2000, a few minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --rows --batch --emb --hidden --epochs --microbatches --json -- "$@"
bash scripts/setup.sh >/dev/null
exec "$(pwd)/.venv/bin/python" -m benchmarks.compute "$@"
