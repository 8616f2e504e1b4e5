#!/usr/bin/env bash
# Run the leader alone (for a deployment across hosts), from its own raw file or an already prepared shard.
# Usage: bash scripts/run_leader.sh CONFIG BIND_ENDPOINT [--raw OWN_FILE [--shards DIR] [--hash-buckets N] [--parties YAML]]
#                                   [--data SHARD_DIR] [--out DIR] [--keys DIR] [--epochs N]
#   e.g. bash scripts/run_leader.sh examples/wide_deep_criteo/leader.yaml tcp://0.0.0.0:5560 --raw leader.tsv --keys /secure/vfl-keys
# --raw: the leader's own file (id column, its columns, label; TSV or CSV) is prepared alone into DIR/<party>
# (default runs/shards); the ids are then intersected privately with each follower's (PSI) before training.
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
exec "$PY" -m leader --config "$CONFIG" --bind "$ENDPOINT" "${REST[@]}"
