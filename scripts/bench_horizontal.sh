#!/usr/bin/env bash
# Results table of the FedAvg example: every encrypt type, DP_ENCRYPT and NBAFL across eps, Laplace eval.
# Prints each run's privacy cost twice, side by side: summed (basic composition) and the maintained accountant's.
# Usage: bash scripts/bench_horizontal.sh [--out DIR] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --out --rounds -- "$@"
OUT=runs/bench_horizontal ROUNDS=20
while [ $# -gt 0 ]; do
  case "$1" in --out) OUT=$2; shift 2 ;; --rounds) ROUNDS=$2; shift 2 ;; *) echo "error: unknown argument $1" >&2; exit 2 ;; esac
done
bash scripts/setup.sh >/dev/null
PY=.venv/bin/python
BASE=examples/horizontal_fedavg/fedavg.yaml
mkdir -p "$OUT"
run() {  # name, encrypt type, python edits of the yaml dict
  local name=$1 kind=$2 edit=$3
  "$PY" -c "import yaml,sys; d=yaml.safe_load(open('$BASE')); $edit; yaml.safe_dump(d, open('$OUT/$name.yaml','w'))"
  "$PY" -m vfl.horizontal --config "$OUT/$name.yaml" --encrypt "$kind" --out "$OUT/$name" --rounds "$ROUNDS" > "$OUT/$name.log" 2>&1
}
run not NOT_ENCRYPT "pass"
run pw PW_ENCRYPT "pass"
run signds SIGNDS "pass"
for e in 1 10 100 1000; do run dp_$e DP_ENCRYPT "d['encrypt']['dp']['dp_eps']=$e"; done
for e in 10 100 1000; do run nbafl_$e NBAFL "d['encrypt']['nbafl']['epsilon']=$e"; done
run laplace NOT_ENCRYPT "d['privacy_eval_type']='LAPLACE'; d['laplace_eval']['laplace_eval_eps']=230260"
run laplace_10 NOT_ENCRYPT "d['privacy_eval_type']='LAPLACE'; d['laplace_eval']['laplace_eval_eps']=10"
echo "machine: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); command: bash scripts/bench_horizontal.sh --rounds $ROUNDS"
echo
"$PY" - "$OUT" <<'PYEOF'
import json, os, sys
out = sys.argv[1]
print("| run | encrypt | final test AUC | upload numbers per client | summed eps per client | summed delta | accountant eps | accountant delta |")
print("|---|---|---|---|---|---|---|---|")
for name in ["not", "pw", "signds", "dp_1", "dp_10", "dp_100", "dp_1000", "nbafl_10", "nbafl_100", "nbafl_1000"]:
    m = json.load(open(f"{out}/{name}/metrics.json"))
    tot = next(iter(m["privacy"].values()), {"eps": 0.0, "delta": 0.0})
    # the maintained accountant composes the Gaussian rounds (DP_ENCRYPT, NBAFL); pure-eps mechanisms are summed only
    acct = tot.get("accountant")
    composed = f"{acct['eps']:.4g} ({acct['name']}) | {acct['delta']:g}" if acct else "- | -"
    print(f"| {name} | {m['encrypt_train_type']} | {m['final_test_auc']:.4f} | {m['rounds'][-1]['upload_numbers_per_client']} | {tot['eps']:g} | {tot['delta']:g} | {composed} |")
pw = json.load(open(f"{out}/pw/metrics.json"))
print(f"\nPW_ENCRYPT vs NOT_ENCRYPT: max |masked sum - plain sum| = {pw['secure_aggregation']['max_abs_diff_vs_plain_sum']:.2e}")
for name in ("laplace", "laplace_10"):
    le = json.load(open(f"{out}/{name}/metrics.json"))["laplace_eval"]
    print(f"Laplace eval eps={le['laplace_eval_eps']:g}: AUC {le['clean']['auc']:.4f} -> {le['protected']['auc']:.4f}, "
          f"silhouette {le['clean']['silhouette']:.4f} -> {le['protected']['silhouette']:.4f}, "
          f"Calinski-Harabasz {le['clean']['calinski_harabasz']:.1f} -> {le['protected']['calinski_harabasz']:.1f}")
PYEOF
