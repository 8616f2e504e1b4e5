"""The leader's label-DP state: one secret PRF key, one ledger of every release it has drawn, and its secret.

    <store>/key            32 random bytes as hex, mode 0600 (or privacy.label_dp.key_file)
    <store>/ledger.json    every labelled dataset the leader has randomized and every release, with its eps
    <store>/ledger_secret  32 random bytes as hex, mode 0600: the key of the ledger's id sketches (never the label key)
    <store>/priors/        LP-2ST: the first prior of each stage-two release, reused by every later run of it

The store lives outside any shard directory, so re-preparing the data (`prepare --force`) never
touches it, and one key serves every dataset of the leader. A release is the noisy labels of one
dataset under one mechanism and parameter set and this key; its id (a digest of all of them) is in
the PRF input. The same parameters reproduce the same release and cost nothing more; any change is a
new release, drawn independently, and the ledger adds its eps (basic sequential composition, Dwork &
Roth 2014, Theorem 3.16).

Datasets are named by their source, which a re-export or one appended row changes. So the ledger
also keeps a bottom-k sketch of each dataset's sample ids (privacy/label/ledger_math.py) and charges
every release of an overlapping dataset to a new one: the total it reports is that of the most
exposed sample id, not of one file. The sketches are keyed by the ledger secret, created once beside
the ledger and independent of the label key, so they stay comparable when the label key changes.

Ledger format 3 (this one) sketches under the ledger secret; format 2 sketched under the label key
of the time. A format-2 ledger is migrated when read: its sketches cannot be recomputed without the
ids, so each keeps the fingerprint of the key it was taken under. A new dataset is compared with it
exactly when this run holds that key, and is otherwise charged with all its releases (the
conservative side: it can over-count, never under-count); an old dataset released again is
re-sketched under the ledger secret.

A release that would take the total of its dataset's most exposed sample id over the budget
(privacy.label_dp.budget) is refused before it is recorded, and it is recorded before it is drawn.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import math
import os
from dataclasses import dataclass

import numpy as np

from privacy.label.ledger_math import (
    SKETCH_K,
    STAGE_ONE,
    composed_eps,
    estimated_overlap,
    id_sketch,
    jsonable,
)
from privacy.label.prior_store import load_prior, save_prior
from privacy.label.secret_files import (
    LabelDPStoreError,
    check_ancestors,
    check_private,
    create_key,
    create_secret,
    read_key,
    read_secret,
)

LEDGER_FORMAT = 3
MIGRATED_FORMATS = (2,)  # read and upgraded in place (see the module docstring)
STORE_ENV = "VFL_LABEL_DP_STORE"
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
    "estimated_overlap",
    "id_sketch",
    "key_fingerprint",
    "named_dataset_id",
    "read_key",
    "release_id",
]


class LabelDPBudgetError(LabelDPStoreError):
    """A new release would take its dataset's most exposed sample id over privacy.label_dp.budget."""


def default_store_dir() -> str:
    """$VFL_LABEL_DP_STORE, else $XDG_DATA_HOME/vfl/label_dp, else ~/.local/share/vfl/label_dp."""
    if os.environ.get(STORE_ENV):
        return os.environ[STORE_ENV]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "vfl", "label_dp")


def dataset_id(source_sha256: str) -> str:
    """The name of a labelled dataset: a digest of its labelled source file's sha256."""
    if not isinstance(source_sha256, str) or len(source_sha256) != 64:
        raise LabelDPStoreError(
            f"the labelled source's sha256 must be 64 hex digits, got {source_sha256!r} "
            "(re-run `python -m vfl.data prepare`: older manifests lack source.sha256)"
        )
    return hashlib.sha256(b"vfl/labelled-dataset/v1|" + source_sha256.encode()).hexdigest()[:32]


def named_dataset_id(name: str) -> str:
    """The dataset id of a user-named label set (the standalone LabelDP API)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"dataset must name the label set (e.g. 'clicks-2026-11'), got {name!r}")
    return hashlib.sha256(b"vfl/named-dataset/v1|" + name.encode()).hexdigest()[:32]


def key_fingerprint(key: bytes) -> str:
    """A public name of a key (it reveals nothing about the key's bits)."""
    return hashlib.sha256(b"vfl/label-dp/key-fingerprint/v1|" + key).hexdigest()[:16]


def release_id(dataset: str, fingerprint: str, mechanism: str, params: dict) -> str:
    """Digest of everything that defines a release: dataset, key, mechanism and its parameters."""
    doc = {
        "dataset": dataset,
        "key": fingerprint,
        "mechanism": mechanism,
        "params": {k: jsonable(v) for k, v in sorted(params.items())},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _migrate(doc: dict) -> dict:
    """A format-2 ledger as format 3: each dataset's sketch keeps the fingerprint of the label key it was taken under
    (that of the dataset's first release)."""
    for name, ds in doc["datasets"].items():
        first = next((r for r in doc["releases"] if r.get("dataset") == name), {})
        ds["legacy_sketch_key"] = first.get("key_fingerprint", "unknown")
    doc["format"], doc["migrated_from"] = LEDGER_FORMAT, doc["format"]
    return doc


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

    def __init__(self, root: str, key_file: str | None = None):
        self.dir = os.path.abspath(root)
        self.key_path = os.path.abspath(key_file) if key_file else os.path.join(self.dir, "key")
        self.ledger_path = os.path.join(self.dir, "ledger.json")
        self.secret_path = os.path.join(self.dir, "ledger_secret")
        self.warnings: list[str] = []
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

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def ledger(self) -> dict:
        """The ledger document ({format, datasets: {...}, releases: [...]}); empty when none was written yet."""
        if not os.path.exists(self.ledger_path):
            return {"format": LEDGER_FORMAT, "datasets": {}, "releases": []}
        try:
            with open(self.ledger_path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
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
        return _migrate(doc) if doc["format"] in MIGRATED_FORMATS else doc

    def key(self) -> bytes:
        """The leader's key, created on first use. A new key where the ledger already has releases is
        warned about: its releases are independent of the old ones and add their eps."""
        with self._locked():
            if os.path.exists(self.key_path):
                return read_key(self.key_path)
            key = create_key(self.key_path)
            old = {r["key_fingerprint"] for r in self.ledger()["releases"]}
            if old:
                self.warnings.append(
                    f"label DP: created a new key {key_fingerprint(key)} in a store whose ledger already has releases "
                    f"under {len(old)} other key(s); new releases are independent of them and add their eps "
                    f"(see {self.ledger_path})"
                )
            return key

    def _secret(self, doc: dict) -> bytes:
        """The ledger secret (called under the lock): created with the first sketch, never replaced."""
        if os.path.exists(self.secret_path):
            secret = read_secret(self.secret_path, SECRET_WHAT, SECRET_DAMAGED)
        elif any("legacy_sketch_key" not in d for d in doc["datasets"].values()):
            raise LabelDPStoreError(
                f"{SECRET_WHAT} {self.secret_path} is missing but ledger {self.ledger_path} holds sketches keyed by "
                f"it; {SECRET_DAMAGED} (a new secret would hide every overlap)"
            )
        else:
            secret = create_secret(self.secret_path, SECRET_WHAT, SECRET_DAMAGED)
        fp = key_fingerprint(secret)
        if doc.setdefault("ledger_secret", fp) != fp:
            raise LabelDPStoreError(
                f"{SECRET_WHAT} {self.secret_path} (fingerprint {fp}) is not the one ledger {self.ledger_path} was "
                f"sketched with ({doc['ledger_secret']}); {SECRET_DAMAGED}"
            )
        return secret

    def record(
        self,
        release: Release,
        key: bytes,
        ids: np.ndarray,
        source: dict | None = None,
        budget: float | None = None,
        planned: tuple[Release, ...] = (),
    ) -> tuple[bool, dict]:
        """Add the release (and its dataset) to the ledger unless it is there; `planned` releases, which this run
        records later, count towards the budget too. LabelDPBudgetError, with nothing written, when a new one would
        take the dataset's total over `budget`. Returns (is_new, summary) with the dataset's total eps."""
        fp = key_fingerprint(key)
        ids = np.asarray(ids, dtype=np.int64)
        with self._locked():
            doc = self.ledger()
            secret = self._secret(doc)
            ds = doc["datasets"].get(release.dataset)
            if ds is None or "legacy_sketch_key" in ds:  # new, or sketched by a format-2 ledger: (re-)sketch it
                ds = doc["datasets"][release.dataset] = {
                    **(ds or {"first_seen": _now(), "source": source or {}}),
                    "rows": int(ids.size),
                    "sketch": id_sketch(secret, ids),
                }
                ds.pop("legacy_sketch_key", None)
            known = {r["release_id"]: r for r in doc["releases"]}
            new = [r for r in (release, *planned) if r.release_id not in known]
            if new and budget is not None:
                self._check_budget(doc, release, new, key, ids, budget)
            found = known.get(release.release_id)
            if found is None:
                doc["releases"].append(release.entry(fp))
            else:
                found["uses"] = int(found.get("uses", 1)) + 1
                found["last_used"] = _now()
            summary = self._summary(doc, release.dataset, key, ids)
            if found is None and summary["overlapping_datasets"]:
                self.warnings.append(
                    f"label DP: dataset {release.dataset} shares sample ids with {len(summary['overlapping_datasets'])} "
                    f"dataset(s) released before (re-exported or overlapping data); their releases are charged to it: "
                    f"total eps {summary['total_eps']} (see {self.ledger_path}). Where sample ids are line numbers (no id "
                    f"column), every file shares them: give the data an id column for exact accounting"
                )
            if found is None and summary["unverifiable_datasets"]:
                self.warnings.append(
                    f"label DP: {len(summary['unverifiable_datasets'])} dataset(s) of the format-2 ledger were sketched "
                    "under a label key this run does not hold, so their overlap with this one cannot be measured: "
                    f"their releases are charged to it (see {self.ledger_path})"
                )
            doc["composition"] = (
                "basic sequential composition over releases; overlapping datasets charged to each other"
            )
            self._write(doc)
            return found is None, summary

    def check_budget(self, release: Release, planned: tuple[Release, ...], budget: float) -> None:
        """Before any id is known (before followers connect): LabelDPBudgetError when the new ones among these
        releases would take the dataset over `budget`, counting its own releases and the overlaps already measured
        for it (a lower bound for a dataset the ledger has not seen: record() checks again with its ids)."""
        with self._locked():
            doc = self.ledger()
        known = {r["release_id"] for r in doc["releases"]}
        new = [r for r in (release, *planned) if r.release_id not in known]
        mine = doc["datasets"].get(release.dataset)
        overlapping = []
        if new and mine is not None and "legacy_sketch_key" not in mine:
            overlapping = [
                o
                for o, d in doc["datasets"].items()
                if o != release.dataset
                and "legacy_sketch_key" not in d
                and estimated_overlap(mine["sketch"], mine["rows"], d["sketch"], d["rows"]) > 0
            ]
        charged = [r for r in doc["releases"] if r.get("dataset") in (release.dataset, *overlapping)]
        total = composed_eps(charged + [r.entry("") for r in new])
        if new and total - budget > 1e-9:
            raise budget_error(release, new, total, budget, len(overlapping), self.ledger_path)

    def _check_budget(self, doc: dict, release: Release, new: list[Release], key, ids, budget: float) -> None:
        trial = {**doc, "releases": doc["releases"] + [r.entry("") for r in new]}
        summary = self._summary(trial, release.dataset, key, ids)
        total = float(summary["total_eps"]) if summary["total_eps"] != "inf" else math.inf
        if total - budget > 1e-9:
            raise budget_error(release, new, total, budget, len(summary["overlapping_datasets"]), self.ledger_path)

    def _overlaps(self, doc: dict, dataset: str, key: bytes | None, ids: np.ndarray | None):
        """(datasets sharing ids with `dataset`, those of them charged because their format-2 sketch cannot be
        compared)."""
        mine = doc["datasets"][dataset]
        overlapping, unverifiable = [], []
        fp = key_fingerprint(key) if key is not None else None
        for other, d in doc["datasets"].items():
            if other == dataset:
                continue
            legacy = d.get("legacy_sketch_key")
            if legacy is None:
                shared = estimated_overlap(mine["sketch"], mine["rows"], d["sketch"], d["rows"]) > 0
            elif legacy == fp and ids is not None:  # sketched under this very key: compare exactly, as format 2 did
                shared = estimated_overlap(id_sketch(key, ids), int(ids.size), d["sketch"], d["rows"]) > 0
            else:
                shared = True
                unverifiable.append(other)
            if shared:
                overlapping.append(other)
        return overlapping, unverifiable

    def _summary(self, doc: dict, dataset: str, key: bytes | None = None, ids: np.ndarray | None = None) -> dict:
        overlapping, unverifiable = self._overlaps(doc, dataset, key, ids)
        charged = [r for r in doc["releases"] if r.get("dataset") in (dataset, *overlapping)]
        return {
            "total_eps": jsonable(composed_eps(charged)),
            "releases": len(charged),
            "overlapping_datasets": overlapping,
            "unverifiable_datasets": unverifiable,
        }

    # -- LP-2ST: the first prior of a stage-two release, kept and reused ------------------------------------------
    def stored_prior(self, release: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(sample ids, prior rows) recorded for the stage-two release, or None; LabelDPStoreError when the ledger
        names a prior file that is missing or altered."""
        with self._locked():
            entry = self.ledger().get("priors", {}).get(release)
            return None if entry is None else load_prior(self.dir, entry)

    def keep_prior(self, release: str, ids: np.ndarray, prior: np.ndarray) -> None:
        """Add the priors of ids not yet stored for the stage-two release (those stored are never replaced)."""
        with self._locked():
            doc = self.ledger()
            priors = doc.setdefault("priors", {})
            old = load_prior(self.dir, priors[release]) if release in priors else None
            priors[release] = save_prior(self.dir, release, ids, prior, old)
            self._write(doc)

    def _write(self, doc: dict) -> None:
        tmp = f"{self.ledger_path}.tmp-{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.ledger_path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise LabelDPStoreError(f"label-DP ledger {self.ledger_path} cannot be written: {e.strerror}") from None


def budget_error(
    release: Release, new: list[Release], total: float, budget: float, overlapping: int, ledger: str
) -> LabelDPBudgetError:
    """The one-line refusal: what would be spent, the total it would reach, the budget, and what to do."""
    what = ", ".join(f"{r.mechanism} eps={r.eps:g}" for r in new)
    return LabelDPBudgetError(
        f"label DP: the new release ({what}) would bring dataset {release.dataset}'s total eps (its most exposed "
        f"sample id, {overlapping} overlapping dataset(s) included) to {total:g}, over privacy.label_dp.budget "
        f"{budget:g}; nothing was drawn or recorded (re-running an earlier release costs nothing; raise the budget "
        f"only knowingly; ledger {ledger})"
    )
