#!/usr/bin/env bash
# Training across a WAN: the front door's leader and follower processes, the follower connected through the shipped
# relay (vfl/netlink), for links {loopback, 10 ms / 1 Gbit/s, 40 ms / 100 Mbit/s, 100 ms / 50 Mbit/s} x schedules
# (train.staleness: sync, 1, 2, 4, 8) x compression (none, fp16, int8, int8+topk); per cell samples/s, bytes per
# sample each way, PSI and training wall time, test AUC and the three bounds (compute, bandwidth, latency), with the
# machine and the load. A cell whose config key this tree does not know is skipped with a one-line note.
# Usage: bash scripts/bench_wan.sh [--quick] [--rows N] [--epochs N] [--links loopback,10ms,40ms,100ms]
#        [--schedules sync,1,2,4,8] [--compression none,fp16,int8,int8+topk] [--seeds N] [--jitter-ms J]
#        [--json OUT.json]
#        bash scripts/bench_wan.sh --grid accuracy [--steps 300,500,800,2300] [--links loopback,40ms,100ms]
#        [--variants sync,K,K+dc,K+lr,K+local,K+fresh,auto] [--k 4] [--seeds 3] [--dataset criteo|flights]: test AUC
#        (mean +- sd) and samples/s of each stale schedule and correction against loopback synchronous
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python -m benchmarks.wan "$@"
