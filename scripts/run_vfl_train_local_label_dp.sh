#!/usr/bin/env bash
# run_vfl_train_local.sh with the leader's privacy.label_dp.eps set (examples/wide_deep_criteo/leader_label_dp.yaml).
# Same flags: [--data RAW_TSV] [--out DIR] [--epochs N] [--centralized]
set -euo pipefail
cd "$(dirname "$0")/.."
export LEADER_CONFIG=${LEADER_CONFIG:-examples/wide_deep_criteo/leader_label_dp.yaml}
args=("$@")
has_out=0; for a in "$@"; do [ "$a" = "--out" ] && has_out=1; done
[ "$has_out" = 0 ] && args+=(--out runs/local_label_dp)
exec bash scripts/run_vfl_train_local.sh "${args[@]}"
