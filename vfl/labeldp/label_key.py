"""The leader's label key as a release uses it: its secret, its store, the labelled dataset and its label set."""

from __future__ import annotations

from dataclasses import dataclass

from privacy.label.ledger.recording import ReleaseNames
from privacy.label.ledger.store import LabelDPStore, key_fingerprint


@dataclass
class LabelKey:
    """The leader's secret, the store holding its ledger, the labelled dataset being randomized and its label set's
    keyed digest (every release's parameters carry it: other labels are another release). Opened by
    vfl/labeldp/release.py's `open_label_key`."""

    key: bytes
    store: LabelDPStore
    dataset: str
    source: dict
    label_set: str

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key)

    @property
    def names(self) -> ReleaseNames:
        """How this label set's releases are named (the standalone API names its own the same way)."""
        return ReleaseNames(self.dataset, self.fingerprint, self.label_set)
