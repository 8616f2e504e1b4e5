#!/usr/bin/env bash
# Run one follower alone (for a deployment across hosts), from its own raw file or an already prepared shard.
# Usage: bash scripts/run_follower.sh CONFIG CONNECT_ENDPOINT [--raw OWN_FILE [--shards DIR] [--hash-buckets N] [--parties YAML]]
#                                   [--data SHARD_DIR] [--out DIR] [--keys DIR] [--epochs N]
#   e.g. bash scripts/run_follower.sh examples/wide_deep_criteo/follower.yaml tcp://leader-host:5560 --raw follower0.csv --keys /secure/vfl-keys
# --raw: the follower's own file (id column and its columns, no label; TSV or CSV) is prepared alone into DIR/<party>
# (default runs/shards); the ids are then intersected privately with the leader's (PSI) before training.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '3,7p' "$0"; exit 2; }
CONFIG=$1 ENDPOINT=$2; shift 2
RAW="" SHARDS="runs/shards" PREP=() REST=()
while [ $# -gt 0 ]; do
  case "$1" in
    --raw) RAW=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --hash-buckets|--parties|--vocab-min-count|--seed) PREP+=("$1" "$2"); shift 2 ;;
    *) REST+=("$1"); shift ;;
  esac
done
bash scripts/setup.sh
PY=.venv/bin/python
. scripts/prepare_own.sh
if [ -n "$RAW" ]; then
  REST+=(--data "$(prepare_own "$CONFIG" "$RAW" "$SHARDS" "${PREP[@]}")")
fi
exec "$PY" -m follower --config "$CONFIG" --connect "$ENDPOINT" "${REST[@]}"
