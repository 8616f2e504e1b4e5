#!/usr/bin/env bash
# Run the leader alone (for a deployment across hosts), from its own raw file or an already prepared shard.
# Usage: bash scripts/run_leader.sh CONFIG BIND_ENDPOINT [--raw OWN_FILE [--shards DIR] [--vocab-min-count N | --hash-buckets N] [--parties YAML]]
#                                   [--data SHARD_DIR] [--out DIR] [--keys DIR] [--epochs N]
#   e.g. bash scripts/run_leader.sh examples/wide_deep_criteo/leader.yaml tcp://0.0.0.0:5560 --raw leader.tsv --keys /secure/vfl-keys
# --ranks N: N ranks of this party under torchrun (rank r binds/connects the endpoint's port + r); across machines
#   add --nnodes M --node-rank K --master-addr HOST --master-port P (torchrun's flags; the same N on every party)
#   --trusted-rank-network (gloo's traffic between them is not encrypted: docs/scaling.md, Inside a party)
# --raw: the leader's own file is prepared alone into DIR/<party>: a table whose columns CONFIG's data.schema declares
# (CSV, TSV, .gz or Parquet; docs/own-table.md), or else a Criteo-style file (id column, its columns, label; TSV or CSV)
# (default runs/shards); the ids are then intersected privately with each follower's (PSI) before training.
set -euo pipefail
exec bash "$(dirname "$0")/run_party.sh" leader "$0" "$@"
