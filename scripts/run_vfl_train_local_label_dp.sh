#!/usr/bin/env bash
# run_vfl_train_local.sh with the leader's privacy.label_dp.eps set (examples/wide_deep_criteo/leader_label_dp.yaml,
# or with --example digits|multiclass that example's leader_label_dp.yaml).
# Same flags: [--data RAW_TSV] [--out DIR] [--epochs N] [--centralized] [--example digits|multiclass]
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
has_out=0 has_example=0
for a in "$@"; do
  [ "$a" = "--out" ] && has_out=1
  [ "$a" = "--example" ] && has_example=1
done
if [ "$has_example" = 1 ]; then
  args+=(--label-dp)
  [ "$has_out" = 0 ] && args+=(--out "runs/$(for ((i = 1; i <= $#; i++)); do [ "${!i}" = --example ] && { j=$((i + 1)); echo "${!j}"; }; done)_label_dp")
else
  export LEADER_CONFIG=${LEADER_CONFIG:-examples/wide_deep_criteo/leader_label_dp.yaml}
  [ "$has_out" = 0 ] && args+=(--out runs/local_label_dp)
fi
exec bash scripts/run_vfl_train_local.sh "${args[@]}"
