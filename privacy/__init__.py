"""Differential-privacy and secure-aggregation mechanisms (numpy/torch only; no sockets, no vfl)."""
