"""Data: reading each party's table, fitting and saving its transforms, preparing shards, ids, batching; synthetic data."""
