"""The ledger's seal: a write counter and the ledger's digest, MACed under the ledger secret, so a ledger deleted or rolled back is refused.

    <store>/ledger_seal     JSON {format, generation, ledger_sha256, next_sha256, coins, mac}, mode 0600
    <store>/ledger_sealed   a marker, created with the store's first seal and never removed: this store is sealed
    <store>/ledger_secret   its second line `sealed <HMAC(secret, domain)>`, written once the first seal is in place:
                            the secret itself records that it has sealed this store

Every ledger write bumps the generation: the seal first names the digest about to be written (`next_sha256`), then the
ledger is renamed into place, then the seal names it alone (each file fsynced, then renamed over the old one). So a
crash between two steps leaves a ledger the seal still accepts, and any other ledger is refused at open, before
anything is drawn: one that is missing while the seal exists (deleted), or whose digest the seal does not name (an
older copy restored, or edited). A store holding its ledger secret but no seal (the ledger and the seal deleted) is
refused too, and so is a missing seal in a store marked sealed, whatever the ledger's own (unauthenticated)
`generation` field says: removing that field does not pass an edited or older ledger off as one written before
seals. Marked sealed means the `ledger_sealed` marker or the ledger secret's `sealed` line, a tag MACed under the
secret: deleting the marker, the seal and the ledger's `generation` while keeping the secret is refused, and the line
is not struck off without rewriting the secret file itself. A secret without the line (one of a store written before
seals) and no seal is the one case read as a ledger written before seals, and sealed at open. The refusal names the one command that lifts it, `python -m privacy.label ack-reset --store DIR`
(privacy/label/ledger/ledger_reset.py), which records the reset in the ledger and draws a new `coins` nonce: from then on the
store's label key is HMAC(key file, nonce) (`coin_key`), so nothing drawn after a reset reuses the coins of a release
the lost ledger (or its lost label pins) knew of.

The MAC is HMAC-SHA256 under the ledger secret, so the seal is not rewritten by anyone without it; what a seal cannot
see is a copy of the whole store (ledger, seal, secret and pins together) restored from an older backup: that is a
consistent older store (docs/label-dp.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from dataclasses import asdict, dataclass, replace

from privacy.durable_files import fsync_directory, write_bytes
from privacy.label.ledger.secret_files import SEALED_WORD, LabelDPStoreError, check_private, read_secret_record

SEAL_FILE = "ledger_seal"
SEALED_MARK = "ledger_sealed"
SECRET_FILE = "ledger_secret"
SEAL_FORMAT = 1
SEAL_DOMAIN = b"vfl/label-dp/ledger-seal/v1|"
COIN_DOMAIN = b"vfl/label-dp/reset-coins/v1|"
SEALED_DOMAIN = b"vfl/label-dp/secret-sealed/v1"
ACK_COMMAND = "python -m privacy.label ack-reset --store {store}"


@dataclass(frozen=True)
class Seal:
    """What the seal file says: the ledger's generation and digest (None: no ledger written yet), the digest a write
    in progress is about to put there, and the coins nonce of the last acknowledged reset (None: never reset)."""

    generation: int
    ledger_sha256: str | None
    next_sha256: str | None = None
    coins: str | None = None

    def fields(self) -> dict:
        """The seal file's document: its format, then these fields in their order."""
        return {"format": SEAL_FORMAT, **asdict(self)}


@dataclass(frozen=True)
class LedgerState:
    """The ledger on disk as its seal accepts it: its generation, its digest (None: no ledger), the ledger secret that
    seals it (None: a store never sealed) and the coins nonce; `unsealed` marks a ledger written before seals."""

    generation: int
    sha256: str | None
    secret: bytes | None
    coins: str | None = None
    unsealed: bool = False


def ledger_digest(raw: bytes | None) -> str | None:
    return None if raw is None else hashlib.sha256(raw).hexdigest()


def _mac(secret: bytes, fields: dict) -> str:
    return hmac.new(secret, SEAL_DOMAIN + json.dumps(fields, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def coin_key(key: bytes, coins: str | None) -> bytes:
    """The label key the store draws with: the key file's bytes, or after an acknowledged reset HMAC(key, nonce)."""
    if coins is None:
        return key
    return hmac.new(key, COIN_DOMAIN + bytes.fromhex(coins), hashlib.sha256).digest()


def read_seal(path: str, secret: bytes) -> Seal | None:
    """The seal at path (None when there is none); LabelDPStoreError when it is damaged or not MACed by `secret`."""
    if not os.path.exists(path):
        return None
    try:
        check_private(path, "label-DP ledger seal")
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        seal = Seal(doc["generation"], doc["ledger_sha256"], doc["next_sha256"], doc["coins"])
        ok = doc["format"] == SEAL_FORMAT and isinstance(seal.generation, int) and seal.generation >= 0
        ok = ok and hmac.compare_digest(str(doc["mac"]), _mac(secret, seal.fields()))
    except LabelDPStoreError:
        raise
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise LabelDPStoreError(
            f"label-DP ledger seal {path} is damaged or not sealed by this store's ledger secret: the ledger cannot be "
            f"checked against it; restore it with the ledger from a backup, or run `{ACK_COMMAND.format(store=os.path.dirname(path))}`"
        )
    return seal


def mark_sealed(directory: str) -> None:
    """Create the store's `ledger_sealed` marker unless it exists (0600, fsynced, the directory synced): from now on a
    missing seal is refused, whatever the ledger says of itself."""
    path = os.path.join(directory, SEALED_MARK)
    if os.path.exists(path):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as e:
        raise LabelDPStoreError(f"label-DP store marker {path} cannot be written: {e.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write("this label-DP store's ledger is sealed (ledger_seal): a missing seal is refused, never re-created\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_directory(directory)


def write_seal(path: str, secret: bytes, seal: Seal, sync_rename: bool = True) -> None:
    """Write the seal under a new name (0600, fsynced), rename it over the old one and sync the directory (unless
    sync_rename is False: a rename that may be lost in a crash, where the seal it replaces is as good); then the
    ledger secret beside it records that it sealed (`record_sealed`)."""
    mark_sealed(os.path.dirname(path))
    fields = seal.fields()
    data = json.dumps({**fields, "mac": _mac(secret, fields)}, indent=1).encode() + b"\n"
    replace_private_file(path, data, "label-DP ledger seal", sync_rename)
    record_sealed(os.path.join(os.path.dirname(path), SECRET_FILE), secret)


def sealed_tag(secret: bytes) -> str:
    """The tag of a ledger secret's `sealed` line: HMAC-SHA256(secret, SEALED_DOMAIN), which only the secret makes."""
    return hmac.new(secret, SEALED_DOMAIN, hashlib.sha256).hexdigest()


def secret_has_sealed(path: str, secret: bytes) -> bool:
    """Whether the ledger secret at path carries its `sealed` line; LabelDPStoreError for a line whose tag this
    secret did not make (a line copied from another store's secret)."""
    _, tag = read_secret_record(path, "label-DP ledger secret", "restore it from a backup")
    if tag is not None and not hmac.compare_digest(tag, sealed_tag(secret)):
        raise LabelDPStoreError(
            f"label-DP ledger secret {path}: its `{SEALED_WORD}` line was not made by this secret; it is damaged "
            "(restore it from a backup)"
        )
    return tag is not None


def record_sealed(path: str, secret: bytes) -> None:
    """Give the ledger secret at path its `sealed` line unless it has one (rewritten whole: 0600, fsynced, renamed,
    the directory synced), called once a seal is in place: from then on this secret refuses a ledger with no seal."""
    if os.path.exists(path) and not secret_has_sealed(path, secret):
        data = f"{secret.hex()}\n{SEALED_WORD} {sealed_tag(secret)}\n".encode()
        replace_private_file(path, data, "label-DP ledger secret")


def replace_private_file(path: str, data: bytes, what: str, sync_rename: bool = True) -> None:
    """Replace `path` durably by `data` (privacy/durable_files.py: mode 0600, fsynced, renamed, the directory synced
    unless sync_rename is False); a failure is one LabelDPStoreError naming `what` and leaves `path` as it was."""
    try:
        write_bytes(path, data, mode=0o600, sync_directory=sync_rename)
    except OSError as e:
        raise LabelDPStoreError(f"{what} {path} cannot be written: {e.strerror}") from None


def _refused(store, what: str) -> LabelDPStoreError:
    return LabelDPStoreError(
        f"label-DP ledger {store.ledger_path} {what}: what these labels have spent is unknown, and drawing now could "
        "pass the budget or reuse coins on changed labels. Restore the ledger (with label_pins/, id_hashes/ and "
        f"priors/) from a backup, or acknowledge the loss with `{ACK_COMMAND.format(store=store.dir)}` (the lost "
        "spend is then not counted; new releases draw new coins)"
    )


def checked_state(store, raw: bytes | None, generation: int | None) -> LedgerState:
    """The ledger bytes `raw` (None: no ledger file) with its own `generation` field (None: written before seals)
    as the store's seal accepts them; LabelDPStoreError (naming ack-reset) when the ledger was deleted or rolled back,
    the seal was deleted or damaged, or the ledger secret that MACs the seal is missing. `store` gives the paths
    (dir, ledger_path, secret_path, seal_path)."""
    sha = ledger_digest(raw)
    has_secret = os.path.exists(store.secret_path)
    marker = os.path.join(store.dir, SEALED_MARK)
    marked = os.path.exists(marker)  # outside the ledger: the ledger's own fields cannot vouch for themselves
    if not has_secret:
        if os.path.exists(store.seal_path):
            raise LabelDPStoreError(
                f"label-DP ledger secret {store.secret_path} is missing but the ledger is sealed by it "
                f"({store.seal_path}); restore it from a backup: the seal and the ledger's id sketches are keyed by it"
            )
        if generation is not None:
            raise _refused(store, f"was sealed but its seal {store.seal_path} and ledger secret are missing")
        if marked:
            raise _refused(
                store,
                f"{'' if raw else 'is missing and '}has no seal nor ledger secret in a store sealed before ({marker})",
            )
        return LedgerState(0, sha, None)  # a new store, or one whose ledger was written before seals
    secret, _ = read_secret_record(store.secret_path, "label-DP ledger secret", "restore it from a backup")
    seal = read_seal(store.seal_path, secret)
    if seal is None:
        if raw is None:
            raise _refused(
                store, f"and its seal {store.seal_path} are missing while the ledger secret {store.secret_path} exists"
            )
        if generation is not None:
            raise _refused(store, f"was sealed but its seal {store.seal_path} is missing")
        if marked:
            raise _refused(store, f"has no seal ({store.seal_path} is missing) in a store sealed before ({marker})")
        if secret_has_sealed(store.secret_path, secret):
            raise _refused(
                store,
                f"has no seal ({store.seal_path} is missing) in a store sealed before (its ledger secret "
                f"{store.secret_path} records a seal)",
            )
        return LedgerState(0, sha, secret, unsealed=True)
    mark_sealed(store.dir)  # a store sealed before the marker existed is marked the first time its seal is accepted
    record_sealed(store.secret_path, secret)  # and its secret records it, as the marker does
    if sha == seal.ledger_sha256:
        return LedgerState(seal.generation, sha, secret, seal.coins)
    if sha is not None and sha == seal.next_sha256:  # a write stopped after the ledger, before its seal
        return LedgerState(seal.generation + 1, sha, secret, seal.coins)
    if raw is None:
        raise _refused(store, f"is missing but its seal {store.seal_path} records it (write {seal.generation})")
    if generation is not None and generation < seal.generation:
        raise _refused(store, f"is an older copy (write {generation} of the {seal.generation} its seal records)")
    raise _refused(store, f"is not the one its seal records (write {seal.generation}): it was altered or replaced")


def opening_warnings(store, doc: dict, state: LedgerState) -> list[str]:
    """What a store opened with an accepted ledger warns of: a key left alone by a deleted store (no ledger, seal or
    secret beside it), and every acknowledged reset (its totals leave out what was lost)."""
    out = []
    if state.secret is None and state.sha256 is None and os.path.exists(store.key_path) and not store.created:
        out.append(
            f"label DP: store {store.dir} has a key but no ledger, seal or ledger secret: it starts a new ledger; "
            "releases drawn under this key in a store since deleted are not counted"
        )
    resets = doc.get("resets") or []
    if resets:
        out.append(
            f"label DP: the ledger of {store.dir} was reset {len(resets)} time(s) (last on "
            f"{str(resets[-1].get('at', '?'))[:10]}, acknowledged with ack-reset): its totals do not count the "
            "releases lost then"
        )
    return out


def seal_unsealed(store, state: LedgerState) -> LedgerState:
    """Seal a ledger written before seals (called at open under the lock): from now on it is checked."""
    write_seal(store.seal_path, state.secret, Seal(state.generation, state.sha256, None, state.coins))
    return replace(state, unsealed=False)


def sealed_write(store, state: LedgerState, secret: bytes, data: bytes, put_ledger) -> None:
    """Replace the ledger (state: as checked under the same lock) by `data` with `put_ledger(data)`, the seal naming
    the new digest first as the next one and then alone (a crash between leaves a ledger the seal accepts, so a
    failure of that last step is no failure of the write: the next write seals on from the announced digest)."""
    new = ledger_digest(data)
    write_seal(store.seal_path, secret, Seal(state.generation, state.sha256, new, state.coins))
    put_ledger(data)
    with contextlib.suppress(LabelDPStoreError):  # the ledger is in place and the seal accepts it as announced
        # (this rename lost in a crash leaves the announcing seal, which accepts the new ledger: no directory sync)
        write_seal(store.seal_path, secret, Seal(state.generation + 1, new, None, state.coins), sync_rename=False)
