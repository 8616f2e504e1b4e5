#!/usr/bin/env bash
# Micro-batch pipelining where the parties' work is sequential: a label party with 3 dense columns and a heavy
# MLP top, a follower with the other 36 columns; leader and follower pinned to separate cores. Prints the curve
# over train.microbatches, the idle-time bound, the CPU model and the load average.
# Usage: bash scripts/bench_pipeline.sh [--rows N] [--batch B] [--cut-dim D] [--top-hidden 1024,1024,1024,512]
#                                       [--microbatches 1,2,4,8] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --rows --batch --cut-dim --top-hidden --microbatches --json -- "$@"
bash scripts/setup.sh >/dev/null
exec "$(pwd)/.venv/bin/python" -m benchmarks.pipeline "$@"
