#!/usr/bin/env bash
# The split model against pooled boosted trees on every example table and three ISLP tables (benchmarks/tabular.py):
# pooled HistGradientBoosting, pooled logistic / linear regression, the leader alone with boosted trees, the split
# model with today's defaults and with the tuned table recipe; --label-dp adds eps 1 and 4. Test AUC (RMSE for
# regression), mean ± sd and 95% intervals over --seeds; machine and load printed; OUT/bench_tabular.json written.
# Usage: bash scripts/bench_tabular.sh [--tables flights caravan bikeshare Default OJ Wage] [--seeds 0 1 2]
#        [--label-dp] [--out runs/bench_tabular] [--variants split_today split_new SEARCH-NAME ...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_examples.sh
exec .venv/bin/python -m benchmarks.tabular "$@"
