"""The label-DP store's id, prior and pin files are fsynced and their directory synced after the rename: the ledger
names them, so a power loss must not leave a ledger that names a file the disk lost."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from privacy.label.ledger.id_store import save_id_hashes
from privacy.label.ledger.label_pins import save_pins
from privacy.label.ledger.prior_store import save_prior


def _write(kind: str, store: str) -> str:
    """Write one file of `kind` into the store; its path."""
    if kind == "ids":
        return os.path.join(store, save_id_hashes(store, "d1", np.arange(5, dtype=np.uint64))["file"])
    if kind == "prior":
        return os.path.join(store, save_prior(store, "r1", np.arange(3), np.full((3, 2), 0.5))["file"])
    save_pins(store, "r1", np.stack([np.arange(4, dtype=np.uint64), np.arange(4, dtype=np.uint64)], axis=1))
    (path,) = [os.path.join(d, f) for d, _, fs in os.walk(store) for f in fs]
    return path


@pytest.mark.parametrize("kind", ["ids", "prior", "pins"])
def test_a_store_file_is_fsynced_then_renamed_then_its_directory_synced(tmp_path, monkeypatch, kind):
    # Prepare: every fsync (inode, directory or not) and rename, in order
    calls, real_fsync, real_replace = [], os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        calls.append(("fsync", st.st_ino, stat.S_ISDIR(st.st_mode)))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace",)), real_replace(a, b))[1])
    # Execute
    path = _write(kind, str(tmp_path / "store"))
    # Assert: the file's data, the rename, then the directory that holds it
    assert calls == [
        ("fsync", os.stat(path).st_ino, False),
        ("replace",),
        ("fsync", os.stat(os.path.dirname(path)).st_ino, True),
    ]
