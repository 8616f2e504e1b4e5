#!/usr/bin/env bash
# The model table: every built-in bottom on the synthetic default, the flights example and the real Criteo sample
# (when present), without and with label DP at eps 1; test AUC mean ± sd over seeds, samples/s, parameters.
# Usage: bash scripts/bench_models.sh --json out.json [--seeds 3] [--epochs 3] [--synth-rows N] [--flights-rows N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python -m benchmarks.models "$@"
