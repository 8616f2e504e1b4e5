#!/usr/bin/env bash
# Label DP x embedding DP, one command: test AUC and the leader's attack on the follower's columns per
# (label eps, embedding eps), real multi-process runs on synthetic data or flights (benchmarks/embedding_dp.py).
# Usage: bash scripts/bench_embedding_dp.sh [--dataset synthetic|flights] [--rows N] [--epochs E] [--label-eps LIST] [--embedding-eps LIST] [--clip C]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python -m benchmarks.embedding_dp "$@"
