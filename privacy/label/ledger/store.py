"""The leader's label-DP state: one secret PRF key, one ledger of every release it has drawn, and its secret.

    <store>/key            32 random bytes as hex, mode 0600 (or privacy.label_dp.key_file)
    <store>/ledger.json    every labelled dataset the leader has randomized and every release, with its eps
    <store>/ledger_secret  32 random bytes as hex, mode 0600: the key of the ledger's id sketches (never the label key)
    <store>/ledger_seal    the ledger's write count and digest, MACed under the ledger secret (privacy/label/ledger/ledger_seal.py)
    <store>/ledger_sealed  a marker made with the first seal: in this store a missing seal is refused
    <store>/priors/        LP-2ST: the first prior of each stage-two release, reused by every later run of it

The store lives outside any shard directory, so re-preparing the data (`prepare --force`) never
touches it, and one key serves every dataset of the leader. A release is the noisy labels of one
dataset under one mechanism and parameter set and this key; its id (a digest of all of them) is in
the PRF input. The same parameters reproduce the same release and cost nothing more; any change is a
new release, drawn independently, and the ledger adds its eps (basic sequential composition, Dwork &
Roth 2014, Theorem 3.16).

Datasets are named by their source and label, which a re-export or one appended row changes. So the ledger
also keeps every sample id each dataset has released, as the sorted set of their 64-bit hashes keyed by
the ledger secret (privacy/label/ledger/ledger_math.py; <store>/id_hashes/ over SKETCH_K ids, the sketch in
the ledger below), and charges every release of an overlapping dataset to a new one: the total it
reports is that of the most exposed sample id, not of one file. Every run merges its ids into the set
(a follower steers the intersection through PSI, so a later run of one release may expose ids its first
run did not), and overlap is tested on whole sets, exactly: a shared id is never missed. The secret is
created once beside the ledger, independent of the label key, so the sets stay comparable when the
label key changes.

Ledger format 4 (this one) holds whole id sets. Formats 2 and 3 kept the bottom-k sketch of a
dataset's first run only, format 2 under the label key of the time; such a ledger is migrated when
read, never refused (refusing would push users to delete their only record). A dataset whose old sketch is
its whole set (one run, at most SKETCH_K ids) keeps it; any other is `partial` and charged to every dataset, and
every dataset to it (over-counts, never under-counts; a warning says so). A format-2 sketch is compared exactly
with a run's ids while that run holds its key, and is otherwise charged.

A release that would take the total of its dataset's most exposed sample id over the budget
(privacy.label_dp.budget) is refused before it is recorded, and it is recorded before it is drawn. A ledger deleted
or rolled back is refused when the store opens, before anything is drawn (its seal: privacy/label/ledger/ledger_seal.py).

The ledger's files (lock, reads, sealed writes, secret) are privacy/label/ledger/ledger_io.py's; which datasets share ids,
privacy/label/ledger/ledger_overlap.py's; this module keeps the key, the releases and the budget.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import numpy as np

from privacy.label.ledger.budget import LabelDPBudgetError, budget_error
from privacy.label.ledger.id_store import held_hashes
from privacy.label.ledger.ledger_io import LEDGER_FORMAT, MIGRATED_FORMATS, SECRET_DAMAGED, SECRET_WHAT, LedgerFiles
from privacy.label.ledger.ledger_math import (
    SKETCH_K,
    STAGE_ONE,
    composed_eps,
    id_hashes,
    id_sketch,
    jsonable,
    merged,
    sketch_hashes,
)
from privacy.label.ledger.ledger_overlap import DatasetIds, charged_summary, overlap_warnings, overlaps
from privacy.label.ledger.ledger_seal import coin_key, opening_warnings
from privacy.label.ledger.prior_store import load_prior, save_prior
from privacy.label.ledger.release_names import (
    dataset_id,
    default_store_dir,
    key_fingerprint,
    named_dataset_id,
    release_id,
)
from privacy.label.ledger.secret_files import (
    LabelDPStoreError,
    check_ancestors,
    check_private,
    create_key,
    read_key,
)

__all__ = [
    "LEDGER_FORMAT",
    "MIGRATED_FORMATS",
    "SECRET_DAMAGED",
    "SECRET_WHAT",
    "SKETCH_K",
    "STAGE_ONE",
    "LabelDPBudgetError",
    "LabelDPStore",
    "LabelDPStoreError",
    "Release",
    "composed_eps",
    "create_key",
    "dataset_id",
    "default_store_dir",
    "id_sketch",
    "key_fingerprint",
    "named_dataset_id",
    "read_key",
    "release_id",
]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Release:
    """One randomization of a labelled dataset, as the ledger records it."""

    release_id: str
    dataset: str
    mechanism: str
    eps: float
    params: dict
    rows: int

    def entry(self, fingerprint: str) -> dict:
        return {
            "release_id": self.release_id,
            "dataset": self.dataset,
            "mechanism": self.mechanism,
            "eps": jsonable(self.eps),
            "params": {k: jsonable(v) for k, v in self.params.items()},
            "key_fingerprint": fingerprint,
            "rows": self.rows,
            "created": _now(),
            "uses": 1,
        }


class LabelDPStore(LedgerFiles):
    """The leader's key, ledger and ledger secret; every change happens under an exclusive file lock."""

    def __init__(self, root: str, key_file: str | None = None, _check_at_open: bool = True):
        super().__init__(root, key_file)
        self.warnings: list[str] = []
        self._identity: str | None = None
        self.created = not os.path.exists(self.dir)
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
        except OSError as e:
            raise LabelDPStoreError(
                f"label-DP store {self.dir} cannot be created: {e.strerror} "
                "(set privacy.label_dp.store_dir to a writable directory)"
            ) from None
        check_private(self.dir, "label-DP store directory")
        check_ancestors(self.dir)
        if self.created:
            self.warnings.append(
                f"label DP: created a new key store {self.dir}; it cannot count releases made under "
                "another store: if these labels were released before, point privacy.label_dp.store_dir "
                "(or $VFL_LABEL_DP_STORE) at that store instead"
            )
        if _check_at_open:  # a ledger deleted or rolled back is refused here, before any key is read
            with self.locked():
                doc = self.ledger()
            self.warnings += opening_warnings(self, doc, self._state)

    def key(self) -> bytes:
        """The leader's key, created on first use. A new key where the ledger already has releases is
        warned about: its releases are independent of the old ones and add their eps."""
        with self.locked():
            doc = self.ledger()  # after an acknowledged reset the store draws with coin_key(key, its nonce)
            self._identity = None  # an ack-reset may have replaced a lost ledger secret: identity() reads it anew
            if os.path.exists(self.key_path):
                return coin_key(read_key(self.key_path), self._state.coins)
            key = coin_key(create_key(self.key_path), self._state.coins)
            old = {r["key_fingerprint"] for r in doc["releases"]}
            if old:
                self.warnings.append(
                    f"label DP: created a new key {key_fingerprint(key)} in a store whose ledger already has releases "
                    f"under {len(old)} other key(s); new releases are independent of them and add their eps "
                    f"(see {self.ledger_path})"
                )
            return key

    def check_label_key(self, key: bytes) -> None:
        """Under the lock: LabelDPStoreError unless `key` is the store's label key now (an ack-reset since it was read
        rotated the coins: drawing with it would reuse the coins the reset retired)."""
        self.ledger()
        if not os.path.exists(self.key_path) or coin_key(read_key(self.key_path), self._state.coins) != key:
            raise LabelDPStoreError(
                f"label-DP store {self.dir}: its coins changed (an ack-reset, or another key file) while this call ran; "
                "nothing was drawn: call again"
            )

    def identity(self) -> str:
        """The store's public identity: its ledger secret's fingerprint (the secret is created on first use and
        replaced only by an ack-reset that found it lost, so it is read again after each key())."""
        if self._identity is None:
            with self.locked():
                self._identity = key_fingerprint(self._secret(self.ledger()))
        return self._identity

    def record(
        self,
        release: Release,
        key: bytes,
        ids: np.ndarray,
        source: dict | None = None,
        budget: float | None = None,
        planned: tuple[Release, ...] = (),
        budget_name: str = "privacy.label_dp.budget",
    ) -> tuple[bool, dict]:
        """Add the release (and its dataset) to the ledger unless it is there, and merge this run's ids into the
        dataset's id set either way; `planned` releases, which this run records later, count towards the budget too.
        LabelDPBudgetError, with nothing written, when a new one would take the dataset's total over `budget` (named
        budget_name in the error: the setting that holds it).
        Returns (is_new, summary) with the dataset's total eps.

        The dataset's `rows` is the number of distinct ids it has ever released: exact, since the whole set is held
        (a lower bound where the set is `partial`)."""
        fp = key_fingerprint(key)
        ids = np.asarray(ids, dtype=np.int64)
        with self.locked():
            doc = self.ledger()
            secret = self._secret(doc)
            ds = doc["datasets"].setdefault(
                release.dataset, {"first_seen": _now(), "source": source or {}, "rows": 0, "sketch": ""}
            )
            held, lost = held_hashes(self.dir, ds)
            fresh = id_hashes(secret, ids)
            union = merged(held, fresh)
            if lost:
                ds["partial"] = f"its id file could not be read on {_now()} ({lost}): ids of earlier runs are lost"
                self.warnings.append(
                    f"label DP: {lost}; dataset {release.dataset} is charged with every dataset, and they with it, from "
                    "now on (over-counts; never under-counts); the file is left where it is"
                )
            legacy = ds.get("legacy")
            if legacy and legacy["key"] == fp and not ds.get("partial"):  # a format-2 sketch: covered by this run?
                if np.isin(sketch_hashes(legacy["sketch"]), id_hashes(key, ids)).all():
                    ds.pop("legacy")  # every id it held is among this run's, now in the set
            mine = DatasetIds(
                union, ds.get("partial", ""), ds.get("legacy"), key, ids, whole_run=union.size == fresh.size
            )
            overlapping, unverifiable = overlaps(self.dir, doc, release.dataset, mine)
            known = {r["release_id"]: r for r in doc["releases"]}
            new = [r for r in (release, *planned) if r.release_id not in known]
            charged = (release.dataset, *overlapping)
            if new and budget is not None:
                trial = [r for r in doc["releases"] + [r.entry("") for r in new] if r.get("dataset") in charged]
                total = composed_eps(trial)
                if total - budget > 1e-9:
                    raise budget_error(release, new, total, budget, len(overlapping), self.ledger_path, budget_name)
            found = known.get(release.release_id)
            if found is None:
                doc["releases"].append(release.entry(fp))
            else:
                found["uses"] = int(found.get("uses", 1)) + 1
                found["last_used"] = _now()
                found["rows"] = max(int(found.get("rows", 0)), release.rows)
            summary = charged_summary(doc, release.dataset, overlapping, unverifiable)
            if found is None:
                self.warnings += overlap_warnings(release.dataset, summary, unverifiable, self.ledger_path)
            doc["composition"] = (
                "basic sequential composition over releases; datasets sharing sample ids charged to each other"
            )
            self._write_with_ids(doc, release.dataset, ds, union, union.size != held.size, lost)
            return found is None, summary

    def check_budget(self, release: Release, planned: tuple[Release, ...], budget: float) -> None:
        """Before any id is known (before followers connect): LabelDPBudgetError when the new ones among these
        releases would take the dataset over `budget`, counting its own releases, the datasets its recorded ids
        share ids with and those that cannot be compared (a lower bound of what record() charges: it checks again
        with this run's ids)."""
        with self.locked():
            doc = self.ledger()
            known = {r["release_id"] for r in doc["releases"]}
            new = [r for r in (release, *planned) if r.release_id not in known]
            if not new:
                return
            ds = doc["datasets"].get(release.dataset)
            held, lost = held_hashes(self.dir, ds)
            mine = DatasetIds(held, lost or (ds or {}).get("partial", ""), (ds or {}).get("legacy"))
            overlapping, _ = overlaps(self.dir, doc, release.dataset, mine)
        charged = [r for r in doc["releases"] if r.get("dataset") in (release.dataset, *overlapping)]
        total = composed_eps(charged + [r.entry("") for r in new])
        if total - budget > 1e-9:
            raise budget_error(release, new, total, budget, len(overlapping), self.ledger_path)

    # -- LP-2ST: the first prior of a stage-two release, kept and reused ------------------------------------------
    def stored_prior(self, release: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(sample ids, prior rows) recorded for the stage-two release, or None; LabelDPStoreError when the ledger
        names a prior file that is missing or altered."""
        with self.locked():
            entry = self.ledger().get("priors", {}).get(release)
            return None if entry is None else load_prior(self.dir, entry)

    def keep_prior(self, release: str, ids: np.ndarray, prior: np.ndarray) -> None:
        """Add the priors of ids not yet stored for the stage-two release (those stored are never replaced)."""
        with self.locked():
            doc = self.ledger()
            priors = doc.setdefault("priors", {})
            old = load_prior(self.dir, priors[release]) if release in priors else None
            priors[release] = save_prior(self.dir, release, ids, prior, old)
            self._write(doc)
