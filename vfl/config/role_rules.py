"""Cross-key config rules: the checks that depend on a party's role or on two keys at once.

vfl/config/schema.py checks each key alone and calls `role_problems` with the raw document.
"""

from __future__ import annotations

import re
from typing import Any

from privacy.domains import LABEL_EPS_DOMAIN
from privacy.field_types import yaml12_number
from vfl.config.label_dp_rules import label_dp_task_problems


def _get(doc: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _has(doc: Any, *path: str) -> bool:
    parent = _get(doc, *path[:-1])
    return isinstance(parent, dict) and path[-1] in parent


def role_problems(doc: dict, party_pattern: str, default_batch_size: int, default_budget: float) -> list[str]:
    """The checks that depend on the role or on two keys at once (the schema checks each key alone); the schema's
    party-name pattern and defaults come as arguments (this module is imported by the schema)."""
    role = doc.get("role")
    if role not in ("leader", "follower"):
        return []
    leader = role == "leader"
    errors = _network_problems(doc, role)
    errors += _leader_only_problems(doc, party_pattern) if leader else _follower_only_problems(doc)
    errors += _schedule_problems(doc, default_batch_size)
    errors += _selection_problems(doc)
    errors += _privacy_problems(doc, leader, default_budget)
    return errors


def _network_problems(doc: dict, role: str) -> list[str]:
    """The endpoint a role uses (and not the other's), and where the label column may be declared."""
    errors: list[str] = []
    leader = role == "leader"
    mine, other = ("bind", "connect") if leader else ("connect", "bind")
    if not _has(doc, "network", mine) or _get(doc, "network", mine) is None:
        errors.append(f"network.{mine} is required for a {role} (tcp://HOST:PORT)")
    elif (
        isinstance(ep := _get(doc, "network", mine), str)
        and ep.rsplit(":", 1)[-1].isdigit()
        and not 1 <= int(ep.rsplit(":", 1)[1]) <= 65535
    ):
        errors.append(f"network.{mine} port must be in [1, 65535], got {ep!r}")
    if _has(doc, "network", other):
        errors.append(f"network.{other} is not used by a {role} (it uses network.{mine})")
    sch = _get(doc, "data", "schema")
    if isinstance(sch, dict) and leader and sch.get("label") is None:
        errors.append("data.schema.label is required on the leader (the label party): {column: NAME}")
    if isinstance(sch, dict) and not leader and sch.get("label") is not None:
        errors.append("data.schema.label is set on the leader only (a follower holds no labels)")
    return errors


def _leader_only_problems(doc: dict, party_pattern: str) -> list[str]:
    """The leader's follower list, and the options a leader sets wrongly because they are a follower's."""
    errors: list[str] = []
    fl = _get(doc, "network", "followers")
    if not isinstance(fl, list) or not fl or any(not isinstance(f, str) or not re.match(party_pattern, f) for f in fl):
        errors.append(f"network.followers must be a non-empty list of party names, got {fl!r}")
    elif len(set(fl)) != len(fl) or doc.get("party") in fl:
        errors.append(f"network.followers must be distinct names other than the leader's, got {fl!r}")
    keys = _get(doc, "network", "follower_keys")
    if isinstance(keys, dict) and isinstance(fl, list):
        stray = [k for k in keys if k not in fl]
        if stray:
            errors.append(f"network.follower_keys names {stray}, which are not in network.followers {fl}")
    if _has(doc, "network", "rank_endpoints"):
        errors.append("network.rank_endpoints is only used by a follower (the leader binds network.bind's port + rank)")
    if _has(doc, "network", "leader_key_file"):
        errors.append("network.leader_key_file is only used by a follower")
    if _has(doc, "debug", "record_gradients") and _get(doc, "debug", "record_gradients"):
        errors.append("debug.record_gradients is a follower option (what the follower receives)")
    if _has(doc, "privacy", "embedding_dp") and _get(doc, "privacy", "embedding_dp") is not None:
        errors.append("privacy.embedding_dp is set on a follower only (it protects the cuts a follower sends)")
    if _has(doc, "debug", "record_cuts") and _get(doc, "debug", "record_cuts"):
        errors.append("debug.record_cuts is a follower option (the cuts it sends)")
    top = _get(doc, "model", "top")
    if isinstance(top, dict) and top.get("name") == "mlp" and not top.get("hidden"):
        errors.append("model.top.hidden must list at least one layer size when model.top.name is mlp")
    return errors


def _follower_only_problems(doc: dict) -> list[str]:
    """The options a follower sets wrongly because they are the leader's (it holds no labels and no top)."""
    errors: list[str] = []
    if _has(doc, "network", "followers"):
        errors.append("network.followers is only used by the leader")
    if _has(doc, "network", "follower_keys"):
        errors.append("network.follower_keys is only used by the leader")
    if _has(doc, "model", "top"):
        errors.append("model.top is only used by the leader (followers hold bottom models)")
    if _has(doc, "train", "early_stopping") and _get(doc, "train", "early_stopping") is not None:  # false: off
        errors.append("train.early_stopping is set on the leader only (it holds the validation labels)")
    if _has(doc, "privacy", "label_dp") and _get(doc, "privacy", "label_dp") is not None:
        errors.append("privacy.label_dp is set on the leader only (it holds the labels)")
    if _has(doc, "train", "task"):
        errors.append(
            "train.task is set on the leader only (it holds the labels; followers train the same bottoms "
            "for either task)"
        )
    if _has(doc, "train", "loss"):
        errors.append("train.loss is set on the leader only (it holds the labels)")
    if _has(doc, "train", "staleness_leader_bottom"):
        errors.append("train.staleness_leader_bottom is set on the leader only (it schedules its own bottom)")
    return errors


def _schedule_problems(doc: dict, default_batch_size: int) -> list[str]:
    """Micro-batches that fit a batch, and one kind of pipelining at a time."""
    errors: list[str] = []
    mb, bs = _get(doc, "train", "microbatches"), _get(doc, "train", "batch_size")
    bs = default_batch_size if bs is None else bs
    if _whole(mb) and _whole(bs) and mb > bs >= 1:
        errors.append(
            f"train.microbatches={mb} exceeds train.batch_size={bs}: a micro-batch needs at least one row "
            f"(allowed: an integer in [1, {bs}])"
        )
    k = _get(doc, "train", "staleness")
    pipelined = k == "auto" or (_whole(k) and k > 0)
    if _whole(mb) and pipelined and mb > 1:
        errors.append(
            f"train.staleness={k} needs train.microbatches 1, got train.microbatches={mb}: pipeline across batches "
            "or within one, not both"
        )
    return errors


def _selection_problems(doc: dict) -> list[str]:
    """An early-stopping metric and a loss that fit the task."""
    errors: list[str] = []
    es, task = _get(doc, "train", "early_stopping"), _get(doc, "train", "task")
    metric = es.get("metric") if isinstance(es, dict) else None
    if metric == "accuracy" and task not in ("multiclass", "regression"):
        errors.append(
            "train.early_stopping.metric accuracy needs train.task: multiclass (binary selects on auc or logloss)"
        )
    if task == "regression" and metric in ("auc", "logloss", "accuracy"):
        errors.append(
            f"train.early_stopping.metric {metric} is for class labels; train.task: regression selects on rmse "
            "(the default), mae or r2"
        )
    if task != "regression" and metric in ("rmse", "mae", "r2"):
        errors.append(f"train.early_stopping.metric {metric} needs train.task: regression")
    if task != "regression" and _get(doc, "train", "loss") == "huber":
        errors.append("train.loss huber needs train.task: regression (class labels train on cross-entropy)")
    return errors


def _privacy_problems(doc: dict, leader: bool, default_budget: float) -> list[str]:
    """Label DP that fits the task and its budget, and embedding DP with its eps."""
    errors: list[str] = []
    task = _get(doc, "train", "task")
    ld = _get(doc, "privacy", "label_dp")
    if leader and _has(doc, "privacy", "label_dp") and isinstance(ld, dict):
        errors.extend(label_dp_task_problems(ld, task or "binary", _get(doc, "data", "schema")))
    if _has(doc, "privacy", "label_dp") and isinstance(ld, dict):  # (an empty `label_dp:` is {} by now)
        if "eps" not in ld:
            errors.append(f"privacy.label_dp.eps is required (a number {LABEL_EPS_DOMAIN})")
        eps = yaml12_number(ld.get("eps"))
        budget = yaml12_number(ld.get("budget", default_budget))
        if _real(eps) and _real(budget) and 0 < budget < eps:
            errors.append(
                f"privacy.label_dp.budget={budget!r} is below eps={eps!r}: no release could be drawn (allowed: a "
                + (
                    "budget of .inf: eps = inf releases the true labels, so set budget: .inf to do it knowingly)"
                    if eps == float("inf")
                    else "budget >= eps)"
                )
            )
        if ld.get("debias") is True and ld.get("mechanism", "rr") != "rr":
            errors.append("privacy.label_dp.debias applies to mechanism rr only")
    ed = _get(doc, "privacy", "embedding_dp")
    if not leader and isinstance(ed, dict) and "eps" not in ed:
        errors.append("privacy.embedding_dp.eps is required (a number in (0, 1000])")
    return errors


def _whole(value: Any) -> bool:
    """An int that is not a bool (YAML's true is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
