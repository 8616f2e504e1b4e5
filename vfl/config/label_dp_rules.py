"""The label-DP rules of a leader's config that pydantic's types cannot say.

Which mechanisms suit `train.task`, and what a real-valued label's mechanism needs (a stated clip, a grid, a prior). Read by vfl/config/schema.py on the raw
document, so every problem is reported with the others, each in one line naming the allowed values."""

from __future__ import annotations

import os
from typing import Any

from privacy.domains import PRIOR_EPS_FRACTION, eps_split_problem


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


REGRESSION_LABEL_DP = ("laplace", "rr_on_bins", "unbiased")
CLASS_LABEL_DP = ("rr", "rr_prior")
# the (task, privacy.label_dp.mechanism) pairs a config may name: the keys of the mechanism registry
# (vfl/labeldp/mechanisms.py, which refuses any other), read by the task (vfl/data/task.py) and the schema
LABEL_DP_MECHANISMS = {"binary": CLASS_LABEL_DP, "multiclass": CLASS_LABEL_DP, "regression": REGRESSION_LABEL_DP}


def regression_label_dp_default(doc: dict) -> None:
    """A regression leader's privacy.label_dp without a mechanism gets rr_on_bins (rr is for class labels): its
    outputs stay within the clip and shrink towards the prior's mean, so no eps gives a negative R^2 (regression.md)."""
    privacy, train = doc.get("privacy"), doc.get("train")
    ld = privacy.get("label_dp") if isinstance(privacy, dict) else None
    task = train.get("task") if isinstance(train, dict) else None
    if doc.get("role") == "leader" and task == "regression" and isinstance(ld, dict):
        ld.setdefault("mechanism", "rr_on_bins")


def label_dp_task_problems(ld: dict, task: str, schema: Any) -> list[str]:
    """The label-DP mechanism against train.task, and the regression keys (clip, bins, prior) against the mechanism."""
    mech = ld.get("mechanism", "rr")
    regression_keys = [k for k in ("clip", "bins", "prior", "prior_eps_fraction") if k in ld]
    if task == "regression" and mech in CLASS_LABEL_DP:
        return [
            f"privacy.label_dp.mechanism {mech} randomizes class labels; train.task: regression allows "
            f"{list(REGRESSION_LABEL_DP)}"
        ]
    if task != "regression":
        if mech in REGRESSION_LABEL_DP:
            return [
                f"privacy.label_dp.mechanism {mech} is for real-valued labels (train.task: regression); train.task: "
                f"{task} allows {list(CLASS_LABEL_DP)}"
            ]
        return [f"privacy.label_dp.{k} applies to train.task: regression only" for k in regression_keys]
    errors = []
    label = schema.get("label") if isinstance(schema, dict) else None
    if "clip" not in ld and not (isinstance(label, dict) and label.get("clip")) and not isinstance(schema, str):
        errors.append(
            f"privacy.label_dp.clip is required for mechanism {mech}: [lo, hi], the label's range in its units, "
            "stated rather than read from the labels (or data.schema.label.clip)"
        )
    clip = ld.get("clip")
    if clip is not None and not (
        isinstance(clip, (list, tuple))
        and len(clip) == 2
        and all(_real(v) and abs(v) != float("inf") for v in clip)
        and clip[0] < clip[1]
    ):
        errors.append(f"privacy.label_dp.clip must be [lo, hi] with finite numbers lo < hi, got {clip!r}")
    if mech == "laplace":
        errors.extend(
            f"privacy.label_dp.{k} applies to rr_on_bins and unbiased (laplace uses no prior and no grid)"
            for k in regression_keys
            if k in ("prior", "prior_eps_fraction", "bins")
        )
    bins = ld.get("bins")
    if mech == "unbiased" and _real(bins) and bins > 48:
        errors.append(
            f"privacy.label_dp.bins must be at most 48 for mechanism unbiased (a linear programme), got {bins}"
        )
    prior = ld.get("prior", "dp_histogram")
    if isinstance(prior, str) and prior not in ("dp_histogram", "uniform") and not os.path.isfile(prior):
        errors.append(
            f"privacy.label_dp.prior {prior!r} is neither dp_histogram, uniform nor a file (allowed: dp_histogram, "
            "uniform, or the path of a value,weight CSV)"
        )
    if "prior_eps_fraction" in ld and prior != "dp_histogram":
        errors.append("privacy.label_dp.prior_eps_fraction applies to prior: dp_histogram only")
    if mech != "laplace" and prior == "dp_histogram":
        split = eps_split_problem(ld.get("eps"), ld.get("prior_eps_fraction", PRIOR_EPS_FRACTION))
        errors.extend([split] if split else [])
    return errors
