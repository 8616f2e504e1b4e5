"""Record a release in the ledger, then draw it: the one call by which every keyed label-DP release is spent.

A release is recorded (the budget of its dataset's most exposed sample id checked, nothing written when it is refused;
privacy/label/ledger/store.py) before anything of it is drawn, and its draws are keyed by its release id, which
`ReleaseLedger.record_and_draw` hands the draw only once the ledger holds it: a run stopped after the draw has spent
it. Training's mechanisms (binary, K-class and regression: vfl/labeldp/mechanisms.py), LabelDP and RegressionLabelDP
all record through one `ReleaseLedger`; a plan entry (ledger mechanism, parameters: privacy/label/release_plans.py)
becomes the ledger's `Release` by `ReleaseNames`, which names it by the label set it randomizes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np

from privacy.label.ledger.release_names import release_id
from privacy.label.ledger.store import LabelDPStore, Release

T = TypeVar("T")
Plan = list[tuple[str, dict]]  # the (ledger mechanism, parameters) of each release a run draws, in order


@dataclass(frozen=True)
class ReleaseNames:
    """How a labelled dataset's releases are named: (dataset id, key fingerprint, mechanism, parameters with the
    label set they randomize), so other labels are another release (privacy/label/ledger/release_names.py)."""

    dataset: str
    fingerprint: str
    label_set: str

    def named(self, params: dict) -> dict:
        return {**params, "label_set": self.label_set}

    def id_of(self, mechanism: str, params: dict) -> str:
        return release_id(self.dataset, self.fingerprint, mechanism, self.named(params))

    def plan(self, entries: Plan) -> Plan:
        """A mechanism's plan with every entry's parameters named by the label set."""
        return [(m, self.named(p)) for m, p in entries]

    def release(self, mechanism: str, params: dict, rows: int, eps: float | None = None) -> Release:
        """The ledger's entry of a plan entry (eps: the entry's own, a split one's share; unset, its params' eps)."""
        params = self.named(params)
        eps = params["eps"] if eps is None else eps
        return Release(self.id_of(mechanism, params), self.dataset, mechanism, float(eps), params, rows)


class Recorded(NamedTuple):
    """What the ledger says of a recorded release: its id, whether this call added it, and the dataset's totals
    (`releases`, `total_eps`, `overlapping_datasets`; empty where nothing is recorded)."""

    release: str
    new: bool
    summary: dict


@dataclass(frozen=True)
class ReleaseLedger:
    """Where one call's releases are recorded: the leader's store (None: `key=` bytes, no ledger, nothing recorded and
    every release new), its key, the sample ids the releases cover, the dataset's source, how a plan entry becomes a
    ledger `Release` (`release_of(mechanism, params)`), and the budget with the name of the setting that holds it."""

    store: LabelDPStore | None
    key: bytes
    ids: np.ndarray
    source: dict
    release_of: Callable[[str, dict], Release]
    budget: float | None
    budget_name: str = "privacy.label_dp.budget"

    def record(self, plan: Plan) -> Recorded:
        """Record plan[0] (plan[1:], which this run records later, count towards the budget too); LabelDPBudgetError,
        with nothing written, when a new one would take the dataset over the budget."""
        first, *later = (self.release_of(m, p) for m, p in plan)
        if self.store is None:
            return Recorded(first.release_id, True, {})
        is_new, summary = self.store.record(
            first,
            self.key,
            self.ids,
            self.source,
            budget=self.budget,
            planned=tuple(later),
            budget_name=self.budget_name,
        )
        return Recorded(first.release_id, is_new, summary)

    def record_and_draw(self, plan: Plan, draw: Callable[[str], T]) -> tuple[Recorded, T]:
        """Record plan[0] as `record` does, then draw it: (what the ledger says, draw(its release id))."""
        recorded = self.record(plan)
        return recorded, draw(recorded.release)
