"""The leader's secret files (label key, ledger secret): 32 random bytes as hex, mode 0600, owned by the leader.

A ledger secret that has sealed its ledger carries a second line, `sealed <tag>` (privacy/label/ledger/ledger_seal.py):
`read_secret_record` returns it beside the key; `read_secret` accepts it and returns the key alone.

Both are created once with O_EXCL (a concurrent creator's file is read instead, never overwritten) and read back
only when private to their owner; a store directory is refused when others can enter it or rename it away.
"""

from __future__ import annotations

import os
import secrets
import stat

from privacy.keyed_random import KEY_BYTES


class LabelDPStoreError(ValueError):
    """The key or ledger cannot be used safely; the message says which file and how to fix it."""


SEALED_WORD = "sealed"  # the line a ledger secret that sealed its ledger carries (ledger_seal.py)
KEY_DAMAGED = "restore it from a backup; a new key is a new release that adds to the ledger"


def check_private(path: str, what: str) -> os.stat_result:
    """The file's stat when it belongs to this user and nobody else can read or enter it; LabelDPStoreError else."""
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


def check_ancestors(path: str) -> None:
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


def read_secret(path: str, what: str = "label-DP key file", damaged: str = KEY_DAMAGED) -> bytes:
    """The 32 bytes of a hex file that only its owner can read; LabelDPStoreError otherwise."""
    return read_secret_record(path, what, damaged)[0]


def read_secret_record(
    path: str, what: str = "label-DP key file", damaged: str = KEY_DAMAGED
) -> tuple[bytes, str | None]:
    """(the 32 bytes of a hex file that only its owner can read, the hex tag of its `sealed <tag>` line or None);
    LabelDPStoreError for a file that is not private, not 64 hex digits, or has any other line."""
    try:
        check_private(path, what)
        with open(path) as f:
            lines = f.read().split()
    except OSError as e:
        raise LabelDPStoreError(f"{what} {path} cannot be read: {e.strerror}") from None
    except UnicodeDecodeError:
        lines = []
    try:
        key = bytes.fromhex(lines[0]) if lines else b""
    except ValueError:
        key = b""
    tag = lines[2] if len(lines) == 3 and lines[1] == SEALED_WORD else None
    if len(key) != KEY_BYTES or (len(lines) != 1 and tag is None):
        raise LabelDPStoreError(
            f"{what} {path} must hold {KEY_BYTES} bytes as {2 * KEY_BYTES} hex digits; it is damaged ({damaged})"
        )
    return key, tag


def create_secret(path: str, what: str = "label-DP key file", damaged: str = KEY_DAMAGED) -> bytes:
    """Fresh 256 bits from `secrets`, written with mode 0600; an existing file (another run won the race) is read
    instead, never overwritten."""
    key = secrets.token_bytes(KEY_BYTES)
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_secret(path, what, damaged)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def read_key(path: str) -> bytes:
    """The leader's 32-byte label key (privacy.label_dp.key_file or <store>/key)."""
    return read_secret(path)


def create_key(path: str) -> bytes:
    """A new label key at path (0600), or the one a concurrent run just wrote."""
    return create_secret(path)
