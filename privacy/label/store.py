"""The leader's label-DP state: one secret PRF key, one ledger of every release it has drawn, and its secret.

    <store>/key            32 random bytes as hex, mode 0600 (or privacy.label_dp.key_file)
    <store>/ledger.json    every labelled dataset the leader has randomized and every release, with its eps
    <store>/ledger_secret  32 random bytes as hex, mode 0600: the key of the ledger's id sketches (never the label key)
    <store>/ledger_seal    the ledger's write count and digest, MACed under the ledger secret (privacy/label/ledger_seal.py)
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
the ledger secret (privacy/label/ledger_math.py; <store>/id_hashes/ over SKETCH_K ids, the sketch in
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
or rolled back is refused when the store opens, before anything is drawn (its seal: privacy/label/ledger_seal.py).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
from dataclasses import dataclass

import numpy as np

from privacy.label.budget import LabelDPBudgetError, budget_error
from privacy.label.id_store import load_id_hashes, remove_replaced, save_id_hashes
from privacy.label.ledger_math import (
    EMPTY,
    SKETCH_K,
    STAGE_ONE,
    composed_eps,
    id_hashes,
    id_sketch,
    jsonable,
    merged,
    migrate,
    shares_any,
    sketch_hashes,
    sketch_hex,
)
from privacy.label.ledger_seal import (
    Seal,
    checked_state,
    coin_key,
    ledger_digest,
    opening_warnings,
    replace_private_file,
    seal_unsealed,
    sealed_write,
    write_seal,
)
from privacy.label.prior_store import load_prior, save_prior
from privacy.label.release_names import (
    dataset_id,
    default_store_dir,
    key_fingerprint,
    named_dataset_id,
    release_id,
)
from privacy.label.secret_files import (
    LabelDPStoreError,
    check_ancestors,
    check_private,
    create_key,
    create_secret,
    read_key,
    read_secret,
)

LEDGER_FORMAT = 4
MIGRATED_FORMATS = (2, 3)  # read and upgraded in place (see the module docstring)
SECRET_WHAT = "label-DP ledger secret"
SECRET_DAMAGED = "restore it from a backup: the ledger's id sketches are keyed by it"

__all__ = [
    "LEDGER_FORMAT",
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


SHARED, UNVERIFIABLE = "shared", "unverifiable"


@dataclass
class _Mine:
    """The dataset whose total is asked for: its held id set and, when record() runs, this run's ids.

    `whole_run` is true when this run's ids are the dataset's whole set (nothing recorded before is missing from
    them): only then can a format-2 sketch, keyed by a label key, be compared with the dataset. check_budget() has no
    ids (`ids` None): a comparison that needs them is left out there (a lower bound) and made by record()."""

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


class LabelDPStore:
    """The leader's key, ledger and ledger secret; every change happens under an exclusive file lock."""

    def __init__(self, root: str, key_file: str | None = None, _check_at_open: bool = True):
        self.dir = os.path.abspath(root)
        self.key_path = os.path.abspath(key_file) if key_file else os.path.join(self.dir, "key")
        self.ledger_path = os.path.join(self.dir, "ledger.json")
        self.secret_path = os.path.join(self.dir, "ledger_secret")
        self.seal_path = os.path.join(self.dir, "ledger_seal")
        self.warnings: list[str] = []
        self._identity: str | None = None
        self._state = None  # the ledger's LedgerState under its seal, as last read under the lock
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

    @contextlib.contextmanager
    def locked(self):
        """The store's exclusive lock (not re-entrant: record() takes it itself)."""
        fd = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def ledger(self) -> dict:
        """The ledger document ({format, datasets: {...}, releases: [...]}); empty when none was written yet.
        Called under the lock: LabelDPStoreError when the seal does not accept it (deleted, rolled back)."""
        doc, self._state = self._read_checked()
        return doc

    def _read_checked(self):
        """(the ledger document, its LedgerState under the seal); a ledger written before seals is sealed now."""
        raw = self._read_raw()
        doc = self._parse(raw) if raw is not None else {"format": LEDGER_FORMAT, "datasets": {}, "releases": []}
        state = checked_state(self, raw, doc.get("generation") if raw is not None else None)
        if state.unsealed:
            state = seal_unsealed(self, state)
        if doc["format"] in MIGRATED_FORMATS:
            doc = migrate(doc, doc["format"])
            doc["format"] = LEDGER_FORMAT
        return doc, state

    def _read_raw(self) -> bytes | None:
        try:
            with open(self.ledger_path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise LabelDPStoreError(
                f"label-DP ledger {self.ledger_path} cannot be read ({e}); it is the only record of "
                "what these labels have spent: restore it rather than delete it"
            ) from None

    def _parse(self, raw: bytes) -> dict:
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise LabelDPStoreError(
                f"label-DP ledger {self.ledger_path} cannot be read ({e}); it is the only record of "
                "what these labels have spent: restore it rather than delete it"
            ) from None
        if (
            not isinstance(doc, dict)
            or doc.get("format") not in (LEDGER_FORMAT, *MIGRATED_FORMATS)
            or not isinstance(doc.get("releases"), list)
            or not isinstance(doc.get("datasets"), dict)
        ):
            raise LabelDPStoreError(
                f"label-DP ledger {self.ledger_path} is not a format-{LEDGER_FORMAT} ledger (nor an older one this "
                "version migrates): restore it from a backup, or run the version that wrote it"
            )
        return doc

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

    def write_ledger(self, doc: dict) -> None:
        """Write the ledger document (the caller holds the lock and read it under it)."""
        self._write(doc)

    def _secret(self, doc: dict) -> bytes:
        """The ledger secret (called under the lock): created with the first id set, never replaced."""
        if os.path.exists(self.secret_path):
            secret = read_secret(self.secret_path, SECRET_WHAT, SECRET_DAMAGED)
        elif any(d.get("sketch") for d in doc["datasets"].values()):
            raise LabelDPStoreError(
                f"{SECRET_WHAT} {self.secret_path} is missing but ledger {self.ledger_path} holds sketches keyed by "
                f"it; {SECRET_DAMAGED} (a new secret would hide every overlap)"
            )
        else:
            secret = create_secret(self.secret_path, SECRET_WHAT, SECRET_DAMAGED)
            if not os.path.exists(self.seal_path):  # the seal is born with the secret: the ledger as it is now
                write_seal(self.seal_path, secret, Seal(0, ledger_digest(self._read_raw())))
        fp = key_fingerprint(secret)
        if doc.setdefault("ledger_secret", fp) != fp:
            raise LabelDPStoreError(
                f"{SECRET_WHAT} {self.secret_path} (fingerprint {fp}) is not the one ledger {self.ledger_path} was "
                f"sketched with ({doc['ledger_secret']}); {SECRET_DAMAGED}"
            )
        return secret

    def _held(self, ds: dict | None) -> tuple[np.ndarray, str | None]:
        """(a dataset's held id hashes, why its id file could not be read, or None)."""
        if ds is None:
            return EMPTY, None
        if "id_hashes" not in ds:
            return sketch_hashes(ds.get("sketch", "")), None
        try:
            return load_id_hashes(self.dir, ds["id_hashes"]), None
        except LabelDPStoreError as e:
            return sketch_hashes(ds.get("sketch", "")), str(e)

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
            held, lost = self._held(ds)
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
            mine = _Mine(union, ds.get("partial", ""), ds.get("legacy"), key, ids, whole_run=union.size == fresh.size)
            overlapping, unverifiable = self._overlaps(doc, release.dataset, mine)
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
            summary = self._summary(doc, release.dataset, overlapping, unverifiable)
            if found is None:
                self._warn_overlaps(release.dataset, summary, unverifiable)
            doc["composition"] = (
                "basic sequential composition over releases; datasets sharing sample ids charged to each other"
            )
            self._write_with_ids(doc, release.dataset, ds, union, union.size != held.size, lost)
            return found is None, summary

    def _write_with_ids(self, doc: dict, dataset: str, ds: dict, union: np.ndarray, grew: bool, lost: str | None):
        """The dataset's set (a file over SKETCH_K ids, written first under a new name), then the ledger naming it;
        then the file it replaces is removed (one that could not be read is left for its owner)."""
        old = ds.get("id_hashes")
        if grew or lost:  # a union only grows: the same size is the same set
            entry = save_id_hashes(self.dir, dataset, union) if union.size > SKETCH_K else None
            ds.pop("id_hashes", None)
            if entry is not None:
                ds["id_hashes"] = entry
            ds["sketch"] = sketch_hex(union)
            ds["rows"] = max(int(ds.get("rows", 0)), int(union.size)) if ds.get("partial") else int(union.size)
        try:
            self._write(doc)
        except LabelDPStoreError:
            remove_replaced(self.dir, ds.get("id_hashes"), old)  # the ledger still names the old file
            raise
        if not lost:
            remove_replaced(self.dir, old, ds.get("id_hashes"))

    def _warn_overlaps(self, dataset: str, summary: dict, unverifiable: dict[str, str]) -> None:
        measured = [d for d in summary["overlapping_datasets"] if d not in unverifiable]
        if measured:
            self.warnings.append(
                f"label DP: dataset {dataset} shares sample ids with {len(measured)} dataset(s) released before "
                f"(re-exported or overlapping data); their releases are charged to it: total eps {summary['total_eps']}; "
                f"charged: {'; '.join(summary['charged_from_others'][:5])}"
                f"{' and more' if len(summary['charged_from_others']) > 5 else ''} (see {self.ledger_path}). Where "
                "sample ids are line numbers (no id column), every file shares them: give the data an id column for "
                "exact accounting"
            )
        if unverifiable:
            why = "; ".join(sorted(set(unverifiable.values())))
            self.warnings.append(
                f"label DP: {len(unverifiable)} dataset(s) cannot be compared with dataset {dataset} ({why}): their "
                f"releases are charged to it, total eps {summary['total_eps']}; this may over-count, it never "
                f"under-counts (see {self.ledger_path})"
            )

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
            held, lost = self._held(ds)
            mine = _Mine(held, lost or (ds or {}).get("partial", ""), (ds or {}).get("legacy"))
            overlapping, _ = self._overlaps(doc, release.dataset, mine)
        charged = [r for r in doc["releases"] if r.get("dataset") in (release.dataset, *overlapping)]
        total = composed_eps(charged + [r.entry("") for r in new])
        if total - budget > 1e-9:
            raise budget_error(release, new, total, budget, len(overlapping), self.ledger_path)

    def _overlaps(self, doc: dict, dataset: str, mine: _Mine) -> tuple[list[str], dict[str, str]]:
        """(every dataset charged to `dataset`, and of them those charged because they cannot be compared: {name:
        why})."""
        overlapping, unverifiable = [], {}
        for other, d in doc["datasets"].items():
            if other == dataset:
                continue
            verdict, why = self._verdict(mine, d)
            if verdict is not None:
                overlapping.append(other)
            if verdict == UNVERIFIABLE:
                unverifiable[other] = why
        return overlapping, unverifiable

    def _verdict(self, mine: _Mine, d: dict) -> tuple[str | None, str]:
        """SHARED (a common id found), UNVERIFIABLE (cannot be ruled out: charged) or None (no common id, or, in
        check_budget, a comparison that needs this run's ids) for `mine` and another dataset's entry."""
        if mine.partial or d.get("partial"):
            return UNVERIFIABLE, d.get("partial") or f"this dataset's own set is partial: {mine.partial}"
        record = mine.ids is not None
        if mine.held.size and d.get("sketch"):  # both id sets under the ledger secret: exact
            if shares_any(mine.held, sketch_hashes(d["sketch"])):
                return SHARED, ""
            if "id_hashes" in d:
                held, lost = self._held(d)
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

    def _summary(self, doc: dict, dataset: str, overlapping: list[str], unverifiable: dict[str, str]) -> dict:
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

    def _write(self, doc: dict) -> None:
        """Write the ledger under the lock, sealed: its write count goes up by one (privacy/label/ledger_seal.py)."""
        secret = self._secret(doc)
        _, state = self._read_checked()  # the ledger on disk, as this lock holder read it
        doc["generation"] = state.generation + 1
        sealed_write(self, state, secret, (json.dumps(doc, indent=1) + "\n").encode(), self._put)

    def _put(self, data: bytes) -> None:
        replace_private_file(self.ledger_path, data, "label-DP ledger")
