#!/usr/bin/env bash
# Score new rows of your own table with a table run's model (scripts/run_table_local.sh --out RUN), every party on
# this machine as its own process over ZeroMQ: each party reads its own file of new rows through its frozen
# training-time transforms, its checkpoint (RUN/checkpoints/<party>_final.pt, the model training selected), its
# shard (RUN/shards/<party>) and keys (RUN/keys); the parties intersect the new ids privately (PSI); only the leader
# receives scores and writes OUT/predictions.parquet and .csv (and AUC, logloss or RMSE when its file has the label).
# Usage: bash scripts/run_table_predict_local.sh --run RUN [--table PARTY=NEW_FILE ...] [--out DIR] [--batch-rows N]
#        [--configs DIR]
#   --table PARTY=NEW_FILE: that party's file of new rows (its training file's columns; CSV, TSV, .gz or Parquet);
#   a party without one scores its training file again (RUN/configs/parties.tsv names it). --configs DIR: the party
#   YAMLs (default RUN/configs, the YAMLs the run trained with). --out DIR: default RUN/predict. docs/own-table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --run --table --out --batch-rows --configs -- "$@"
RUN="" OUT="" CONFIGS="" TABLES=() BATCH=()
while [ $# -gt 0 ]; do
  case "$1" in
    --run) RUN=$2; shift 2 ;;
    --table) TABLES+=("$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --batch-rows) BATCH=(--batch-rows "$2"); shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$RUN" ] || { echo "error: --run RUN is required (the --out of scripts/run_table_local.sh)" >&2; exit 2; }
[ -d "$RUN/checkpoints" ] || { echo "error: --run $RUN has no checkpoints/ (train first: scripts/run_table_local.sh --out $RUN)" >&2; exit 2; }
PARTIES="$RUN/configs/parties.tsv"
if [ -z "$CONFIGS" ]; then
  [ -f "$PARTIES" ] || { echo "error: --run $RUN has no configs/parties.tsv (a run of scripts/run_table_local.sh writes it): pass --configs DIR, the party YAMLs it trained with" >&2; exit 2; }
  CONFIGS="$RUN/configs"
fi
bash scripts/setup.sh
PY="$(pwd)/.venv/bin/python"
RUN=$(cd "$RUN" && pwd)
OUT=${OUT:-$RUN/predict}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# every party's table: --table, else the run's training file (parties.tsv); the plan checks them all before any start
SPECS=("${TABLES[@]}")
if [ -f "$PARTIES" ]; then
  while IFS=$'\t' read -r _ name _ table; do
    given=0
    for spec in "${TABLES[@]}"; do [ "${spec%%=*}" != "$name" ] || given=1; done
    [ "$given" = 1 ] || SPECS+=("$name=$table")
  done < "$PARTIES"
fi
PLAN=$("$PY" -m vfl.data.table_plan "$CONFIGS" "${SPECS[@]}") || exit 2
ENDPOINT="tcp://127.0.0.1:$(free_port)"
mapfile -t LINES <<< "$PLAN"
NAMES=() PIDS=() DONE=()
trap 'stop_parties; exit 130' INT TERM
for line in "${LINES[@]}"; do
  IFS=$'\t' read -r role name config table <<< "$line"
  echo "== $name predicts from its own file: $table"
  flag=--connect
  [ "$role" = leader ] && flag=--bind
  "$PY" -m "$role" predict --config "$config" --rows "$table" --run "$RUN" --out "$OUT" "$flag" "$ENDPOINT" \
    "${BATCH[@]}" > "$OUT/$name.stdout" 2>&1 &
  NAMES+=("$name"); PIDS+=($!); DONE+=(0)
done
wait_parties "$OUT"
"$PY" - "$OUT/predict.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"== predictions: {r['files']['parquet']} and .csv: {r['rows_scored']} rows scored, {r['rows_without_score']} "
      f"without a score, {r['rows_per_second']:.0f} rows/s"
      + "".join(f"  {k} {v:.4f}" for k, v in (r.get("metrics") or {}).items() if isinstance(v, float)))
PYEOF
