"""Tests of vfl/session: cut digests, the link probe, compression and embedding DP in a run."""
