"""The benchmarks, each a module run from the repository root as `python -m benchmarks.NAME`.

Most have a user-facing wrapper, `scripts/bench_NAME.sh`. They share what every bench reports (common), their data
(datasets: the one synthetic-data cache) and their runs (runs).
"""
