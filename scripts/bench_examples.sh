#!/usr/bin/env bash
# Baselines of the real examples (flights, caravan, bikeshare): scikit-learn logistic / linear regression and
# HistGradientBoosting on the leader's columns alone and on all columns pooled, on the split model's rows and split.
# Usage: bash scripts/bench_examples.sh [--examples flights caravan bikeshare] [--out runs/bench_examples] [--seed 0]
# Writes OUT/<example>/raw/<party>.csv (each party's own file) and OUT/bench_examples.json; prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_examples.sh
exec .venv/bin/python -m benchmarks.examples "$@"
