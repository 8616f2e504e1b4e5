"""Tests of vfl/session: the handshake, cut digests, the link probe, compression and embedding DP in a run."""
