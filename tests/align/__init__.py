"""Tests of vfl/align: the PSI (its suites, proofs, streaming, reuse, ranks, a malicious leader)."""
