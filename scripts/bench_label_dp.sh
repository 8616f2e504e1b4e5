#!/usr/bin/env bash
# Label DP utility table and plot: eps in {0.5,1,2,4,8,inf} x {plain, debias, rr_prior} on synthetic data.
# Usage: bash scripts/bench_label_dp.sh [--rows N] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=300000 OUT=runs/bench_label_dp
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;; --out) OUT=$2; shift 2 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh >/dev/null
PY=.venv/bin/python
$PY -c "import matplotlib" 2>/dev/null || $PY -m pip install -q -e ".[bench]"
DATA="data/synthetic/criteo_synth_${ROWS}.tsv"
[ -f "$DATA" ] || $PY -m vfl.data synth --rows "$ROWS" --out "$DATA" >/dev/null
mkdir -p "$OUT"
$PY -m vfl.data prepare --input "$DATA" --out "$OUT/shards" --hash-buckets 20000 --force >/dev/null
$PY scripts/bench_label_dp.py "$OUT/shards" "$OUT"
