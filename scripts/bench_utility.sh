#!/usr/bin/env bash
# Label-DP utility table, one command: eps x {plain, forward, posterior, rr_prior} x seeds, with early
# stopping on randomized validation labels, on synthetic data and the real 1k sample (when present).
# Usage: bash scripts/bench_utility.sh [--rows N] [--seeds K] [--eps LIST] [--epochs E] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python -m benchmarks.utility "$@"
