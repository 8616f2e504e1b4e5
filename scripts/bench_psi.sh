#!/usr/bin/env bash
# PSI benchmark: time and bytes for 1e5 and 1e6 ids per side (leader and follower processes, CurveZMQ, 50% overlap),
# with the CPU model, and openmined-psi measured on the same CPU when installed.
# Usage: bash scripts/bench_psi.sh [--sizes 100000,1000000] [--reference-size 10000]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/bench_psi.py "$@"
