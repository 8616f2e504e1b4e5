#!/usr/bin/env bash
# Run the leader alone (for a two-host deployment).
# Usage: bash scripts/run_leader.sh CONFIG BIND_ENDPOINT [--data DIR] [--out DIR] [--keys DIR] [--epochs N]
#   e.g. bash scripts/run_leader.sh examples/wide_deep_criteo/leader.yaml tcp://0.0.0.0:5560 --keys /secure/vfl-keys
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '3,4p' "$0"; exit 2; }
CONFIG=$1 ENDPOINT=$2; shift 2
bash scripts/setup.sh
exec .venv/bin/python -m leader --config "$CONFIG" --bind "$ENDPOINT" "$@"
