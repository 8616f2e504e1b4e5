"""The label-DP ledger on disk: its files, read under the store's lock against its seal, and written sealed.

`LedgerFiles` is the part of `LabelDPStore` (privacy/label/ledger/store.py) that touches the ledger's files: the lock, the
ledger document (parsed, checked against its seal by privacy/label/ledger/ledger_seal.py, older formats migrated), the ledger
secret that keys its id sets (created with the first set, never replaced), and every write (sealed; a dataset's id set
written before the ledger that names it). What the ledger's contents mean (budgets, overlaps, releases) is the store's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

import numpy as np

from privacy.label.ledger.id_store import remove_replaced, save_id_hashes
from privacy.label.ledger.ledger_math import SKETCH_K, migrate, sketch_hex
from privacy.label.ledger.ledger_seal import (
    SECRET_FILE,
    Seal,
    checked_state,
    ledger_digest,
    replace_private_file,
    seal_unsealed,
    sealed_write,
    write_seal,
)
from privacy.label.ledger.release_names import key_fingerprint
from privacy.label.ledger.secret_files import LabelDPStoreError, create_secret, read_secret

LEDGER_FORMAT = 4
MIGRATED_FORMATS = (2, 3)  # read and upgraded in place (privacy/label/ledger/store.py's docstring)
SECRET_WHAT = "label-DP ledger secret"
SECRET_DAMAGED = "restore it from a backup: the ledger's id sketches are keyed by it"


class LedgerFiles:
    """The store's lock, ledger, ledger secret and seal under `root`, and the label key's path."""

    def __init__(self, root: str, key_file: str | None = None):
        self.dir = os.path.abspath(root)
        self.key_path = os.path.abspath(key_file) if key_file else os.path.join(self.dir, "key")
        self.ledger_path = os.path.join(self.dir, "ledger.json")
        self.secret_path = os.path.join(self.dir, SECRET_FILE)
        self.seal_path = os.path.join(self.dir, "ledger_seal")
        self._state = None  # the ledger's LedgerState under its seal, as last read under the lock

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

    def _write(self, doc: dict) -> None:
        """Write the ledger under the lock, sealed: its write count goes up by one (privacy/label/ledger/ledger_seal.py)."""
        secret = self._secret(doc)
        _, state = self._read_checked()  # the ledger on disk, as this lock holder read it
        doc["generation"] = state.generation + 1
        sealed_write(self, state, secret, (json.dumps(doc, indent=1) + "\n").encode(), self._put)

    def _put(self, data: bytes) -> None:
        replace_private_file(self.ledger_path, data, "label-DP ledger")
