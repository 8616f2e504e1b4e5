#!/usr/bin/env bash
# Train on the default synthetic data with the follower recording every gradient it receives,
# then run the label-leakage attacks (python -m privacy.attacks) and write DIR/leakage.json.
# Usage: bash scripts/measure_label_leakage.sh [--eps E] [--out DIR] [--rows N] [--epochs N] [--compare DIR2]
#   no --eps: no label DP (the sign attack should reach AUC ~1.0 on the scalar cut)
#   with --eps: also the follower's full-view attack (replays its train.seed and every public seed/salt,
#   votes over epochs); --compare DIR2: the two-release attack against an earlier run of this script
#   on the same data (another eps), e.g. --eps 2 --compare runs/leakage_1
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --eps --out --rows --epochs --compare -- "$@"
EPS="" OUT="" ROWS=200000 EPOCHS=2 COMPARE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --eps) EPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --compare) COMPARE=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-runs/leakage_${EPS:-nodp}}
bash scripts/setup.sh
PY=.venv/bin/python
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
"$PY" - "$EPS" "$OUT" <<'PYEOF'
import sys, yaml
eps, out = sys.argv[1], sys.argv[2]
leader = yaml.safe_load(open("examples/wide_deep_criteo/leader.yaml"))
if eps:
    leader["privacy"] = {"label_dp": {"eps": float(eps), "mechanism": "rr"}}
follower = yaml.safe_load(open("examples/wide_deep_criteo/follower.yaml"))
follower["debug"] = {"record_gradients": f"{out}/gradients.npz"}
yaml.safe_dump(leader, open(f"{out}/leader.yaml", "w"))
yaml.safe_dump(follower, open(f"{out}/follower.yaml", "w"))
PYEOF
echo "== training $EPOCHS epoch(s) on $ROWS rows with the follower recording its gradients (log: $OUT/train.stdout)"
LEADER_CONFIG="$OUT/leader.yaml" FOLLOWER_CONFIG="$OUT/follower.yaml" \
  bash scripts/run_vfl_train_local.sh --out "$OUT" --rows "$ROWS" --epochs "$EPOCHS" > "$OUT/train.stdout"
extra=$("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(json.dumps({"model_test_auc": m["test_auc"], "note": "model_test_auc is the feature-only baseline: what a model trained on (noisy) labels predicts from features alone"}))' "$OUT/metrics.json")
EPS_ARGS=()
if [ -n "$EPS" ]; then
  SEED=$("$PY" -c 'import sys, yaml; print((yaml.safe_load(open(sys.argv[1])).get("train") or {}).get("seed", 0))' "$OUT/follower.yaml")
  EPS_ARGS=(--eps "$EPS" --follower-seed "$SEED")
  if [ -n "$COMPARE" ]; then
    CEPS=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["eps"])' "$COMPARE/leakage.json")
    EPS_ARGS+=(--compare-gradients "$COMPARE/gradients.npz" --compare-eps "$CEPS")
  fi
fi
echo "== label-leakage attacks on $OUT/gradients.npz"
"$PY" -m privacy.attacks --gradients "$OUT/gradients.npz" --labels "$OUT/shards/leader/train" "${EPS_ARGS[@]}" --out "$OUT/leakage.json" --extra "$extra"
