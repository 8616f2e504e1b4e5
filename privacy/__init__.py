"""Differential-privacy and secure-aggregation mechanisms (numpy/torch only; no sockets, no vfl)."""
from privacy.label_dp import LabelDP
from privacy.randomized_response import binary_rr, debias_count, flip_probability, kary_rr, keep_probability

__all__ = ["LabelDP", "binary_rr", "debias_count", "flip_probability", "kary_rr", "keep_probability"]
