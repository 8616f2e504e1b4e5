#!/usr/bin/env bash
# Benchmark one party's `python -m vfl.data prepare` (the per-party path): a leader's own Criteo file (1M synthetic
# rows, --vocab-min-count 10) and the flights tables from CSV under their YAML schema (examples/flights), each with
# the fast reader (pyarrow) and the pandas text path. Prints rows/s (best and spread of --repeat runs), seconds,
# CPU seconds, peak RSS, the CPU model and the load average; writes runs/bench_data/bench_data.json.
# Usage: bash scripts/bench_data.sh [--work DIR] [--rows N] [--repeat K] [--reader both|fast|text] [--skip-flights]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python -m benchmarks.data "$@"
