"""What the leader's label is for: a binary, K-class or real-valued task, with its outputs, loss, metrics and label DP.

One `Task` is built from the leader's `train.task` and its labelled shard (`Task.of`) and passed to every layer
that used to read `num_classes: int | None` (pytorch-frame's `TaskType` names the same three tasks):

| kind | labels (labels.npy) | outputs | loss | metrics (valid and test) | selection | label DP |
|---|---|---|---|---|---|---|
| binary | int8 0/1 | 1 logit | BCE | auc, logloss | auc | rr, rr_prior |
| multiclass | int8 class ids 0..K-1 | K logits | softmax CE | accuracy, logloss | accuracy | rr, rr_prior |
| regression | float32 | 1 value | MSE (or Huber) | rmse, mae, r2 | rmse | laplace, rr_on_bins, unbiased |

A regression label may be clipped to a declared `[lo, hi]` (`data.schema.label.clip`): the shard keeps the clipped
value, and prediction reports in the same units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vfl.config.label_dp_rules import LABEL_DP_MECHANISMS  # the mechanism registry's keys, by task
from vfl.data.errors import DataError

TASK_KINDS = ("binary", "multiclass", "regression")
MAX_CLASSES = 127  # class ids are int8
METRICS = {
    "binary": ("auc", "logloss"),
    "multiclass": ("accuracy", "logloss"),
    "regression": ("rmse", "mae", "r2"),
}
HIGHER_IS_BETTER = {"auc": True, "logloss": False, "accuracy": True, "rmse": False, "mae": False, "r2": True}


@dataclass(frozen=True)
class Task:
    """The leader's task; `num_classes` is K for multiclass only, `clip` the regression label's declared range."""

    kind: str = "binary"
    num_classes: int | None = None
    clip: tuple[float, float] | None = None

    def __post_init__(self):
        if self.kind not in TASK_KINDS:
            raise DataError(f"task must be one of {list(TASK_KINDS)}, got {self.kind!r}")
        if self.kind == "multiclass":
            k = self.num_classes
            if isinstance(k, bool) or not isinstance(k, int) or not 3 <= k <= MAX_CLASSES:
                raise DataError(f"a multiclass task needs K in [3, {MAX_CLASSES}] classes, got {k!r}")
        elif self.num_classes is not None:
            raise DataError(f"num_classes is for multiclass tasks only, got {self.num_classes!r} for {self.kind}")
        if self.clip is not None:
            if self.kind != "regression":
                raise DataError(f"clip is for regression labels only, got clip {list(self.clip)} for {self.kind}")
            lo, hi = (float(v) for v in self.clip)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise DataError(f"clip must be [lo, hi] with finite lo < hi, got {list(self.clip)}")
            object.__setattr__(self, "clip", (lo, hi))

    @property
    def outputs(self) -> int:
        """Width of the top model's output: K logits for multiclass, else 1."""
        return self.num_classes if self.kind == "multiclass" else 1

    @property
    def classes(self) -> int | None:
        """The old `num_classes` convention: None for binary and regression, K for multiclass."""
        return self.num_classes

    @property
    def is_regression(self) -> bool:
        return self.kind == "regression"

    @property
    def label_dtype(self) -> np.dtype:
        return np.dtype(np.float32) if self.kind == "regression" else np.dtype(np.int8)

    @property
    def metrics(self) -> tuple[str, ...]:
        return METRICS[self.kind]

    @property
    def selection_metric(self) -> str:
        """The default early-stopping metric on the validation split."""
        return self.metrics[0]

    @property
    def label_dp_mechanisms(self) -> tuple[str, ...]:
        """The privacy.label_dp.mechanism names this task allows (vfl/labeldp/mechanisms.py implements each)."""
        return LABEL_DP_MECHANISMS[self.kind]

    def to_manifest(self) -> dict:
        doc: dict = {"task": self.kind}
        if self.num_classes is not None:
            doc["num_classes"] = self.num_classes
        if self.clip is not None:
            doc["clip"] = list(self.clip)
        return doc

    @classmethod
    def from_manifest(cls, label: dict) -> Task:
        """The task a labelled shard's manifest records (shards written before the task field: binary or K classes)."""
        kind = label.get("task")
        if kind is None:  # older manifests: num_classes 2 = binary
            k = int(label.get("num_classes", 2))
            return cls("binary") if k == 2 else cls("multiclass", k)
        clip = label.get("clip")
        return cls(kind, label.get("num_classes"), tuple(clip) if clip is not None else None)

    @classmethod
    def of(cls, task: str, shard_task: Task, path: str = "the leader's shard") -> Task:
        """The task of `train.task` checked against the labels the leader's shard holds; DataError when they disagree."""
        if task == shard_task.kind:
            return shard_task
        hint = {
            "binary": "prepare a 0/1 (or two-class) label column with train.task: binary",
            "multiclass": "prepare a K-class label column with train.task: multiclass (K >= 3)",
            "regression": "prepare a real-valued label column with train.task: regression",
        }[task]
        held = {
            "binary": "0/1 labels",
            "multiclass": f"{shard_task.num_classes}-class labels",
            "regression": "real-valued labels",
        }[shard_task.kind]
        raise DataError(f"train.task is {task} but {path} holds {held}; {hint}, or set train.task: {shard_task.kind}")


def label_task(label: dict) -> Task:
    """The task of a labelled shard's manifest `label` entry (a binary entry may also say num_classes 2)."""
    if label.get("task") == "binary":
        return Task("binary")
    return Task.from_manifest(label)
