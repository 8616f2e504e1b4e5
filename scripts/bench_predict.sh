#!/usr/bin/env bash
# Batch prediction vs training throughput of the same model on the same machine, side by side in one run: trains the
# front door's Wide&Deep split run (scripts/run_vfl_train_local.sh: synthetic Criteo-style rows, each party's own
# file, PSI, leader + follower over ZeroMQ on 127.0.0.1), then predicts every row of both parties' files with it
# (scripts/run_vfl_predict_local.sh: frozen transforms, PSI on the ids, PREDICT_ROWS / PREDICT_CUT, the top).
# Prints training samples/s (the training steps' time, metrics.json) and prediction rows/s (the scoring phase's time,
# predict.json), their ratio (target >= 3), the end-to-end prediction time with its transform and PSI, the CPU and
# the load; writes OUT/bench_predict.json.
# Usage: bash scripts/bench_predict.sh [--rows N] [--out DIR] [--epochs N] [--batch-rows N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ROWS=1000000 OUT=runs/bench_predict EPOCHS=1 BATCH=()
parse_flags --rows=ROWS --out=OUT --epochs=EPOCHS --batch-rows=BATCH[] -- "$@"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)
echo "== training (scripts/run_vfl_train_local.sh --rows $ROWS --epochs $EPOCHS --out $OUT)"
bash scripts/run_vfl_train_local.sh --rows "$ROWS" --epochs "$EPOCHS" --out "$OUT" > "$OUT.train.log" 2>&1 || {
  tail -5 "$OUT.train.log" >&2; exit 1; }
tail -2 "$OUT.train.log"
echo "== prediction of every row of both parties' files (scripts/run_vfl_predict_local.sh --run $OUT)"
START_PREDICT=$(date +%s.%N)
bash scripts/run_vfl_predict_local.sh --run "$OUT" "${BATCH[@]}" > "$OUT.predict.log" 2>&1 || {
  tail -5 "$OUT.predict.log" >&2; exit 1; }
END_PREDICT=$(date +%s.%N)
tail -1 "$OUT.predict.log"
.venv/bin/python - "$OUT" "$LOAD_BEFORE" "$START_PREDICT" "$END_PREDICT" "$ROWS" "$EPOCHS" <<'PYEOF'
import json, os, platform, sys
out, load_before, t0, t1, rows, epochs = sys.argv[1:]
m = json.load(open(f"{out}/metrics.json"))
p = json.load(open(f"{out}/predict/predict.json"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
train_rate, predict_rate = m["samples_per_second"], p["rows_per_second"]
doc = {
    "command": f"bash scripts/bench_predict.sh --rows {rows} --epochs {epochs} --out {out}",
    "cpu": cpu,
    "cores": os.cpu_count(),
    "load_before": load_before,
    "load_after": " ".join(open("/proc/loadavg").read().split()[:3]),
    "rows": int(rows),
    "model": "Wide&Deep bottoms (examples/wide_deep_criteo), linear top",
    "train_samples_per_second": train_rate,
    "predict_rows_per_second": predict_rate,
    "ratio": predict_rate / train_rate,
    "predict_rows_scored": p["rows_scored"],
    "predict_scoring_seconds": p["predict_seconds"],
    "predict_transform_seconds": p["transform_seconds"],
    "predict_psi_seconds": (p.get("psi") or {}).get("seconds"),
    "predict_end_to_end_seconds": float(t1) - float(t0),
    "predict_auc": (p.get("metrics") or {}).get("auc"),
    "train_test_auc": m.get("test_auc"),
}
json.dump(doc, open(f"{out}/bench_predict.json", "w"), indent=2)
print(f"CPU: {cpu}, {doc['cores']} cores; load {load_before} before, {doc['load_after']} after (other work shares it)")
print(f"training:   {train_rate:10.0f} samples/s (forward + backward + optimizer, both parties, batch 1024)")
print(f"prediction: {predict_rate:10.0f} rows/s    (forward only, {p['rows_scored']} rows) -> ratio {doc['ratio']:.2f}x (target >= 3x)")
print(f"prediction end to end: {doc['predict_end_to_end_seconds']:.1f} s (transform {p['transform_seconds']:.1f} s, "
      f"PSI {doc['predict_psi_seconds'] or 0:.1f} s, scoring {p['predict_seconds']:.1f} s, and process start)")
print(f"JSON: {out}/bench_predict.json")
PYEOF
