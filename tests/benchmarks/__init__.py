"""Tests of benchmarks/: each bench's own logic (flags, parsing, bounds) and the data the benches share."""
