"""Label DP across a party's ranks: the key is created once (rank 0 first), the ledger is written once (rank 0).

Every leader rank draws the noisy labels itself from the leader's key (privacy/keyed_random.py): the draws
are a function of (key, release, sample id), so every rank holds the same noisy label for a sample without
any label crossing between ranks. Ranks r > 0 read the store's key but never write its ledger: a release
is spent once per run, however many ranks train on it. The trainer then compares a digest of the noisy
labels across ranks (a rank with another key file fails the run).
"""

from __future__ import annotations

import numpy as np


class LedgerReader:
    """The store as ranks r > 0 see it: the same key and ledger path, and a record() that writes nothing."""

    def __init__(self, store):
        self.store = store
        self.ledger_path = store.ledger_path
        self.warnings: list[str] = []

    def key(self) -> bytes:
        return self.store.key()

    def record(self, release, key: bytes, ids: np.ndarray, source: dict | None = None, **budget) -> tuple[bool, dict]:
        """Rank 0 records the release (and checks the budget); this rank's report (never written anywhere) carries no
        ledger totals."""
        return False, {"total_eps": None, "releases": None, "overlapping_datasets": []}

    def check_budget(self, release, planned, budget: float) -> None:
        """Read-only: every rank refuses a release over the budget before any follower connects."""
        self.store.check_budget(release, planned, budget)


def open_label_key_ranks(ctx, store_dir: str | None, key_file: str | None, shard):
    """open_label_key on rank 0 first (it may create the key), then on every other rank with a LedgerReader."""
    from vfl.labeldp.release import open_label_key

    key = ctx.in_order(lambda: open_label_key(store_dir, key_file, shard))
    if not ctx.is_main:
        key.store = LedgerReader(key.store)
    return key
