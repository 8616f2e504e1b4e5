"""A labelled dataset's eps budget: its default and domain, and the refusal of a release that would spend over it.

The refusals are one line each, for training and the standalone LabelDP / RegressionLabelDP alike."""

from __future__ import annotations

import math
import numbers

from privacy.domains import DEFAULT_LABEL_DP_BUDGET
from privacy.field_types import domain_error
from privacy.label.ledger.secret_files import LabelDPStoreError


class LabelDPBudgetError(LabelDPStoreError):
    """A new release would take its dataset's most exposed sample id over privacy.label_dp.budget."""


class _DefaultBudget(float):
    """budget='s default (DEFAULT_LABEL_DP_BUDGET), told apart from a budget the caller set: only the store's ledger
    can enforce one, so a budget set with key= bytes or for fresh noise is refused rather than ignored."""


DEFAULT_BUDGET_ARG = _DefaultBudget(DEFAULT_LABEL_DP_BUDGET)


def budget_problem(budget, key) -> str | None:
    """None when budget is None (no cap) or a number > 0 (inf: no cap either) that the ledger can enforce, else the
    one-line error."""
    if budget is None:
        return None
    if isinstance(budget, (bool, str)) or not isinstance(budget, numbers.Real):
        return f"budget must be a number > 0 or None (no cap), got {type(budget).__name__} {budget!r}"
    err = domain_error("budget", budget, 0.0, lo_open=True)
    if err is None and key is not None and budget is not DEFAULT_BUDGET_ARG and not math.isinf(budget):
        err = (
            f"budget={budget!r} is enforced by the store's ledger (store_dir=, key_file=); key= bytes keep no ledger: "
            "use the store, or leave budget out"
        )
    return err


def over_budget(eps: float, budget: float | None, api: str):
    """The one-line LabelDPBudgetError of a release whose own eps exceeds the budget (none could be drawn), or None."""
    if budget is None or eps <= budget:
        return None
    hint = "eps=inf releases the true labels: pass budget=None to do it knowingly" if math.isinf(eps) else ""
    return LabelDPBudgetError(
        f"label DP: {api} eps={eps:g} is over its budget={budget:g}: no release could be drawn, nothing was recorded "
        f"({hint or 'raise the budget only knowingly'})"
    )


def budget_error(
    release,
    new: list,
    total: float,
    budget: float,
    overlapping: int,
    ledger: str,
    budget_name: str = "privacy.label_dp.budget",
) -> LabelDPBudgetError:
    """The one-line refusal of `new` releases (privacy.label.ledger.store.Release) of `release`'s dataset: what would be
    spent, the total it would reach, the budget, and what to do."""
    what = ", ".join(f"{r.mechanism} eps={r.eps:g}" for r in new)
    return LabelDPBudgetError(
        f"label DP: the new release ({what}) would bring dataset {release.dataset}'s total eps (its most exposed "
        f"sample id, {overlapping} overlapping dataset(s) included) to {total:g}, over {budget_name} "
        f"{budget:g}; nothing was drawn or recorded (re-running an earlier release costs nothing; raise the budget "
        f"only knowingly; ledger {ledger})"
    )
