#!/usr/bin/env bash
# Online scoring benchmark on 127.0.0.1: a leader and a follower `serve` a trained run (default runs/local, the front
# door's Wide&Deep on Criteo: bash scripts/run_vfl_train_local.sh); p50/p99 latency of 1-row and 100-row requests,
# then scored rows/s under concurrent clients (100-row requests), for each serving engine (onnxruntime, torch) one
# after the other, with the CPU model and the load average. Writes runs/bench_serve/bench_serve.json.
# Usage: bash scripts/bench_serve.sh [--run RUN_DIR] [--requests N] [--clients C] [--seconds S] [--engines onnx,torch]
#        [--json PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m benchmarks.serve "$@"
