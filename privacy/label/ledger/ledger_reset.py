"""Acknowledging a lost or rolled-back label-DP ledger: the reset recorded in a new ledger, and new coins from then on.

A store whose ledger its seal does not accept (privacy/label/ledger/ledger_seal.py) refuses to draw. The user who cannot
restore the ledger from a backup runs `python -m privacy.label ack-reset --store DIR`, which, under the store's lock:

* keeps what the ledger on disk still says (a rolled-back ledger's releases are a lower bound of the spend) or starts
  an empty one, and appends to its `resets` an entry saying when, what was found and that the lost spend is unknown
  (the user takes responsibility for it); an unreadable ledger is kept aside as ledger.json.unreadable-<time>;
* draws a new 256-bit coins nonce, kept in the seal: from then on the store's label key is HMAC(key file, nonce), so
  every release after the reset is another release with independent coins, whatever the lost ledger or its lost
  label pins knew (a replay of a lost release is charged as new, and its coins never meet a changed label);
* writes the ledger, then a fresh seal over it (a crash between leaves the store refused: run it again).

A ledger secret that is missing too is created anew, and every dataset the kept ledger holds is then marked partial
(its ids were hashed under the lost secret): charged to every other dataset (over-counts, never under-counts).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import secrets

from privacy.label.ledger.ledger_io import LEDGER_FORMAT, MIGRATED_FORMATS, SECRET_DAMAGED, SECRET_WHAT
from privacy.label.ledger.ledger_math import migrate
from privacy.label.ledger.ledger_seal import Seal, ledger_digest, read_seal, write_seal
from privacy.label.ledger.release_names import key_fingerprint
from privacy.label.ledger.secret_files import LabelDPStoreError, create_secret, read_secret
from privacy.label.ledger.store import LabelDPStore

LOST_SPEND = (
    "unknown: releases drawn before this reset and lost with the ledger are not counted; the user took responsibility"
)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _kept_ledger(store: LabelDPStore, raw: bytes | None, stamp: str) -> tuple[dict, str | None]:
    """(what the ledger on disk still says, or an empty ledger; where an unreadable one was moved, or None)."""
    empty = {"format": LEDGER_FORMAT, "datasets": {}, "releases": []}
    if raw is None:
        return empty, None
    try:
        doc = store._parse(raw)
    except LabelDPStoreError:
        aside = f"{store.ledger_path}.unreadable-{stamp}"
        os.replace(store.ledger_path, aside)
        return empty, aside
    if doc["format"] in MIGRATED_FORMATS:
        doc = migrate(doc, doc["format"])
        doc["format"] = LEDGER_FORMAT
    return doc, None


def _secret(store: LabelDPStore, doc: dict) -> bytes:
    """The store's ledger secret, or a new one; a new one marks every kept dataset partial (its id set is lost)."""
    if os.path.exists(store.secret_path):
        secret = read_secret(store.secret_path, SECRET_WHAT, SECRET_DAMAGED)
    else:
        secret = create_secret(store.secret_path, SECRET_WHAT, SECRET_DAMAGED)
    fp = key_fingerprint(secret)
    if doc.get("ledger_secret", fp) != fp:
        for ds in doc["datasets"].values():
            ds["partial"] = f"its ids were hashed under a ledger secret lost before the reset of {_now()}"
    doc["ledger_secret"] = fp
    return secret


def acknowledge_reset(store_dir: str) -> dict:
    """Record the loss of the store's ledger (as its seal found it) and rotate its coins; LabelDPStoreError when the
    ledger matches its seal (nothing to acknowledge). Returns what was done: {store, found, releases_kept,
    coins_fingerprint, ledger_kept_aside}."""
    if not os.path.isdir(store_dir):
        raise LabelDPStoreError(f"there is no label-DP store at {store_dir} (give privacy.label_dp.store_dir)")
    store = LabelDPStore(store_dir, _check_at_open=False)
    with store.locked():
        try:
            store.ledger()
        except LabelDPStoreError as e:
            found = str(e)
        else:
            raise LabelDPStoreError(
                f"label-DP store {store.dir}: its ledger is the one its seal records; there is no reset to acknowledge"
            )
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        doc, aside = _kept_ledger(store, store._read_raw(), stamp)
        secret = _secret(store, doc)
        try:
            old = read_seal(store.seal_path, secret)
        except LabelDPStoreError:
            old = None
        generation = max(old.generation if old else 0, int(doc.get("generation") or 0)) + 1
        coins = secrets.token_hex(32)
        coins_fp = hashlib.sha256(b"vfl/label-dp/reset-coins-fingerprint/v1|" + bytes.fromhex(coins)).hexdigest()[:16]
        doc.setdefault("resets", []).append(
            {
                "at": _now(),
                "found": found,
                "releases_kept": len(doc["releases"]),
                "lost_spend": LOST_SPEND,
                "coins_fingerprint": coins_fp,
            }
        )
        doc["generation"] = generation
        data = (json.dumps(doc, indent=1) + "\n").encode()
        store._put(data)
        write_seal(store.seal_path, secret, Seal(generation, ledger_digest(data), None, coins))
    return {
        "store": store.dir,
        "found": found,
        "releases_kept": len(doc["releases"]),
        "coins_fingerprint": coins_fp,
        "ledger_kept_aside": aside,
    }
