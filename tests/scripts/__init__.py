"""Tests of scripts/ and examples/: the launch scripts and the real examples."""
