"""Helpers the tests share (no test module imports another): party processes, data sets, stand-ins, statistics."""
