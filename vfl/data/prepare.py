"""Raw data -> memory-mappable party shards.

Each party prepares its own raw file, alone (prepare_party); the local simulation splits one combined file into
per-party files first (prepare).

Layout of one party's shard directory (written atomically: built in a temporary sibling, renamed):

    <party>/manifest.json                  columns, field sizes, rows, id digests, split rule, transforms
    <party>/<split>/ids.npy                int64 (n,)   sample ids (vfl/data/ids.py), sorted ascending
    <party>/<split>/dense.npy              float32 (n, d) transformed dense values
    <party>/<split>/dense_missing.npy      uint8 (n, d)  1 where the raw value was missing
    <party>/<split>/cat.npy                int32 (n, c)  per-field ids (0 missing, 1 OOV)
    <party>/<split>/labels.npy             int8 (n,)     labelled party only
with split in {train, valid, test}: valid is for model selection (early stopping), test only reports.
A sample's split is a public function of its id (uniform_from_ids), so after the private set
intersection every party's splits agree without another message. Vocabularies and hash salts are
fitted on the party's own file only.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from privacy.public_hash import uniform_from_ids
from vfl.data.errors import DataError
from vfl.data.ids import check_unique, id64_of_text
from vfl.data.manifest import (
    SPLITS,
    bayes_accuracy,
    bayes_test_auc,
    id_digest,
    party_manifest,
    party_manifest_of,
    simulation_manifest,
)
from vfl.data.npy_stream import NpyAppender
from vfl.data.parties import PartyColumns
from vfl.data.raw_split import hash_name, split_raw
from vfl.data.readers.criteo_tsv import ReadStats, warn_bad_lines
from vfl.data.readers.party_file import PartyBlock, PartySource, read_party_blocks
from vfl.data.readers.tokenizer import MAX_CLASSES
from vfl.data.transforms import (
    VocabularyCounter,
    dense_transform,
    field_salts,
    hash_bucket,
    vocabulary_ids,
)

_SPLIT_SALT = 0x5B1175


@dataclass(frozen=True)
class PrepareOptions:
    """Knobs of `python -m vfl.data prepare`."""

    test_fraction: float = 0.1
    valid_fraction: float = 0.1
    seed: int = 0
    strict: bool = False
    hash_buckets: int = 100_000
    vocab_min_count: int | None = None  # None: hash mode
    truth_path: str | None = None
    force: bool = False
    num_classes: int = 2  # 2: a 0/1 label; K > 2: class ids 0..K-1 (a multi-class label column)


def _validate(opts: PrepareOptions) -> None:
    errors = []
    if not 0.0 <= opts.test_fraction < 1.0:
        errors.append(f"test_fraction must be in [0, 1), got {opts.test_fraction}")
    if not 0.0 <= opts.valid_fraction < 1.0 or opts.test_fraction + opts.valid_fraction >= 1.0:
        errors.append(
            f"valid_fraction must be in [0, 1) with test_fraction + valid_fraction < 1, "
            f"got valid_fraction={opts.valid_fraction} (test_fraction={opts.test_fraction})"
        )
    if opts.hash_buckets < 3 or opts.hash_buckets > 2**31 - 1:
        errors.append(f"hash_buckets must be in [3, 2**31-1], got {opts.hash_buckets}")
    if (
        isinstance(opts.num_classes, bool)
        or not isinstance(opts.num_classes, int)
        or not 2 <= opts.num_classes <= MAX_CLASSES
    ):
        errors.append(f"num_classes must be an integer in [2, {MAX_CLASSES}], got {opts.num_classes!r}")
    if opts.vocab_min_count is not None and opts.vocab_min_count < 1:
        errors.append(f"vocab_min_count must be >= 1, got {opts.vocab_min_count}")
    if errors:
        raise DataError("; ".join(errors))


class _SplitWriter:
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


class _PartyEncoder:
    """Turns a party's parsed blocks into its feature arrays."""

    def __init__(self, party: PartyColumns, opts: PrepareOptions, vocabs: list[np.ndarray] | None):
        self.party = party
        self.salts = field_salts(list(party.categorical))
        self.opts = opts
        self.vocabs = vocabs

    def encode(self, b: PartyBlock, rows: np.ndarray):
        dense = dense_transform(b.dense[rows], b.dense_missing[rows])
        missing = b.dense_missing[rows].astype(np.uint8)
        keys, cmiss = b.cat_key[rows], b.cat_missing[rows]
        if self.vocabs is None:
            cat = hash_bucket(keys, cmiss, self.salts, self.opts.hash_buckets)
        else:
            cat = vocabulary_ids(keys, cmiss, self.vocabs)
        return dense, missing, cat

    def field_sizes(self) -> dict[str, int]:
        if self.vocabs is None:
            return {c: self.opts.hash_buckets for c in self.party.categorical}
        return {c: int(v.size) + 2 for c, v in zip(self.party.categorical, self.vocabs)}


def split_of(ids: np.ndarray, opts: PrepareOptions) -> np.ndarray:
    """0 train, 1 valid, 2 test: a public function of the id, identical at every party."""
    u = uniform_from_ids(ids, opts.seed, _SPLIT_SALT)
    return np.where(u < opts.test_fraction, 2, np.where(u < opts.test_fraction + opts.valid_fraction, 1, 0))


def _id_texts(src: PartySource, id64: int) -> str | None:
    """The id texts of a party file that map to id64 (for the duplicate-id error message)."""
    import pandas as pd

    from vfl.data.readers.party_file import sniff_header

    sep, _ = sniff_header(src.path)
    found = []
    for df in pd.read_csv(
        src.path,
        sep=sep,
        dtype=str,
        usecols=[src.id_column],
        keep_default_na=False,
        chunksize=200_000,
        quoting=3 if sep == "\t" else 0,
        encoding_errors="surrogateescape",
    ):
        for t in df[src.id_column]:
            if id64_of_text(t) == id64:
                found.append(t)
    found = list(dict.fromkeys(found))
    return " = ".join(repr(t) for t in found[:3]) if found else None


def prepare_party(src: PartySource, out_dir: str, party: PartyColumns, opts: PrepareOptions = PrepareOptions()) -> dict:
    """One party's shard directory out_dir from its own raw file only; returns the shard's full manifest.

    The returned dict is the labelled party's manifest; a feature party's manifest.json is the
    allow-listed part (FOLLOWER_MANIFEST_KEYS). Nothing is left half-written.
    """
    _validate(opts)
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not opts.force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    truth_path = opts.truth_path if party.label else None
    if party.label and truth_path is None and os.path.exists(src.path + ".truth.npy"):
        truth_path = src.path + ".truth.npy"
    if truth_path is not None and not os.path.exists(truth_path):
        raise DataError(f"truth file not found: {truth_path}")
    t0 = time.perf_counter()
    vocabs = None
    if opts.vocab_min_count is not None:  # fitted on this party's own file only
        counter = VocabularyCounter(len(party.categorical))
        for b in read_party_blocks(src, opts.strict, ReadStats(), digest=False):
            counter.update(b.cat_key, b.cat_missing)
        vocabs = counter.vocabularies(opts.vocab_min_count)
    enc = _PartyEncoder(party, opts, vocabs)
    parent = os.path.dirname(out_dir) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    stats = ReadStats()
    test_rows: list[np.ndarray] = []
    test_labels: list[np.ndarray] = []
    try:
        writers = [
            _SplitWriter(os.path.join(tmp, s), len(party.dense), len(party.categorical), party.label) for s in SPLITS
        ]
        last_note = time.perf_counter()
        for b in read_party_blocks(src, opts.strict, stats):
            if time.perf_counter() - last_note >= 10.0:  # long files show progress on stderr
                last_note = time.perf_counter()
                print(
                    f"prepare {party.name}: {stats.good_rows} rows, {stats.good_rows / (last_note - t0):.0f} rows/s",
                    file=sys.stderr,
                    flush=True,
                )
            which = split_of(b.sample_id, opts)
            for k, w in enumerate(writers):
                rows = np.flatnonzero(which == k)
                if rows.size == 0:
                    continue
                dense, missing, cat = enc.encode(b, rows)
                w.ids.append(b.sample_id[rows])
                w.dense.append(dense)
                w.dense_missing.append(missing)
                w.cat.append(cat)
                if w.labels is not None:
                    w.labels.append(b.label[rows])
                if k == 2 and truth_path is not None:
                    test_rows.append(b.row_index[rows])
                    test_labels.append(b.label[rows])
        for w in writers:
            w.close()
        stream_seconds = time.perf_counter() - t0
        warn_bad_lines(src.path, stats)
        all_ids = np.concatenate([np.load(w.ids.path) for w in writers])
        check_unique(all_ids, src.path, lambda i: _id_texts(src, i))
        del all_ids
        digests, positives, class_counts = {}, {}, {}
        for s, w in zip(SPLITS, writers):
            ids = w.sort_by_id()
            digests[s] = id_digest(ids)
            if party.label:
                lab = np.load(w.labels.path)
                positives[s] = int(lab.sum())
                class_counts[s] = np.bincount(lab.astype(np.int64), minlength=opts.num_classes)[
                    : opts.num_classes
                ].tolist()
        manifest = party_manifest(src, party, enc, writers, digests, positives, opts, stats, class_counts)
        if truth_path is not None and opts.num_classes > 2:
            manifest["bayes_test_accuracy"] = bayes_accuracy(truth_path, test_rows, test_labels, opts.num_classes)
            manifest["truth_path"] = os.path.abspath(truth_path)
        elif truth_path is not None:
            manifest["bayes_test_auc"] = bayes_test_auc(truth_path, test_rows, test_labels)
            manifest["truth_path"] = os.path.abspath(truth_path)
        elapsed = time.perf_counter() - t0
        manifest["prepare_seconds"] = round(elapsed, 3)
        _write_json(os.path.join(tmp, "manifest.json"), party_manifest_of(manifest, party))
        if vocabs is not None:
            vdir = os.path.join(tmp, "vocab")
            os.makedirs(vdir)
            for c, v in zip(party.categorical, vocabs):
                np.save(os.path.join(vdir, f"{c}.npy"), v)
        _commit(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    manifest["rows_per_second"] = stats.good_rows / max(stream_seconds, 1e-9)
    manifest["seconds_total"] = elapsed
    manifest["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return manifest


def prepare(
    input_path: str, out_dir: str, parties: list[PartyColumns], opts: PrepareOptions = PrepareOptions()
) -> dict:
    """The local simulation: split one combined file into per-party raw files (OUT/raw/<party>.tsv), then
    prepare each party from its own file alone (OUT/<party>), exactly as separate organisations would.

    OUT/manifest.json describes the simulation as a whole; its rows and id digests are those of the
    intersection every party will agree on at training time (the PSI computes it privately; here one
    process holds every file, so it is computed in the clear for the record).
    """
    _validate(opts)
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not opts.force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    t0 = time.perf_counter()
    parent = os.path.dirname(out_dir) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        summary = split_raw(
            input_path, os.path.join(tmp, "raw"), parties, opts.seed, opts.strict, opts.truth_path, opts.num_classes
        )
        inner = PrepareOptions(**{**asdict(opts), "truth_path": None, "force": False})
        docs = {}
        for p in parties:
            src = PartySource(summary["files"][p.name], p.dense, p.categorical, p.label, num_classes=opts.num_classes)
            docs[p.name] = prepare_party(src, os.path.join(tmp, p.name), p, inner)
        for p in parties:  # the truth file moves with the directory: name its final place
            if docs[p.name].get("truth_path"):
                docs[p.name]["truth_path"] = os.path.join(out_dir, os.path.relpath(docs[p.name]["truth_path"], tmp))
                _write_json(os.path.join(tmp, p.name, "manifest.json"), party_manifest_of(docs[p.name], p))
        manifest = simulation_manifest(tmp, summary, parties, docs, opts)
        manifest["prepare_seconds"] = round(time.perf_counter() - t0, 3)
        _write_json(os.path.join(tmp, "manifest.json"), manifest)
        _commit(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    elapsed = time.perf_counter() - t0
    manifest["rows_per_second"] = summary["source"]["lines"] / max(elapsed, 1e-9)
    manifest["seconds_total"] = elapsed
    manifest["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return manifest


def _write_json(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")


def _commit(tmp: str, out_dir: str) -> None:
    """Rename the finished temporary directory into place (replacing an old one with --force)."""
    if os.path.exists(out_dir):
        old = f"{out_dir}.old-{os.getpid()}"
        os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out_dir)


__all__ = ["PrepareOptions", "hash_name", "id_digest", "prepare", "prepare_party", "split_of"]
