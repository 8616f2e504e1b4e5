"""Which of the ledger's datasets are charged to one being released: those sharing an id, and those not ruled out.

Overlap is tested on whole id sets under the ledger secret, exactly (privacy/label/ledger/ledger_math.py); a dataset whose set
is partial, or whose format-2 sketch is keyed by a label key the comparison lacks, cannot be ruled out and is charged
(over-counts, never under-counts). The store (privacy/label/ledger/store.py) adds up what is charged against the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privacy.label.ledger.id_store import held_hashes
from privacy.label.ledger.ledger_math import composed_eps, id_hashes, jsonable, shares_any, sketch_hashes
from privacy.label.ledger.release_names import key_fingerprint

SHARED, UNVERIFIABLE = "shared", "unverifiable"


@dataclass
class DatasetIds:
    """The dataset whose total is asked for: its held id set and, when the store records a run, this run's ids.

    `whole_run` is true when this run's ids are the dataset's whole set (nothing recorded before is missing from
    them): only then can a format-2 sketch, keyed by a label key, be compared with the dataset. The store's
    check_budget() has no ids (`ids` None): a comparison that needs them is left out there (a lower bound) and made by
    record()."""

    held: np.ndarray
    partial: str  # why some of its ids are not held ("" when none is missing)
    legacy: dict | None
    key: bytes | None = None
    ids: np.ndarray | None = None
    whole_run: bool = False
    _label_hashes: np.ndarray | None = None

    def label_hashes(self) -> np.ndarray:
        if self._label_hashes is None:
            self._label_hashes = id_hashes(self.key, self.ids)
        return self._label_hashes


def overlaps(store_dir: str, doc: dict, dataset: str, mine: DatasetIds) -> tuple[list[str], dict[str, str]]:
    """(every dataset charged to `dataset`, and of them those charged because they cannot be compared: {name:
    why})."""
    overlapping, unverifiable = [], {}
    for other, d in doc["datasets"].items():
        if other == dataset:
            continue
        verdict, why = _verdict(store_dir, mine, d)
        if verdict is not None:
            overlapping.append(other)
        if verdict == UNVERIFIABLE:
            unverifiable[other] = why
    return overlapping, unverifiable


def _verdict(store_dir: str, mine: DatasetIds, d: dict) -> tuple[str | None, str]:
    """SHARED (a common id found), UNVERIFIABLE (cannot be ruled out: charged) or None (no common id, or, in
    check_budget, a comparison that needs this run's ids) for `mine` and another dataset's entry."""
    if mine.partial or d.get("partial"):
        return UNVERIFIABLE, d.get("partial") or f"this dataset's own set is partial: {mine.partial}"
    record = mine.ids is not None
    if mine.held.size and d.get("sketch"):  # both id sets under the ledger secret: exact
        if shares_any(mine.held, sketch_hashes(d["sketch"])):
            return SHARED, ""
        if "id_hashes" in d:
            held, lost = held_hashes(store_dir, d)
            if lost:
                return UNVERIFIABLE, lost
            if shares_any(mine.held, held):
                return SHARED, ""
    undecided = None
    theirs = d.get("legacy")
    if theirs and mine.held.size and record:  # a format-2 sketch, keyed by a label key: needs this run's ids
        if theirs["key"] != key_fingerprint(mine.key):
            undecided = "sketched by a format-2 ledger under a label key this run does not hold"
        elif not mine.whole_run:
            undecided = "sketched by a format-2 ledger under the label key, which this dataset's earlier ids lack"
        elif shares_any(mine.label_hashes(), sketch_hashes(theirs["sketch"])):
            return SHARED, ""
    if mine.legacy and (d.get("sketch") or theirs) and record:
        if theirs and theirs["key"] == mine.legacy["key"]:
            if shares_any(sketch_hashes(mine.legacy["sketch"]), sketch_hashes(theirs["sketch"])):
                return SHARED, ""
        if d.get("sketch") or theirs["key"] != mine.legacy["key"]:
            undecided = "this dataset's format-2 sketch is keyed by a label key the other's ids are not"
    return (UNVERIFIABLE, undecided) if undecided else (None, "")


def charged_summary(doc: dict, dataset: str, overlapping: list[str], unverifiable: dict[str, str]) -> dict:
    """The dataset's total eps over every release charged to it, and what was charged from other datasets."""
    charged = [r for r in doc["releases"] if r.get("dataset") in (dataset, *overlapping)]
    others = []
    for r in charged:
        if r.get("dataset") == dataset:
            continue
        source = (doc["datasets"].get(r.get("dataset")) or {}).get("source") or {}
        others.append(
            f"{source.get('path') or 'dataset ' + str(r.get('dataset'))[:12]} "
            f"({r.get('mechanism')} eps {r.get('eps')}, {str(r.get('created', '?'))[:10]})"
        )
    return {
        "total_eps": jsonable(composed_eps(charged)),
        "releases": len(charged),
        "overlapping_datasets": overlapping,
        "unverifiable_datasets": list(unverifiable),
        "charged_from_others": others,  # the earlier releases of other datasets charged here, named for the log
    }


def overlap_warnings(dataset: str, summary: dict, unverifiable: dict[str, str], ledger_path: str) -> list[str]:
    """The log lines of a new release charged with other datasets' releases: those sharing ids, those not compared."""
    warnings = []
    measured = [d for d in summary["overlapping_datasets"] if d not in unverifiable]
    if measured:
        warnings.append(
            f"label DP: dataset {dataset} shares sample ids with {len(measured)} dataset(s) released before "
            f"(re-exported or overlapping data); their releases are charged to it: total eps {summary['total_eps']}; "
            f"charged: {'; '.join(summary['charged_from_others'][:5])}"
            f"{' and more' if len(summary['charged_from_others']) > 5 else ''} (see {ledger_path}). Where "
            "sample ids are line numbers (no id column), every file shares them: give the data an id column for "
            "exact accounting"
        )
    if unverifiable:
        why = "; ".join(sorted(set(unverifiable.values())))
        warnings.append(
            f"label DP: {len(unverifiable)} dataset(s) cannot be compared with dataset {dataset} ({why}): their "
            f"releases are charged to it, total eps {summary['total_eps']}; this may over-count, it never "
            f"under-counts (see {ledger_path})"
        )
    return warnings
