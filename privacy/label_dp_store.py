"""The leader's per-dataset label-DP state: the secret PRF key and the ledger of releases.

One labelled dataset (identified by the digest of its labelled source) has one directory:

    <store>/<dataset_id>/key          32 random bytes as hex, mode 0600 (or privacy.label_dp.key_file)
    <store>/<dataset_id>/ledger.json  every release ever drawn from this dataset, with its eps

The store lives outside any shard directory, so re-preparing the data (`prepare --force`) never
touches it. A release is the noisy labels of the dataset under one mechanism and parameter set and
one key; its id is a digest of all of them. The same parameters reproduce the same release (the PRF
is deterministic) and cost nothing more; any change is a new release, drawn independently, and the
ledger adds its eps (basic sequential composition, Dwork & Roth 2014, Theorem 3.16).
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

from privacy.keyed_random import KEY_BYTES

LEDGER_FORMAT = 1
STORE_ENV = "VFL_LABEL_DP_STORE"


class LabelDPStoreError(ValueError):
    """The key or ledger cannot be used safely; the message says which file and how to fix it."""


def default_store_dir() -> str:
    """$VFL_LABEL_DP_STORE, else $XDG_DATA_HOME/vfl/label_dp, else ~/.local/share/vfl/label_dp."""
    if os.environ.get(STORE_ENV):
        return os.environ[STORE_ENV]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "vfl", "label_dp")


def dataset_id(source_sha256: str) -> str:
    """The identity of a labelled dataset: a digest of its labelled source file's sha256."""
    if not isinstance(source_sha256, str) or len(source_sha256) != 64:
        raise LabelDPStoreError(f"the labelled source's sha256 must be 64 hex digits, got {source_sha256!r} "
                                "(re-run `python -m vfl.data prepare`: older manifests lack source.sha256)")
    return hashlib.sha256(b"vfl/labelled-dataset/v1|" + source_sha256.encode()).hexdigest()[:32]


def key_fingerprint(key: bytes) -> str:
    """A public name of a key (it reveals nothing about the key's bits)."""
    return hashlib.sha256(b"vfl/label-dp/key-fingerprint/v1|" + key).hexdigest()[:16]


def release_id(dataset: str, fingerprint: str, mechanism: str, params: dict) -> str:
    """Digest of everything that defines a release: dataset, key, mechanism and its parameters."""
    doc = {"dataset": dataset, "key": fingerprint, "mechanism": mechanism,
           "params": {k: _jsonable(v) for k, v in sorted(params.items())}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def _jsonable(v):
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _check_private(path: str, what: str) -> os.stat_result:
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise LabelDPStoreError(f"{what} {path} is owned by uid {st.st_uid}, not by this user ({os.getuid()}); "
                                "the leader's secret must belong to the leader's account")
    if st.st_mode & 0o077:
        raise LabelDPStoreError(f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be readable by its "
                                f"owner only (chmod 600 {path})")
    return st


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
        raise LabelDPStoreError(f"label-DP key file {path} must hold {KEY_BYTES} bytes as {2 * KEY_BYTES} hex digits; "
                                "it is damaged (restore it from a backup; a new key is a new release that adds to the ledger)")
    return key


def create_key(path: str) -> bytes:
    """A fresh 256-bit key from `secrets`, written with mode 0600; never overwrites an existing file."""
    key = secrets.token_bytes(KEY_BYTES)
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


@dataclass(frozen=True)
class Release:
    """One randomization of a labelled dataset, as the ledger records it."""

    release_id: str
    mechanism: str
    eps: float
    params: dict
    key_fingerprint: str
    rows: int


class LabelDPStore:
    """Key and ledger of one labelled dataset; every change happens under an exclusive file lock."""

    def __init__(self, root: str, dataset: str, key_file: str | None = None):
        self.dir = os.path.join(os.path.abspath(root), dataset)
        self.dataset = dataset
        self.key_path = os.path.abspath(key_file) if key_file else os.path.join(self.dir, "key")
        self.ledger_path = os.path.join(self.dir, "ledger.json")
        self.warnings: list[str] = []
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
        except OSError as e:
            raise LabelDPStoreError(f"label-DP store {self.dir} cannot be created: {e.strerror} "
                                    "(set privacy.label_dp.store_dir to a writable directory)") from None
        _check_private(self.dir, "label-DP store directory")

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def ledger(self) -> dict:
        """The ledger document ({format, dataset, releases: [...]}); empty when none was written yet."""
        if not os.path.exists(self.ledger_path):
            return {"format": LEDGER_FORMAT, "dataset": self.dataset, "releases": []}
        try:
            with open(self.ledger_path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise LabelDPStoreError(f"label-DP ledger {self.ledger_path} cannot be read ({e}); it is the only record of "
                                    "what this dataset has spent: restore it rather than delete it") from None
        if not isinstance(doc, dict) or doc.get("dataset") != self.dataset or not isinstance(doc.get("releases"), list):
            raise LabelDPStoreError(f"label-DP ledger {self.ledger_path} does not belong to dataset {self.dataset}")
        return doc

    def key(self) -> bytes:
        """The dataset's key, created on first use. A new key where the ledger already has releases is
        a new, independent release of the same labels: warned about, and counted by the ledger."""
        with self._locked():
            if os.path.exists(self.key_path):
                return read_key(self.key_path)
            key = create_key(self.key_path)
            old = {r["key_fingerprint"] for r in self.ledger()["releases"]}
            if old:
                self.warnings.append(
                    f"label DP: created a new key {key_fingerprint(key)} for dataset {self.dataset}, which already has "
                    f"releases under {len(old)} other key(s); the next release is independent of them and adds its eps "
                    f"to the dataset's total (see {self.ledger_path})")
            return key

    def record(self, release: Release) -> tuple[bool, dict]:
        """Add the release to the ledger unless it is there; (is_new, ledger) with the new total."""
        with self._locked():
            doc = self.ledger()
            found = next((r for r in doc["releases"] if r["release_id"] == release.release_id), None)
            if found is None:
                doc["releases"].append({"release_id": release.release_id, "mechanism": release.mechanism,
                                        "eps": _jsonable(release.eps), "params": {k: _jsonable(v) for k, v in release.params.items()},
                                        "key_fingerprint": release.key_fingerprint, "rows": release.rows,
                                        "created": _now(), "uses": 1})
            else:
                found["uses"] = int(found.get("uses", 1)) + 1
                found["last_used"] = _now()
            doc["total_eps"] = _jsonable(total_eps(doc))
            doc["composition"] = "basic sequential composition over releases (each release is eps-label-DP)"
            tmp = f"{self.ledger_path}.tmp-{os.getpid()}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    json.dump(doc, f, indent=2)
                    f.write("\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.ledger_path)
            except OSError as e:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
                raise LabelDPStoreError(f"label-DP ledger {self.ledger_path} cannot be written: {e.strerror}") from None
            return found is None, doc


def total_eps(ledger: dict) -> float:
    """Sum of eps over the ledger's releases (inf if any release was noise-free)."""
    total = 0.0
    for r in ledger["releases"]:
        e = r["eps"]
        total += math.inf if e == "inf" else float(e)
    return total
