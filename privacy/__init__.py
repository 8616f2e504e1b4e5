"""Differential-privacy and secure-aggregation mechanisms (numpy/torch only; no sockets, no vfl)."""

from __future__ import annotations

_EXPORTS = {
    "privacy.label.label_dp": ("LabelDP",),
    "privacy.label.regression_label_dp": ("RegressionLabelDP",),
    "privacy.label.randomized_response": (
        "binary_rr",
        "debias_count",
        "flip_probability",
        "kary_rr",
        "keep_probability",
    ),
    "privacy.label.regression_mechanisms": (
        "laplace_label",
        "rr_on_bins",
        "rr_on_bins_design",
        "unbiased_design",
        "unbiased_label",
    ),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)


def __getattr__(name: str):
    """Imported on first use, so that `privacy.field_types` and `privacy.domains` (read by every config) do not pull in
    numpy; each module by its name, so the import graph sees it."""
    if name in _EXPORTS["privacy.label.label_dp"]:
        from privacy.label import label_dp as module
    elif name in _EXPORTS["privacy.label.regression_label_dp"]:
        from privacy.label import regression_label_dp as module
    elif name in _EXPORTS["privacy.label.randomized_response"]:
        from privacy.label import randomized_response as module
    elif name in _EXPORTS["privacy.label.regression_mechanisms"]:
        from privacy.label import regression_mechanisms as module
    else:
        raise AttributeError(f"module 'privacy' has no attribute {name!r}")
    return getattr(module, name)
