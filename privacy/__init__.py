"""Differential-privacy and secure-aggregation mechanisms (numpy/torch only; no sockets, no vfl)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "LabelDP": "privacy.label.label_dp",
    "RegressionLabelDP": "privacy.label.regression_label_dp",
    "binary_rr": "privacy.label.randomized_response",
    "debias_count": "privacy.label.randomized_response",
    "flip_probability": "privacy.label.randomized_response",
    "kary_rr": "privacy.label.randomized_response",
    "keep_probability": "privacy.label.randomized_response",
    "laplace_label": "privacy.label.regression_mechanisms",
    "rr_on_bins": "privacy.label.regression_mechanisms",
    "rr_on_bins_design": "privacy.label.regression_mechanisms",
    "unbiased_design": "privacy.label.regression_mechanisms",
    "unbiased_label": "privacy.label.regression_mechanisms",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """Imported on first use, so that `privacy.field_types` and `privacy.domains` (read by every config) do not pull in
    numpy."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'privacy' has no attribute {name!r}")
