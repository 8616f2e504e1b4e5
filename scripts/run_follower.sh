#!/usr/bin/env bash
# Run one follower alone (for a deployment across hosts), from its own raw file or an already prepared shard.
# Usage: bash scripts/run_follower.sh CONFIG CONNECT_ENDPOINT [--raw OWN_FILE [--shards DIR] [--vocab-min-count N | --hash-buckets N] [--parties YAML]]
#                                   [--data SHARD_DIR] [--out DIR] [--keys DIR] [--epochs N]
#   e.g. bash scripts/run_follower.sh examples/wide_deep_criteo/follower.yaml tcp://leader-host:5560 --raw follower0.csv --keys /secure/vfl-keys
# --ranks N: N ranks of this party under torchrun (rank r binds/connects the endpoint's port + r); across machines
#   add --nnodes M --node-rank K --master-addr HOST --master-port P (torchrun's flags; the same N on every party)
# --raw: the follower's own file (id column and its columns, no label; TSV or CSV) is prepared alone into DIR/<party>
# (default runs/shards); the ids are then intersected privately with the leader's (PSI) before training.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '3,9p' "$0"; exit 2; }
CONFIG=$1 ENDPOINT=$2; shift 2
RAW="" SHARDS="runs/shards" PREP=() REST=() RANKS=1 NNODES=1 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --raw) RAW=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --nnodes) NNODES=$2; shift 2 ;;
    --node-rank) NODE_RANK=$2; shift 2 ;;
    --master-addr) MASTER_ADDR=$2; shift 2 ;;
    --master-port) MASTER_PORT=$2; shift 2 ;;
    --hash-buckets|--parties|--vocab-min-count|--seed) PREP+=("$1" "$2"); shift 2 ;;
    *) REST+=("$1"); shift ;;
  esac
done
bash scripts/setup.sh
PY=.venv/bin/python
. scripts/prepare_own.sh
. scripts/lib.sh
if [ -n "$RAW" ]; then
  REST+=(--data "$(prepare_own "$CONFIG" "$RAW" "$SHARDS" "${PREP[@]}")")
fi
launcher follower "$RANKS" "$NNODES" "$NODE_RANK" "$MASTER_ADDR" "$MASTER_PORT"
exec "${LAUNCH[@]}" --config "$CONFIG" --connect "$ENDPOINT" "${REST[@]}"
