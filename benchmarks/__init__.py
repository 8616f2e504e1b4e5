"""The benchmarks: each a module run from the repository root as `python -m benchmarks.NAME` (or through its
`scripts/bench_NAME.sh`), sharing what every bench reports (common), its data (datasets) and its runs (runs)."""
