"""Checkpoints: checksummed and refused when altered; failed saves leave no debris; tags are plain names."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from vfl.training.checkpoint import checkpoint_tag, load_checkpoint, load_resume_checkpoint, save_checkpoint


def _save(path) -> None:
    save_checkpoint(str(path), "follower0", {"bottom": {"w": torch.arange(1000, dtype=torch.float32)}}, 0, 7)


def test_checkpoint_round_trip_keeps_state_and_step(tmp_path):
    # Execute
    _save(tmp_path / "c.pt")
    ckpt = load_resume_checkpoint(str(tmp_path / "c.pt"), "follower0", ("bottom",))
    # Assert
    assert ckpt["step"] == 7 and torch.equal(ckpt["state"]["bottom"]["w"], torch.arange(1000, dtype=torch.float32))


@pytest.mark.parametrize("where", [0.5, 0.99])
def test_a_flipped_byte_is_refused_on_resume(tmp_path, where):
    # Prepare
    path = tmp_path / "c.pt"
    _save(path)
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))
    # Execute / Assert
    with pytest.raises(ValueError, match="is not a readable checkpoint: checksum mismatch"):
        load_resume_checkpoint(str(path), "follower0", ("bottom",))


def test_a_truncated_or_foreign_file_is_refused(tmp_path):
    # Prepare
    path = tmp_path / "c.pt"
    _save(path)
    path.write_bytes(path.read_bytes()[:-10])
    (tmp_path / "plain.pt").write_bytes(b"PK\x03\x04 not ours")
    # Execute / Assert
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_checkpoint(str(path))
    with pytest.raises(ValueError, match="no VFLCKPT1 header"):
        load_checkpoint(str(tmp_path / "plain.pt"))


def test_the_checkpoint_and_its_sidecar_are_fsynced_before_their_renames_and_the_directory_after(tmp_path, monkeypatch):
    # Prepare: every fsync (inode) and rename (target) recorded in order
    calls, real_fsync, real_replace = [], os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.fstat(fd).st_ino)), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", str(b))), real_replace(a, b))[1])
    # Execute
    _save(tmp_path / "c.pt")
    # Assert: a power loss at any point leaves the old files or the new ones under the final names, never torn
    ino = lambda p: os.stat(p).st_ino
    assert calls == [
        ("fsync", ino(tmp_path / "c.pt")),
        ("replace", str(tmp_path / "c.pt")),
        ("fsync", ino(tmp_path)),
        ("fsync", ino(tmp_path / "c.pt.json")),
        ("replace", str(tmp_path / "c.pt.json")),
        ("fsync", ino(tmp_path)),
    ]


def test_disk_full_names_the_directory_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    # Prepare: the disk fills while the checkpoint is written
    import builtins

    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(
        builtins,
        "open",
        lambda p, m="r", *a, **k: Full(real_open(p, m, *a, **k)) if ".tmp-" in str(p) else real_open(p, m, *a, **k),
    )
    # Execute
    with pytest.raises(OSError) as e:
        _save(tmp_path / "ck" / "c.pt")
    # Assert
    assert str(e.value) == (f"no space left on {tmp_path / 'ck'}: checkpoint {tmp_path / 'ck' / 'c.pt'} not written")
    assert os.listdir(tmp_path / "ck") == []


@pytest.mark.parametrize("tag", ["x/../../evil", "../up", "/abs", "a b", "", ".hidden", "t" * 65, "a\x00b"])
def test_a_save_tag_that_is_not_a_plain_name_is_refused(tag):
    with pytest.raises(ValueError, match="is not a plain name"):
        checkpoint_tag(tag)


def test_plain_save_tags_pass():
    assert [checkpoint_tag(t) for t in ("final", "step10", "best-1")] == ["final", "step10", "best-1"]
