#!/usr/bin/env bash
# Run one follower alone (for a two-host deployment).
# Usage: bash scripts/run_follower.sh CONFIG CONNECT_ENDPOINT [--data DIR] [--out DIR] [--keys DIR]
#   e.g. bash scripts/run_follower.sh examples/wide_deep_criteo/follower.yaml tcp://leader-host:5560 --keys /secure/vfl-keys
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '3,4p' "$0"; exit 2; }
CONFIG=$1 ENDPOINT=$2; shift 2
bash scripts/setup.sh
exec .venv/bin/python -m follower --config "$CONFIG" --connect "$ENDPOINT" "$@"
