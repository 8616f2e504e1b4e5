"""Tests of vfl/runs: a training run's directory layout and the record its checkpoints keep."""
