#!/usr/bin/env bash
# Your own table, every party on this machine: each party's YAML declares its columns (data.schema), each party
# prepares its own file alone, the parties intersect their ids privately (PSI) and train over ZeroMQ on 127.0.0.1.
# Usage: bash scripts/run_table_local.sh --configs DIR --table PARTY=FILE [--table PARTY=FILE ...] [--out DIR]
#        [--epochs N] [--label-dp EPS] [--set KEY=VALUE ...]
#   DIR holds one YAML per party (role leader for one of them); FILE is that party's own table (CSV, TSV, .gz or
#   Parquet) with the id column and the columns its data.schema declares (the leader's with the label).
#   --set KEY=VALUE overrides a config key of every party whose role takes it (e.g. --set train.lr=0.003 all,
#   --set train.early_stopping.patience=8 the leader only: said on the console); --label-dp EPS sets
#   privacy.label_dp.eps on the leader. Outputs in OUT (default runs/table): shards/, keys/, configs/ (the YAMLs as
#   given), checkpoints/, each party's log, metrics.json; scripts/run_table_predict_local.sh --run OUT scores new
#   rows. The real examples use it: bash scripts/run_vfl_train_local.sh --example flights|caravan|bikeshare.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --configs --table --out --epochs --label-dp --set -- "$@"
CONFIGS="" OUT=runs/table EPOCHS="" TABLES=() SETS=() EPS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) CONFIGS=$2; shift 2 ;;
    --table) TABLES+=("$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --label-dp) EPS=$2; shift 2 ;;
    --set) SETS+=("$2"); shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$CONFIGS" ] && [ -d "$CONFIGS" ] || { echo "error: --configs DIR: a directory of party YAMLs is required, got '${CONFIGS}'" >&2; exit 2; }
[ ${#TABLES[@]} -gt 0 ] || { echo "error: --table PARTY=FILE is required, once per party" >&2; exit 2; }
bash scripts/setup.sh
PY="$(pwd)/.venv/bin/python"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# the parties, their configs and tables, checked before anything starts: "leader NAME CONFIG TABLE" lines
PLAN=$("$PY" -m vfl.data.table_plan "$CONFIGS" "${TABLES[@]}") || exit 2
PORT=$(free_port)
ENDPOINT="tcp://127.0.0.1:$PORT"
KEYS="$OUT/keys"
mapfile -t LINES <<< "$PLAN"
NAMES=()
for line in "${LINES[@]}"; do IFS=$'\t' read -r _ name _ _ <<< "$line"; NAMES+=("$name"); done
local_keys "$KEYS" "${NAMES[@]}"
# the YAMLs as given and each party's table, for scripts/run_table_predict_local.sh --run OUT and --run of the party
# commands: OUT/configs/<party>.yaml and OUT/configs/parties.tsv ("ROLE NAME CONFIG TABLE", the leader first)
mkdir -p "$OUT/configs"
: > "$OUT/configs/parties.tsv.tmp"
for line in "${LINES[@]}"; do
  IFS=$'\t' read -r role name config table <<< "$line"
  [ "$config" -ef "$OUT/configs/$name.yaml" ] || cp "$config" "$OUT/configs/$name.yaml"  # --configs OUT/configs: kept
  printf '%s\t%s\t%s\t%s\n' "$role" "$name" "$OUT/configs/$name.yaml" "$table" >> "$OUT/configs/parties.tsv.tmp"
done
mv "$OUT/configs/parties.tsv.tmp" "$OUT/configs/parties.tsv"
# each --set goes to the parties whose role takes its key (vfl/config/party_sets.py): a leader-only key to the leader
OVERRIDES=() LEADER_SETS=() FOLLOWER_SETS=()
if [ ${#SETS[@]} -gt 0 ]; then
  ROUTED=$("$PY" -m vfl.config.party_sets "${SETS[@]}") || exit 2
  while IFS=$'\t' read -r who kv; do
    case "$who" in
      all) OVERRIDES+=(--set "$kv") ;;
      leader) LEADER_SETS+=(--set "$kv"); echo "== --set $kv: the leader only (${NAMES[0]})" ;;
      follower) FOLLOWER_SETS+=(--set "$kv"); echo "== --set $kv: the followers only (${NAMES[*]:1})" ;;
    esac
  done <<< "$ROUTED"
fi
[ -n "$EPOCHS" ] && OVERRIDES+=(--epochs "$EPOCHS")
for line in "${LINES[@]}"; do
  IFS=$'\t' read -r role name config table <<< "$line"
  echo "== $name prepares its own table alone: $table -> $OUT/shards/$name"
  "$PY" -m vfl.data prepare --config "$config" --input "$table" --out "$OUT/shards" --force
done
echo "== ${NAMES[*]} over ZeroMQ at $ENDPOINT (logs in $OUT)"
PIDS=() DONE=()
trap 'stop_parties; exit 130' INT TERM
for line in "${LINES[@]}"; do
  IFS=$'\t' read -r role name config table <<< "$line"
  flag=--connect
  extra=(--set "network.leader_key_file=$KEYS/${NAMES[0]}.key" "${FOLLOWER_SETS[@]}")  # --keys DIR: DIR/leader.key
  if [ "$role" = leader ]; then
    flag=--bind
    extra=("${LEADER_SETS[@]}")
    [ -n "$EPS" ] && extra+=(--set "privacy.label_dp.eps=$EPS")
  fi
  "$PY" -m "$role" --config "$config" "$flag" "$ENDPOINT" --data "$OUT/shards/$name" --out "$OUT" --keys "$KEYS" \
    "${OVERRIDES[@]}" "${extra[@]}" > "$OUT/$name.stdout" 2>&1 &
  PIDS+=($!); DONE+=(0)
done
wait_parties "$OUT"
echo "== what the parties said: warnings, PSI, label DP (whole logs: $OUT/<party>.log)"
"$PY" -m vfl.obs.run_summary "$OUT" "${NAMES[@]}" || true
tail -n 1 "$OUT/${NAMES[0]}.stdout"
echo "== metrics: $OUT/metrics.json"
