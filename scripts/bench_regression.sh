#!/usr/bin/env bash
# Label DP for real-valued labels, one command: test RMSE and R^2 for eps x {laplace, rr_on_bins, unbiased} x seeds
# on the flights (arrival delay), bikeshare and synthetic data sets (docs/regression.md has the table).
# Usage: bash scripts/bench_regression.sh [--rows N] [--seeds K] [--eps LIST] [--epochs E] [--json OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m benchmarks.regression "$@"
