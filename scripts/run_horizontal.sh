#!/usr/bin/env bash
# FedAvg simulation with one privacy mechanism.
# Usage: bash scripts/run_horizontal.sh --encrypt {NOT_ENCRYPT,SIGNDS,DP_ENCRYPT,NBAFL,PW_ENCRYPT}
#        [--laplace-eval-eps E] [--config YAML] [--out DIR] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
args=("$@")
has_cfg=0; for a in "$@"; do [ "$a" = "--config" ] && has_cfg=1; done
[ "$has_cfg" = 0 ] && args+=(--config examples/horizontal_fedavg/fedavg.yaml)
exec .venv/bin/python -m vfl.horizontal "${args[@]}"
