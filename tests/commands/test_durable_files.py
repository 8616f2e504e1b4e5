"""The durable write (privacy/durable_files.py): the file is fsynced before its rename and the directory after, the
temporary file lies beside the target, a failure leaves the old file and no temporary file, and the file digest."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat

import numpy as np
import pytest

from privacy import durable_files
from privacy.durable_files import (
    PendingFile,
    file_sha256,
    replacing,
    replacing_file,
    sync_tree,
    write_bytes,
    write_json,
)


@pytest.fixture
def syncs(monkeypatch):
    """Every os.fsync and os.replace, in order: ("fsync", inode, is a directory) and ("replace", src, dst)."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        calls.append(("fsync", st.st_ino, stat.S_ISDIR(st.st_mode)))
        return real_fsync(fd)

    def replace(src, dst):
        calls.append(("replace", os.fspath(src), os.fspath(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return calls


@pytest.mark.parametrize("how", ["bytes", "file", "path", "pending"])
def test_the_file_is_fsynced_before_its_rename_beside_it_and_the_directory_after(tmp_path, syncs, how):
    # Prepare: an old file under the final name
    path = tmp_path / "out.npy"
    path.write_bytes(b"old")
    data = np.arange(5)
    # Execute: each way of writing
    if how == "bytes":
        write_bytes(str(path), b"new")
    elif how == "file":
        with replacing_file(str(path)) as f:
            np.save(f, data)
    elif how == "path":
        with replacing(str(path)) as tmp:
            np.save(tmp, data)  # np.save adds ".npy" to a name without it: the temporary name keeps the extension
    else:
        pending = PendingFile(str(path))
        np.save(pending.tmp, data)
        pending.commit()
    # Assert: fsync(the file), then the rename of a temporary file of the same directory, then fsync(the directory)
    inode, directory = os.stat(path).st_ino, os.stat(tmp_path).st_ino
    assert [c[0] for c in syncs] == ["fsync", "replace", "fsync"]
    assert syncs[0] == ("fsync", inode, False) and syncs[2] == ("fsync", directory, True)
    src, dst = syncs[1][1:]
    assert (
        dst == str(path) and os.path.dirname(src) == str(tmp_path) and durable_files.is_temporary(os.path.basename(src))
    )
    assert os.listdir(tmp_path) == ["out.npy"]
    if how == "bytes":
        assert path.read_bytes() == b"new"
    else:
        np.testing.assert_array_equal(np.load(path), data)


def test_the_temporary_file_is_hidden_beside_the_target_and_keeps_its_extension(tmp_path):
    # Execute
    with replacing(str(tmp_path / "cuts.npz")) as tmp:
        seen = (os.path.dirname(tmp), os.path.basename(tmp), os.path.exists(tmp))
        np.savez(tmp, a=np.ones(2))
    # Assert: same directory (a rename never crosses a file system), a hidden name, the extension np.savez reads
    assert seen[0] == str(tmp_path) and seen[1].startswith(".cuts.npz.tmp-") and seen[1].endswith(".npz") and seen[2]
    assert sorted(os.listdir(tmp_path)) == ["cuts.npz"]


@pytest.mark.parametrize("how", ["file", "path", "pending"])
def test_a_failure_mid_write_leaves_the_old_file_intact_and_no_temporary_file(tmp_path, how):
    # Prepare: the old file
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"old checkpoint")
    # Execute: the writer fails after writing half of the new file
    with pytest.raises(RuntimeError, match="writer died"):
        if how == "file":
            with replacing_file(str(path)) as f:
                f.write(b"half of the new")
                raise RuntimeError("writer died")
        elif how == "path":
            with replacing(str(path)) as tmp:
                with open(tmp, "wb") as f:
                    f.write(b"half of the new")
                raise RuntimeError("writer died")
        else:
            pending = PendingFile(str(path))
            try:
                with open(pending.tmp, "wb") as f:
                    f.write(b"half of the new")
                raise RuntimeError("writer died")
            except RuntimeError:
                pending.discard()
                raise
    # Assert
    assert path.read_bytes() == b"old checkpoint" and os.listdir(tmp_path) == ["checkpoint.pt"]


def test_a_failing_fsync_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    # Prepare: a disk that is full when the file is synced
    path = tmp_path / "metrics.json"
    path.write_text('{"old": 1}\n')

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    # Execute
    with pytest.raises(OSError) as e:
        write_json(str(path), {"new": 2})
    # Assert: the error as it came, the old file, nothing else
    assert e.value.errno == errno.ENOSPC
    assert json.loads(path.read_text()) == {"old": 1} and os.listdir(tmp_path) == ["metrics.json"]


def test_a_private_file_is_never_more_readable_than_its_mode(tmp_path):
    # Execute: a 0600 file, looked at while it is still being written, and after
    with replacing_file(str(tmp_path / "cache.psi"), mode=0o600) as f:
        during = stat.S_IMODE(os.stat(f.name).st_mode)
        f.write(b"secret")
    after = stat.S_IMODE(os.stat(tmp_path / "cache.psi").st_mode)
    # Assert
    assert during == after == 0o600


def test_json_has_a_final_newline_and_the_arguments_given(tmp_path):
    write_json(str(tmp_path / "m.json"), {"b": float("nan"), "a": 1}, indent=None, sort_keys=True)
    assert (tmp_path / "m.json").read_text() == '{"a": 1, "b": NaN}\n'


def test_sync_tree_fsyncs_every_file_and_directory_deepest_first(tmp_path, syncs):
    # Prepare: a shard-like tree
    root = tmp_path / "shard"
    (root / "train").mkdir(parents=True)
    (root / "train" / "ids.npy").write_bytes(b"x")
    (root / "manifest.json").write_text("{}")
    # Execute
    sync_tree(str(root))
    # Assert: both files and both directories, the root last
    inodes = [c[1] for c in syncs]
    for p in (root / "train" / "ids.npy", root / "manifest.json", root / "train", root):
        assert os.stat(p).st_ino in inodes
    assert inodes[-1] == os.stat(root).st_ino and inodes.index(os.stat(root / "train").st_ino) < len(inodes) - 1


def test_stale_temporary_files_are_removed_and_young_ones_and_other_files_kept(tmp_path):
    # Prepare: a temporary file a killed writer left 2 h ago, one being written now, a file of the directory
    stale, live = durable_files.temporary_path(str(tmp_path / "a")), durable_files.temporary_path(str(tmp_path / "a"))
    for p in (stale, live, str(tmp_path / "a")):
        with open(p, "wb") as f:
            f.write(b"x")
    os.utime(stale, (0, os.path.getmtime(live) - 7200))
    # Execute
    durable_files.remove_stale_temporaries(str(tmp_path), 3600)
    # Assert
    assert sorted(os.listdir(tmp_path)) == sorted(["a", os.path.basename(live)])


def test_the_file_digest_is_the_sha256_of_the_bytes_opened(tmp_path):
    # Prepare: 2.5 MiB (three blocks)
    data = np.random.default_rng(0).bytes(5 << 19)
    (tmp_path / "f").write_bytes(data)
    blocks = []
    # Execute
    plain = file_sha256(str(tmp_path / "f"))
    counted = file_sha256(str(tmp_path / "f"), lambda p: open(p, "rb"), blocks.append)
    # Assert
    assert plain == counted == hashlib.sha256(data).hexdigest() and blocks == [1 << 20, 1 << 20, 1 << 19]
