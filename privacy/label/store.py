"""The leader's label-DP state: one secret PRF key and one ledger of every release it has drawn.

    <store>/key          32 random bytes as hex, mode 0600 (or privacy.label_dp.key_file)
    <store>/ledger.json  every labelled dataset the key has randomized and every release, with its eps

The store lives outside any shard directory, so re-preparing the data (`prepare --force`) never
touches it, and one key serves every dataset of the leader. A release is the noisy labels of one
dataset under one mechanism and parameter set and this key; its id (a digest of all of them) is in
the PRF input. The same parameters reproduce the same release and cost nothing more; any change is a
new release, drawn independently, and the ledger adds its eps (basic sequential composition, Dwork &
Roth 2014, Theorem 3.16).

Datasets are named by their source, which a re-export or one appended row changes. So the ledger
also keeps a bottom-k sketch of each dataset's sample ids (k = 4096 smallest keyed hashes; Broder
1997, "On the resemblance and containment of documents") and charges every release of an overlapping
dataset to a new one: the total it reports is that of the most exposed sample id, not of one file.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import math
import os
import secrets
import stat
from dataclasses import dataclass

import numpy as np

from privacy.label.keyed_random import KEY_BYTES, keyed_words

LEDGER_FORMAT = 2
STORE_ENV = "VFL_LABEL_DP_STORE"
SKETCH_K = 4096
STAGE_ONE = "lp2st_stage_one"  # the mechanism name of LP-2ST's stage-one release in the ledger


class LabelDPStoreError(ValueError):
    """The key or ledger cannot be used safely; the message says which file and how to fix it."""


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
        "params": {k: _jsonable(v) for k, v in sorted(params.items())},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def id_sketch(key: bytes, ids: np.ndarray) -> str:
    """The k smallest keyed 64-bit hashes of the sample ids (all of them when fewer than k), as hex."""
    h = np.unique(keyed_words(key, "ledger", "id-sketch", np.asarray(ids, dtype=np.int64)))
    return "".join(f"{int(x):016x}" for x in h[:SKETCH_K])


def _sketch_set(sketch: str) -> set[int]:
    return {int(sketch[i : i + 16], 16) for i in range(0, len(sketch), 16)}


def estimated_overlap(a: str, n_a: int, b: str, n_b: int) -> float:
    """Estimated number of ids two datasets share, from their bottom-k sketches (exact below k ids)."""
    sa, sb = _sketch_set(a), _sketch_set(b)
    union = sorted(sa | sb)[:SKETCH_K]
    if not union:
        return 0.0
    both = sum(1 for h in union if h in sa and h in sb)
    if both == 0:
        return 0.0
    if n_a <= SKETCH_K and n_b <= SKETCH_K:
        return float(len(sa & sb))
    j = both / len(union)
    return j / (1.0 + j) * (n_a + n_b)


def _jsonable(v):
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def _eps(v) -> float:
    return math.inf if v == "inf" else float(v)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _check_private(path: str, what: str) -> os.stat_result:
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise LabelDPStoreError(
            f"{what} {path} is owned by uid {st.st_uid}, not by this user ({os.getuid()}); "
            "the leader's secret must belong to the leader's account"
        )
    if st.st_mode & 0o077:
        raise LabelDPStoreError(
            f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be readable by its "
            f"owner only (chmod {'700' if stat.S_ISDIR(st.st_mode) else '600'} {path})"
        )
    return st


def _check_ancestors(path: str) -> None:
    """Like ssh's StrictModes: nobody but this user or root may rename the store away (a world-writable
    ancestor is accepted only with the sticky bit, where others cannot rename our entries)."""
    cur = os.path.dirname(os.path.abspath(path))
    while True:
        st = os.stat(cur)
        if st.st_uid not in (0, os.getuid()) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            raise LabelDPStoreError(
                f"label-DP store {path}: its parent directory {cur} can be modified by other users "
                f"(owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}); they could replace "
                "the key or the ledger: put the store in a directory only you control"
            )
        parent = os.path.dirname(cur)
        if parent == cur:
            return
        cur = parent


def read_key(path: str) -> bytes:
    """The 32-byte key from a hex file that only its owner can read; LabelDPStoreError otherwise."""
    try:
        _check_private(path, "label-DP key file")
        with open(path) as f:
            text = f.read().strip()
    except OSError as e:
        raise LabelDPStoreError(f"label-DP key file {path} cannot be read: {e.strerror}") from None
    except UnicodeDecodeError:
        text = ""
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise LabelDPStoreError(
            f"label-DP key file {path} must hold {KEY_BYTES} bytes as {2 * KEY_BYTES} hex digits; "
            "it is damaged (restore it from a backup; a new key is a new release that adds to the ledger)"
        )
    return key


def create_key(path: str) -> bytes:
    """A fresh 256-bit key from `secrets`, written with mode 0600; an existing file (another run won the
    race) is read instead, never overwritten."""
    key = secrets.token_bytes(KEY_BYTES)
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_key(path)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def composed_eps(releases: list[dict]) -> float:
    """The eps of ledger releases by basic composition (Dwork & Roth 2014, Thm. 3.16), except within one LP-2ST run:
    its stage one (mechanism STAGE_ONE) and the stage-two releases naming it in params.stage_one_release randomize
    disjoint rows, so the group costs the larger of the two sides (parallel composition; Ghazi et al. 2021, Alg. 3
    is eps-label-DP as a whole), and each further stage-two release (a new prior) adds its eps."""
    groups: dict[str, list[float]] = {}
    for r in releases:
        params = r.get("params") if isinstance(r.get("params"), dict) else {}
        group = params.get("stage_one_release") or r["release_id"]
        side = groups.setdefault(str(group), [0.0, 0.0])
        side[0 if r.get("mechanism") == STAGE_ONE else 1] += _eps(r["eps"])
    return sum(max(stage_one, rest) for stage_one, rest in groups.values())


@dataclass(frozen=True)
class Release:
    """One randomization of a labelled dataset, as the ledger records it."""

    release_id: str
    dataset: str
    mechanism: str
    eps: float
    params: dict
    rows: int


class LabelDPStore:
    """The leader's key and ledger; every change happens under an exclusive file lock."""

    def __init__(self, root: str, key_file: str | None = None):
        self.dir = os.path.abspath(root)
        self.key_path = os.path.abspath(key_file) if key_file else os.path.join(self.dir, "key")
        self.ledger_path = os.path.join(self.dir, "ledger.json")
        self.warnings: list[str] = []
        self.created = not os.path.exists(self.dir)
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
        except OSError as e:
            raise LabelDPStoreError(
                f"label-DP store {self.dir} cannot be created: {e.strerror} "
                "(set privacy.label_dp.store_dir to a writable directory)"
            ) from None
        _check_private(self.dir, "label-DP store directory")
        _check_ancestors(self.dir)
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
            or doc.get("format") != LEDGER_FORMAT
            or not isinstance(doc.get("releases"), list)
            or not isinstance(doc.get("datasets"), dict)
        ):
            raise LabelDPStoreError(f"label-DP ledger {self.ledger_path} is not a format-{LEDGER_FORMAT} ledger")
        return doc

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

    def record(self, release: Release, key: bytes, ids: np.ndarray, source: dict | None = None) -> tuple[bool, dict]:
        """Add the release (and its dataset) to the ledger unless it is there.
        Returns (is_new, summary) with the dataset's total eps, overlaps counted."""
        fp = key_fingerprint(key)
        with self._locked():
            doc = self.ledger()
            ds = doc["datasets"].get(release.dataset)
            if ds is None:
                ds = doc["datasets"][release.dataset] = {
                    "rows": int(np.asarray(ids).size),
                    "first_seen": _now(),
                    "source": source or {},
                    "sketch": id_sketch(key, ids),
                }
            found = next((r for r in doc["releases"] if r["release_id"] == release.release_id), None)
            if found is None:
                doc["releases"].append(
                    {
                        "release_id": release.release_id,
                        "dataset": release.dataset,
                        "mechanism": release.mechanism,
                        "eps": _jsonable(release.eps),
                        "params": {k: _jsonable(v) for k, v in release.params.items()},
                        "key_fingerprint": fp,
                        "rows": release.rows,
                        "created": _now(),
                        "uses": 1,
                    }
                )
            else:
                found["uses"] = int(found.get("uses", 1)) + 1
                found["last_used"] = _now()
            summary = self._summary(doc, release.dataset)
            if found is None and summary["overlapping_datasets"]:
                self.warnings.append(
                    f"label DP: dataset {release.dataset} shares sample ids with {len(summary['overlapping_datasets'])} "
                    f"dataset(s) released before (re-exported or overlapping data); their releases are charged to it: "
                    f"total eps {summary['total_eps']} (see {self.ledger_path}). Where sample ids are line numbers (no id "
                    f"column), every file shares them: give the data an id column for exact accounting"
                )
            doc["composition"] = (
                "basic sequential composition over releases; overlapping datasets charged to each other"
            )
            self._write(doc)
            return found is None, summary

    def _summary(self, doc: dict, dataset: str) -> dict:
        mine = doc["datasets"][dataset]
        overlapping: list[str] = []
        for other, d in doc["datasets"].items():
            if other != dataset and estimated_overlap(mine["sketch"], mine["rows"], d["sketch"], d["rows"]) > 0:
                overlapping.append(other)
        charged = [r for r in doc["releases"] if r.get("dataset") in (dataset, *overlapping)]
        return {
            "total_eps": _jsonable(composed_eps(charged)),
            "releases": len(charged),
            "overlapping_datasets": overlapping,
        }

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
