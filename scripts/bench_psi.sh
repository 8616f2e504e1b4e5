#!/usr/bin/env bash
# PSI benchmark: core-us per id per side split by stage (suite v2 ristretto255 and the former v1 X25519 path, one
# core), then the leader/follower PSI end to end for 1e5 and 1e6 ids per side (two processes over CurveZMQ, 50%
# overlap: wall and CPU seconds, core-us/id/side, ids/s, bytes) and the same sets again through the reuse cache
# (seconds, bytes), then 1 versus 2 ranks per party on 2e5 ids (rank r of both parties pinned to core r), with
# SecretFlow's published per-core figure beside ours, the CPU model and the load average; and the verified PSI
# (data.psi_verify) beside the unverified one on 1e5 ids, interleaved round by round (--verify-ids, --verify-rounds).
# Writes runs/bench_psi/bench_psi.json.
# Usage: bash scripts/bench_psi.sh [--sizes 100000,1000000] [--stage-ids 20000] [--rank-ids 200000] [--verify-ids 100000] [--json PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m benchmarks.psi "$@"
