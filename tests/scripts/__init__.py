"""Tests of scripts/ and examples/: the launch scripts, the benches' logic and the real examples."""
