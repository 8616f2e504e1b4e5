"""Criteo data: raw TSV reader, synthetic generator, party shards and batching."""
