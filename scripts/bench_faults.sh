#!/usr/bin/env bash
# A soak of random faults over a front-door run (benchmarks/faults.py): relay flaps of random duration and kill -9
# of each party, restarted at once with --resume auto; prints each fault, what it cost, the final test AUC against the
# fault-free run's, whether the final weights are bit-identical, the machine and the load.
# Usage: bash scripts/bench_faults.sh [--rows N] [--faults N] [--seed S] [--epochs N] [--batch-size B]
#        [--checkpoint-every K] [--max-flap-s S] [--kinds flap,kill-follower,kill-leader] [--json OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python -m benchmarks.faults "$@"
