"""The three splits of every party's shard: train, valid (model selection, randomized labels) and test (reports only)."""

from __future__ import annotations

SPLITS = ("train", "valid", "test")
