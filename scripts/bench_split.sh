#!/usr/bin/env bash
# Split (leader + follower processes over ZeroMQ) vs centralized (one process), same model and data,
# measured side by side in one run. Prints samples/s of each and their ratio, bytes on the wire per
# sample in each direction, and the peak RSS of every process.
# Usage: bash scripts/bench_split.sh [--rows N] [--batch B] [--emb D] [--hidden 1024,512,256,128] [--epochs N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
require_values --rows --batch --emb --hidden --epochs -- "$@"
ROWS=200000 BATCH=16000 EMB=80 HIDDEN=1024,512,256,128 EPOCHS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;; --batch) BATCH=$2; shift 2 ;; --emb) EMB=$2; shift 2 ;;
    --hidden) HIDDEN=$2; shift 2 ;; --epochs) EPOCHS=$2; shift 2 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh >/dev/null
PY=$(pwd)/.venv/bin/python
. scripts/lib.sh
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DATA="data/synthetic/criteo_synth_${ROWS}.tsv"
[ -f "$DATA" ] || "$PY" -m vfl.data synth --rows "$ROWS" --out "$DATA" >/dev/null
"$PY" -m vfl.data prepare --input "$DATA" --out "$WORK/shards" --hash-buckets 20000 >/dev/null
PORT=$(free_port)
"$PY" - "$WORK" "$PORT" "$BATCH" "$EMB" "$HIDDEN" "$EPOCHS" <<'PYEOF'
import sys, yaml
work, port, batch, emb, hidden, epochs = sys.argv[1:]
model = {"bottom": {"embedding_dim": int(emb), "hidden": [int(h) for h in hidden.split(",")], "cut_dim": 2}}
train = {"epochs": int(epochs), "batch_size": int(batch), "seed": 0, "log_every": 10**6, "lr": 0.001}
net = {"timeout_s": 300}
for threads, tag in ((0, "split"), (0, "central")):
    leader = {"role": "leader", "party": "leader", "network": {**net, "bind": f"tcp://127.0.0.1:{port}", "followers": ["follower0"],
              "secret_key_file": f"{work}/keys/leader.key_secret", "follower_keys": {"follower0": f"{work}/keys/follower0.key"}},
              "data": {"path": f"{work}/shards/leader"}, "model": {**model, "top": {"name": "linear"}}, "train": train,
              "output": {"dir": f"{work}/{tag}"}}
    follower = {"role": "follower", "party": "follower0", "network": {**net, "connect": f"tcp://127.0.0.1:{port}",
                "secret_key_file": f"{work}/keys/follower0.key_secret", "leader_key_file": f"{work}/keys/leader.key"},
                "data": {"path": f"{work}/shards/follower0"}, "model": model, "train": train, "output": {"dir": f"{work}/{tag}"}}
    yaml.safe_dump(leader, open(f"{work}/leader_{tag}.yaml", "w"))
    yaml.safe_dump(follower, open(f"{work}/follower_{tag}.yaml", "w"))
PYEOF
local_keys "$WORK/keys" leader follower0
rss() { "$PY" -c 'import resource,subprocess,sys; r=subprocess.run(sys.argv[2:]); print(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024:.0f}", file=open(sys.argv[1],"w")); sys.exit(r.returncode)' "$@"; }
echo "== split: leader + follower0 processes over tcp://127.0.0.1:$PORT"
rss "$WORK/rss_leader" "$PY" -m leader --config "$WORK/leader_split.yaml" > "$WORK/leader.out" 2>&1 &
L=$!
rss "$WORK/rss_follower" "$PY" -m follower --config "$WORK/follower_split.yaml" > "$WORK/follower.out" 2>&1 &
F=$!
wait $L || { cat "$WORK/leader.out"; exit 1; }
wait $F || { cat "$WORK/follower.out"; exit 1; }
echo "== centralized: one process"
rss "$WORK/rss_central" "$PY" -m vfl.centralized --config "$WORK/leader_central.yaml" --follower-config "$WORK/follower_central.yaml" > "$WORK/central.out" 2>&1
"$PY" - "$WORK" "$ROWS" "$BATCH" "$EMB" "$HIDDEN" <<'PYEOF'
import json, sys
work, rows, batch, emb, hidden = sys.argv[1:]
s = json.load(open(f"{work}/split/metrics.json"))
c = json.load(open(f"{work}/central/metrics.json"))
rss = {k: open(f"{work}/rss_{k}").read().strip() for k in ("leader", "follower", "central")}
print(f"model: Wide&Deep embedding_dim={emb} hidden=[{hidden}] batch={batch}; {s['rows']['train']} training rows")
print(f"split        samples/s {s['samples_per_second']:10.0f}   test AUC {s['test_auc']:.4f}")
print(f"centralized  samples/s {c['samples_per_second']:10.0f}   test AUC {c['test_auc']:.4f}")
print(f"ratio split/centralized: {s['samples_per_second'] / c['samples_per_second']:.2f} (target >= 0.8)")
w = s["wire"]
print(f"wire bytes per sample (train + eval): to leader {w['bytes_to_leader_per_sample']:.1f}, from leader {w['bytes_from_leader_per_sample']:.1f}")
print(f"peak RSS MiB: leader {rss['leader']}, follower0 {rss['follower']}, centralized {rss['central']}")
PYEOF
