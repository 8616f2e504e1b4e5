"""Tests of vfl/distributed: N ranks per party, their pieces, and the rank network."""
