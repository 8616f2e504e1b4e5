#!/usr/bin/env bash
# Score new rows with a local training run's model, split between a leader and a follower process over ZeroMQ on
# this machine, as the two organisations would: each party reads its own checkpoint (RUN/checkpoints, the model
# training selected), its shard's saved transforms (RUN/shards/<party>) and its own file of new rows; the parties
# intersect the new ids privately (PSI); only the leader receives scores and writes OUT/predictions.parquet and .csv.
# Usage: bash scripts/run_vfl_predict_local.sh --run RUN_DIR [--out DIR] [--data NEW_TSV] [--batch-rows N]
# RUN_DIR: the --out of scripts/run_vfl_train_local.sh (default configs; env LEADER_CONFIG, FOLLOWER_CONFIG as there).
# --data NEW_TSV: new rows in the combined Criteo-style layout, split into each party's own file first (a label column
# is kept by the leader, which then reports AUC and logloss); default: the run's own party files RUN/raw/<party>.tsv.
# --out DIR: default RUN_DIR/predict. docs/predict.md.
# A table run (scripts/run_table_local.sh --out RUN_DIR: it has RUN_DIR/configs/parties.tsv) is scored by
# scripts/run_table_predict_local.sh with these arguments (--table PARTY=NEW_FILE there, no --data).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
for ((i = 1; i < $#; i++)); do
  if [ "${!i}" = --run ]; then
    j=$((i + 1))
    [ ! -f "${!j}/configs/parties.tsv" ] || exec bash scripts/run_table_predict_local.sh "$@"
  fi
done
RUN="" OUT="" DATA="" BATCH=()
parse_flags --run=RUN --out=OUT --data=DATA --batch-rows=BATCH[] -- "$@"
[ -n "$RUN" ] || { echo "error: --run RUN_DIR is required (the --out of scripts/run_vfl_train_local.sh)" >&2; exit 2; }
[ -d "$RUN/checkpoints" ] || { echo "error: --run $RUN has no checkpoints/ (train first: scripts/run_vfl_train_local.sh --out $RUN)" >&2; exit 2; }
[ -z "$DATA" ] || [ -f "$DATA" ] || { echo "error: --data $DATA: file not found" >&2; exit 2; }
bash scripts/setup.sh
PY="$(pwd)/.venv/bin/python"
RUN=$(cd "$RUN" && pwd)
OUT=${OUT:-$RUN/predict}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LEADER_CONFIG=${LEADER_CONFIG:-examples/wide_deep_criteo/leader.yaml}
FOLLOWER_CONFIG=${FOLLOWER_CONFIG:-examples/wide_deep_criteo/follower.yaml}
FOLLOWER=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["party"])' "$FOLLOWER_CONFIG")
ROWS="$RUN/raw"
if [ -n "$DATA" ]; then
  ROWS="$OUT/raw"
  echo "== splitting $DATA into each party's own file of new rows -> $ROWS"
  "$PY" -m vfl.data split --input "$DATA" --out "$ROWS"
fi
for party in leader "$FOLLOWER"; do
  [ -f "$ROWS/$party.tsv" ] || { echo "error: $ROWS/$party.tsv not found (pass --data NEW_TSV)" >&2; exit 2; }
  [ -d "$RUN/shards/$party" ] || { echo "error: $RUN/shards/$party not found (the run's prepared shards)" >&2; exit 2; }
done
ENDPOINT="tcp://127.0.0.1:$(free_port)"
echo "== leader and $FOLLOWER predict over ZeroMQ at $ENDPOINT (logs in $OUT)"
NAMES=() PIDS=() DONE=()
trap 'stop_parties; exit 130' INT TERM
"$PY" -m leader predict --config "$LEADER_CONFIG" --rows "$ROWS/leader.tsv" --run "$RUN" --out "$OUT" \
  --data "$RUN/shards/leader" --keys "$RUN/keys" --bind "$ENDPOINT" "${BATCH[@]}" &
NAMES+=(leader); PIDS+=($!); DONE+=(0)
"$PY" -m follower predict --config "$FOLLOWER_CONFIG" --rows "$ROWS/$FOLLOWER.tsv" --run "$RUN" --out "$OUT" \
  --data "$RUN/shards/$FOLLOWER" --keys "$RUN/keys" --connect "$ENDPOINT" "${BATCH[@]}" > "$OUT/$FOLLOWER.stdout" 2>&1 &
NAMES+=("$FOLLOWER"); PIDS+=($!); DONE+=(0)
wait_parties "$OUT"
"$PY" - "$OUT/predict.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"== predictions: {r['files']['parquet']} and .csv: {r['rows_scored']} rows scored, {r['rows_without_score']} "
      f"without a score, {r['rows_per_second']:.0f} rows/s"
      + "".join(f"  {k} {v:.4f}" for k, v in (r.get("metrics") or {}).items() if isinstance(v, float)))
PYEOF
