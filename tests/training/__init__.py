"""Tests of vfl/training: split training, the optimizers, micro-batches, staleness, checkpoints, run sizes."""
