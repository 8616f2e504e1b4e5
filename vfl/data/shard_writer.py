"""Writing a shard directory: each split's .npy appenders, its JSON files, and the atomic rename into place.

ShardSplits appends each block's rows to the split their id falls in, then checks the ids unique over the splits and
sorts each split by id (the order every party's shard has).

A shard is built in a temporary sibling of its final directory (`temp_sibling`) and renamed into place when it is
complete (`commit`: every file fsynced first, the parent directory after), so a failure or a crash leaves nothing
half-written; `--force` replaces an old shard the same way, and copies the old shard's PSI caches into the new one
where the ids did not change (`keep_psi_caches`), so a re-prepared party does not run the same PSI again.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from privacy.durable_files import fsync_directory, sync_tree
from vfl.data.ids import check_unique
from vfl.data.manifest import id_digest
from vfl.data.npy_stream import NpyAppender
from vfl.splits import SPLITS

PSI_CACHE_DIR = "psi_cache"  # <shard>/psi_cache: the party's agreed intersections (vfl/align/psi/reuse.py)


class SplitWriter:
    """The .npy appenders of one split of a party's shard."""

    def __init__(self, root: str, n_dense: int, n_cat: int, labelled: bool, label_dtype=np.int8):
        os.makedirs(root)
        self.root = root
        self.ids = NpyAppender(os.path.join(root, "ids.npy"), np.int64)
        self.dense = NpyAppender(os.path.join(root, "dense.npy"), np.float32, (n_dense,))
        self.dense_missing = NpyAppender(os.path.join(root, "dense_missing.npy"), np.uint8, (n_dense,))
        self.cat = NpyAppender(os.path.join(root, "cat.npy"), np.int32, (n_cat,))
        self.labels = NpyAppender(os.path.join(root, "labels.npy"), label_dtype) if labelled else None
        self.rows = 0

    def close(self) -> None:
        for a in (self.ids, self.dense, self.dense_missing, self.cat, self.labels):
            if a is not None:
                a.close()
        self.rows = self.ids.rows

    def sort_by_id(self) -> np.ndarray:
        """Reorder every array of the split by ascending id (one array in memory at a time); return the ids."""
        ids = np.load(self.ids.path)
        if ids.size < 2 or bool(np.all(np.diff(ids) > 0)):
            return ids
        order = np.argsort(ids, kind="stable")
        for a in (self.ids, self.dense, self.dense_missing, self.cat, self.labels):
            if a is not None:
                arr = np.load(a.path)[order]
                np.save(a.path, arr)
        return ids[order]


class ShardSplits:
    """The train, valid and test writers of one shard (SPLITS order)."""

    def __init__(self, root: str, n_dense: int, n_cat: int, labelled: bool, label_dtype=np.int8):
        self.writers = [SplitWriter(os.path.join(root, s), n_dense, n_cat, labelled, label_dtype) for s in SPLITS]

    def append(self, ids: np.ndarray, which: np.ndarray, encode, label=None) -> None:
        """Split k gets the rows where which == k: their ids, encode(rows) = (dense, dense_missing, cat) and, in a
        labelled shard, label(rows)."""
        for k, w in enumerate(self.writers):
            rows = np.flatnonzero(which == k)
            if rows.size == 0:
                continue
            dense, missing, cat = encode(rows)
            w.ids.append(ids[rows])
            w.dense.append(dense)
            w.dense_missing.append(missing)
            w.cat.append(cat)
            if w.labels is not None:
                w.labels.append(label(rows))

    def close(self) -> None:
        for w in self.writers:
            w.close()

    def finish(self, path: str, id_texts_of) -> dict[str, str]:
        """Check the ids unique over the splits (a duplicate named by id_texts_of(id), or None), sort each split by
        id; the splits' id digests."""
        all_ids = np.concatenate([np.load(w.ids.path) for w in self.writers])
        check_unique(all_ids, path, id_texts_of)
        del all_ids
        return {s: id_digest(w.sort_by_id()) for s, w in zip(SPLITS, self.writers)}

    def labels(self, split: str) -> np.ndarray:
        return np.load(self.writers[SPLITS.index(split)].labels.path)


def temp_sibling(out_dir: str) -> str:
    """An empty temporary directory name beside out_dir (its parent created), where the shard is built."""
    parent = os.path.dirname(out_dir) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


def write_json(path: str, doc: dict) -> None:
    """doc as indented JSON, with a final newline (in a shard's temporary directory: `commit` fsyncs it)."""
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")


def _id_digests(shard_dir: str) -> dict | None:
    """The per-split id digests a shard's manifest records, or None (no shard, an unreadable manifest)."""
    try:
        with open(os.path.join(shard_dir, "manifest.json")) as f:
            digests = json.load(f).get("id_digest")
    except (OSError, ValueError, AttributeError):
        return None
    return digests if isinstance(digests, dict) and digests else None


def keep_psi_caches(old_root: str, new_root: str) -> list[str]:
    """Copy the PSI caches (PSI_CACHE_DIR) of the shards under old_root (the root itself, or a party directory of a
    combined prepare) to the same place under new_root where that shard's ids are the same in every split (their
    modes kept: 0700, 0600); the shards (relative paths) whose cache was kept. Each cache checks its own ids again
    when it is read (vfl/align/psi/reuse.py): a kept cache only saves a re-prepared party the PSI it already ran."""
    kept = []
    for rel in ["", *sorted(os.listdir(new_root))]:
        old_cache = os.path.join(old_root, rel, PSI_CACHE_DIR)
        if not os.path.isdir(old_cache) or os.path.exists(os.path.join(new_root, rel, PSI_CACHE_DIR)):
            continue
        old_ids = _id_digests(os.path.join(old_root, rel))
        if old_ids is not None and old_ids == _id_digests(os.path.join(new_root, rel)):
            shutil.copytree(old_cache, os.path.join(new_root, rel, PSI_CACHE_DIR))
            kept.append(rel)
    return kept


def commit(tmp: str, out_dir: str) -> list[str]:
    """Rename the finished temporary directory into place durably (every file and directory under it fsynced, then
    the rename, then the parent directory fsynced), replacing an old one with --force; the old shard's PSI caches
    go with the new one where its ids did not change (keep_psi_caches; their list is returned)."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    kept = keep_psi_caches(out_dir, tmp) if os.path.isdir(out_dir) else []
    sync_tree(tmp)
    if os.path.exists(out_dir):
        old = f"{out_dir}.old-{os.getpid()}"
        os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        fsync_directory(parent)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out_dir)
        fsync_directory(parent)
    return kept
