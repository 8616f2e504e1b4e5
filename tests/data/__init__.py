"""Tests of vfl/data: readers, prepare, synthetic data, shard sets, a party's own table and its frozen transforms."""
