"""Files a crash must not tear (written beside their final name, fsynced, renamed, the directory fsynced) and digests.

`os.replace` alone is atomic but not durable: after a power loss the new name may point at a file whose blocks never
reached the disk (empty or torn), or the rename itself may be lost. SQLite's and PostgreSQL's rule is followed here:
write a temporary file in the same directory (a rename never crosses a file system), flush and fsync it, rename it
over the final name, then fsync the directory so that the rename is on disk too. A failure on the way (a full disk,
an exception of the writer) removes the temporary file and leaves the old file as it was.

- `replacing(path)`: a temporary path, for writers that take a path (np.save, torch.save, pyarrow, matplotlib); its
  name ends with the final name's extension (np.savez and savefig read it), and the writer must write that very path.
- `PendingFile(path)`: the same for a writer that stays open across calls, with commit() and discard().
- `replacing_file(path)`: an open file object (json.dump, np.save into a file, several writes of a large payload).
- `write_bytes`, `write_text`, `write_json`: the whole content at once.
- `sync_tree(root)`: every file and directory under root fsynced, for a directory that is renamed into place whole
  (a prepared shard).
- `file_sha256(path)`: the SHA-256 of a file's bytes, read in blocks.

`mode` (e.g. 0o600 for a secret) is given to the temporary file when it is created, so the file is never readable by
more than that, not even for an instant; None leaves the usual 0o666 less the umask, as `open` does.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from typing import IO

TEMP_MARK = ".tmp-"  # a temporary file's name: "." + final name + TEMP_MARK + pid-random + extension
_BLOCK = 1 << 20


def temporary_path(path: str) -> str:
    """A fresh hidden name beside `path` that keeps its extension: `.NAME.tmp-PID-RANDOM.EXT`."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}{os.path.splitext(name)[1]}")


def is_temporary(name: str) -> bool:
    """Whether a file name (not a path) is one temporary_path made."""
    return name.startswith(".") and TEMP_MARK in name


def fsync_directory(directory: str) -> None:
    """Make the renames in `directory` durable; a system that cannot open a directory, or fsync one, skips it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):  # not supported for directories here
            raise
    finally:
        os.close(fd)


def _create(tmp: str, mode: int | None) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    os.close(os.open(tmp, flags, 0o666 if mode is None else mode))


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def _install(tmp: str, path: str, sync_directory: bool) -> None:
    os.replace(tmp, path)
    if sync_directory:
        fsync_directory(os.path.dirname(os.path.abspath(path)))


class PendingFile:
    """A temporary file beside `path` (created empty, with `mode`) that replaces `path` durably on commit() or goes on
    discard(): for a writer that stays open across calls (prediction outputs)."""

    def __init__(self, path: str, mode: int | None = None, sync_directory: bool = True):
        self.path, self.sync_directory = path, sync_directory
        self.tmp = temporary_path(path)
        _create(self.tmp, mode)

    def commit(self) -> None:
        """fsync the temporary file, rename it over `path`, fsync the directory; on an error it is removed."""
        try:
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _install(self.tmp, self.path, self.sync_directory)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        _remove(self.tmp)


@contextlib.contextmanager
def replacing(path: str, mode: int | None = None, sync_directory: bool = True) -> Iterator[str]:
    """Yield a temporary path beside `path` (created empty, with `mode`); when the block ends without an error the file
    is fsynced and renamed over `path`, and the directory fsynced (unless sync_directory is False: a rename that may be
    lost in a crash where the file it replaces is as good). On an error the temporary file is removed, `path` is left
    as it was, and the error propagates. The directory must exist."""
    pending = PendingFile(path, mode, sync_directory)
    try:
        yield pending.tmp
    except BaseException:
        pending.discard()
        raise
    pending.commit()


@contextlib.contextmanager
def replacing_file(path: str, text: bool = False, mode: int | None = None, sync_directory: bool = True) -> Iterator[IO]:
    """Yield a file open for writing (binary, or UTF-8 text) that replaces `path` durably when the block ends without
    an error (as `replacing`)."""
    tmp = temporary_path(path)
    _create(tmp, mode)
    try:
        with open(tmp, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _install(tmp, path, sync_directory)
    except BaseException:
        _remove(tmp)
        raise


def write_bytes(path: str, data: bytes, mode: int | None = None, sync_directory: bool = True) -> None:
    """Replace `path` durably by `data`."""
    with replacing_file(path, mode=mode, sync_directory=sync_directory) as f:
        f.write(data)


def write_text(path: str, text: str, mode: int | None = None) -> None:
    """Replace `path` durably by `text` (UTF-8)."""
    with replacing_file(path, text=True, mode=mode) as f:
        f.write(text)


def write_json(path: str, doc, indent: int | None = 2, **dumps) -> None:
    """Replace `path` durably by `doc` as JSON with a final newline (json.dumps' keyword arguments pass through)."""
    write_text(path, json.dumps(doc, indent=indent, **dumps) + "\n")


def sync_tree(root: str) -> None:
    """fsync every file and directory under root, the deepest first (before root is renamed into place whole)."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(directory)


def remove_stale_temporaries(directory: str, older_than_s: float) -> None:
    """Remove the temporary files a killed writer left in `directory` (older than older_than_s: a live writer, another
    process or rank, may be writing a younger one)."""
    now = time.time()
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        with contextlib.suppress(OSError):
            if is_temporary(name) and now - os.stat(path).st_mtime > older_than_s:
                os.unlink(path)


def file_sha256(path: str, open_binary: Callable[[str], IO[bytes]] | None = None, on_block=None) -> str:
    """SHA-256 (hex) of the bytes `open_binary(path)` reads (default: the file's own bytes), in 1 MiB blocks;
    on_block(n) is told each block's size (a progress bar)."""
    digest = hashlib.sha256()
    with (open_binary or (lambda p: open(p, "rb")))(path) as f:
        while block := f.read(_BLOCK):
            digest.update(block)
            if on_block is not None:
                on_block(len(block))
    return digest.hexdigest()
