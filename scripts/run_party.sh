#!/usr/bin/env bash
# The body of run_leader.sh and run_follower.sh (their headers say the usage): run_party.sh ROLE USAGE_FILE CONFIG
# ENDPOINT [flags]. Prepares this party's own raw file alone when given --raw, then starts the role (under torchrun
# with --ranks N); the leader binds ENDPOINT, a follower connects to it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROLE=$1 USAGE_OF=$2; shift 2
case "$ROLE" in
  leader) ENDPOINT_FLAG=--bind ;;
  follower) ENDPOINT_FLAG=--connect ;;
  *) echo "error: run_party.sh ROLE: allowed: leader, follower; got $ROLE" >&2; exit 2 ;;
esac
[ $# -ge 2 ] || { awk 'NR > 2 && !/^#/ {exit} NR > 2' "$USAGE_OF"; exit 2; }
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
    --trusted-rank-network) export VFL_TRUSTED_RANK_NETWORK=1; shift ;;  # checked by vfl/distributed/launch.py
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
launcher "$ROLE" "$RANKS" "$NNODES" "$NODE_RANK" "$MASTER_ADDR" "$MASTER_PORT"
exec "${LAUNCH[@]}" --config "$CONFIG" "$ENDPOINT_FLAG" "$ENDPOINT" "${REST[@]}"
