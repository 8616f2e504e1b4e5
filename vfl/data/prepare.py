"""Raw Criteo TSV -> one memory-mappable shard directory per party, aligned on sample ids.

Layout written under OUT (atomically: built in a temporary sibling, then renamed):

    OUT/manifest.json                      everything below, for all parties
    OUT/<party>/manifest.json              that party's part (columns, sizes, rows, id digests)
    OUT/<party>/<split>/ids.npy            int64 (n,)   sample ids, sorted ascending
    OUT/<party>/<split>/dense.npy          float32 (n, d) transformed dense values
    OUT/<party>/<split>/dense_missing.npy  uint8 (n, d)  1 where the raw value was missing
    OUT/<party>/<split>/cat.npy            int32 (n, c)  per-field ids (0 missing, 1 OOV)
    OUT/<party>/<split>/labels.npy         int8 (n,)     labelled party only
with split in {train, valid, test}: valid is for model selection (early stopping), test only reports.
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import time
from dataclasses import asdict, dataclass

import numpy as np

from privacy.keyed_random import uniform_from_ids
from vfl.data.npy_stream import NpyAppender
from vfl.data.parties import PartyColumns, unassigned_columns
from vfl.data.reader import DataError, ReadStats, read_blocks, warn_bad_lines
from vfl.data.schema import categorical_index, dense_index
from vfl.data.tokenizer import MAX_CLASSES, ParsedBlock
from vfl.data.transforms import (
    DENSE_TRANSFORM_DOC,
    VocabularyCounter,
    dense_transform,
    field_salts,
    hash_bucket,
    vocabulary_ids,
)

SPLITS = ("train", "valid", "test")
FORMAT_VERSION = 1
_SPLIT_SALT = 0x5B1175
_DROP_SALT = 0xD0D0


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
        errors.append(f"valid_fraction must be in [0, 1) with test_fraction + valid_fraction < 1, "
                      f"got valid_fraction={opts.valid_fraction} (test_fraction={opts.test_fraction})")
    if opts.hash_buckets < 3 or opts.hash_buckets > 2**31 - 1:
        errors.append(f"hash_buckets must be in [3, 2**31-1], got {opts.hash_buckets}")
    if isinstance(opts.num_classes, bool) or not isinstance(opts.num_classes, int) or not 2 <= opts.num_classes <= MAX_CLASSES:
        errors.append(f"num_classes must be an integer in [2, {MAX_CLASSES}], got {opts.num_classes!r}")
    if opts.vocab_min_count is not None and opts.vocab_min_count < 1:
        errors.append(f"vocab_min_count must be >= 1, got {opts.vocab_min_count}")
    if errors:
        raise DataError("; ".join(errors))


class _SplitWriter:
    """The .npy appenders and running id digest of one party's split."""

    def __init__(self, root: str, party: PartyColumns):
        os.makedirs(root)
        self.ids = NpyAppender(os.path.join(root, "ids.npy"), np.int64)
        self.dense = NpyAppender(os.path.join(root, "dense.npy"), np.float32, (len(party.dense),))
        self.dense_missing = NpyAppender(os.path.join(root, "dense_missing.npy"), np.uint8, (len(party.dense),))
        self.cat = NpyAppender(os.path.join(root, "cat.npy"), np.int32, (len(party.categorical),))
        self.labels = NpyAppender(os.path.join(root, "labels.npy"), np.int8) if party.label else None
        self.digest = hashlib.sha256()
        self.positives = 0
        self.class_counts = np.zeros(MAX_CLASSES, np.int64)

    def close(self) -> None:
        for a in (self.ids, self.dense, self.dense_missing, self.cat, self.labels):
            if a is not None:
                a.close()


def id_digest_update(digest, ids: np.ndarray) -> None:
    """Fold sample ids into a running sha256 (the alignment check at the handshake uses it)."""
    digest.update(np.ascontiguousarray(ids, dtype="<i8").tobytes())


class _PartyEncoder:
    """Turns parsed blocks into one party's feature arrays."""

    def __init__(self, party: PartyColumns, opts: PrepareOptions, vocabs: dict[str, np.ndarray] | None):
        self.party = party
        self.dense_idx = [dense_index(c) for c in party.dense]
        self.cat_idx = [categorical_index(c) for c in party.categorical]
        self.salts = field_salts(list(party.categorical))
        self.opts = opts
        self.vocabs = [vocabs[c] for c in party.categorical] if vocabs is not None else None

    def encode(self, b: ParsedBlock, rows: np.ndarray):
        dense = dense_transform(b.dense[np.ix_(rows, self.dense_idx)], b.dense_missing[np.ix_(rows, self.dense_idx)])
        missing = b.dense_missing[np.ix_(rows, self.dense_idx)].astype(np.uint8)
        keys = b.cat_key[np.ix_(rows, self.cat_idx)]
        cmiss = b.cat_missing[np.ix_(rows, self.cat_idx)]
        if self.vocabs is None:
            cat = hash_bucket(keys, cmiss, self.salts, self.opts.hash_buckets)
        else:
            cat = vocabulary_ids(keys, cmiss, self.vocabs)
        return dense, missing, cat

    def field_sizes(self) -> dict[str, int]:
        if self.vocabs is None:
            return {c: self.opts.hash_buckets for c in self.party.categorical}
        return {c: int(v.size) + 2 for c, v in zip(self.party.categorical, self.vocabs)}


def _sample_ids(b: ParsedBlock) -> np.ndarray:
    return b.sample_id if b.sample_id is not None else b.line_index


def _build_vocabularies(input_path: str, parties: list[PartyColumns], opts: PrepareOptions) -> dict[str, np.ndarray]:
    names = [c for p in parties for c in p.categorical]
    idx = [categorical_index(c) for c in names]
    counter = VocabularyCounter(len(names))
    for b in read_blocks(input_path, opts.strict, ReadStats(), num_classes=opts.num_classes):
        counter.update(b.cat_key[:, idx], b.cat_missing[:, idx])
    return dict(zip(names, counter.vocabularies(opts.vocab_min_count)))


def _bayes_auc(truth_path: str, test_rows: list[np.ndarray], test_labels: list[np.ndarray]) -> float | None:
    from sklearn.metrics import roc_auc_score

    try:
        truth = np.load(truth_path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"truth file {truth_path} is not a readable .npy array: {e}") from None
    rows = np.concatenate(test_rows) if test_rows else np.empty(0, np.int64)
    labels = np.concatenate(test_labels) if test_labels else np.empty(0, np.int8)
    if rows.size == 0 or rows.max(initial=-1) >= truth.shape[0] or len(np.unique(labels)) < 2:
        return None
    return float(roc_auc_score(labels, truth[rows]))


def bayes_accuracy(truth_path: str, test_rows: list[np.ndarray], test_labels: list[np.ndarray], k: int) -> float | None:
    """Accuracy of the Bayes classifier argmax_c P(y=c | x) (the truth file holds P, shape (rows, k)) on the test rows."""
    try:
        truth = np.load(truth_path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"truth file {truth_path} is not a readable .npy array: {e}") from None
    if truth.ndim != 2 or truth.shape[1] != k:
        raise DataError(f"truth file {truth_path} has shape {truth.shape}; a {k}-class set needs (rows, {k})")
    rows = np.concatenate(test_rows) if test_rows else np.empty(0, np.int64)
    labels = np.concatenate(test_labels) if test_labels else np.empty(0, np.int8)
    if rows.size == 0 or rows.max(initial=-1) >= truth.shape[0]:
        return None
    return float(np.mean(np.argmax(truth[rows], axis=1) == labels))


def label_doc(num_classes: int, class_counts: dict[str, list[int]] | None = None) -> dict:
    """The labelled party's `label` manifest entry: the task and K (never given to a follower)."""
    doc = {"task": "binary" if num_classes == 2 else "multiclass", "num_classes": num_classes}
    if class_counts is not None:
        doc["class_counts"] = class_counts
    return doc


def prepare(input_path: str, out_dir: str, parties: list[PartyColumns], opts: PrepareOptions = PrepareOptions()) -> dict:
    """Write the party shards and manifest; return the manifest. Nothing is left half-written."""
    _validate(opts)
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not opts.force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    truth_path = opts.truth_path
    if truth_path is None and os.path.exists(input_path + ".truth.npy"):
        truth_path = input_path + ".truth.npy"
    if truth_path is not None and not os.path.exists(truth_path):
        raise DataError(f"truth file not found: {truth_path}")
    t0 = time.perf_counter()
    vocabs = _build_vocabularies(input_path, parties, opts) if opts.vocab_min_count is not None else None
    encoders = [_PartyEncoder(p, opts, vocabs) for p in parties]
    label_party = next(i for i, p in enumerate(parties) if p.label)

    parent = os.path.dirname(out_dir) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out_dir)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    stats = ReadStats()
    before_alignment = {p.name: 0 for p in parties}
    test_rows: list[np.ndarray] = []
    test_labels: list[np.ndarray] = []
    last_id = -1
    try:
        writers = {(p.name, s): _SplitWriter(os.path.join(tmp, p.name, s), p) for p in parties for s in SPLITS}
        for b in read_blocks(input_path, opts.strict, stats, num_classes=opts.num_classes):
            ids = _sample_ids(b)
            if ids[0] <= last_id or (ids.size > 1 and np.any(np.diff(ids) <= 0)):
                raise DataError(f"{input_path}: sample ids must be strictly increasing (sort the input by its id column); "
                                f"saw id {int(ids[np.argmax(np.diff(ids, prepend=last_id) <= 0)])} after a larger or equal one")
            last_id = int(ids[-1])
            keep_all = np.ones(ids.size, bool)
            for p in parties:
                held = uniform_from_ids(ids, opts.seed, _DROP_SALT + hash_name(p.name)) >= p.drop_fraction
                before_alignment[p.name] += int(held.sum())
                keep_all &= held
            u = uniform_from_ids(ids, opts.seed, _SPLIT_SALT)
            is_test = u < opts.test_fraction
            is_valid = ~is_test & (u < opts.test_fraction + opts.valid_fraction)
            for split, mask in (("train", keep_all & ~is_test & ~is_valid), ("valid", keep_all & is_valid),
                                ("test", keep_all & is_test)):
                rows = np.flatnonzero(mask)
                if rows.size == 0:
                    continue
                for enc in encoders:
                    w = writers[(enc.party.name, split)]
                    dense, missing, cat = enc.encode(b, rows)
                    w.ids.append(ids[rows])
                    w.dense.append(dense)
                    w.dense_missing.append(missing)
                    w.cat.append(cat)
                    if w.labels is not None:
                        w.labels.append(b.label[rows])
                        w.positives += int(b.label[rows].sum())
                        w.class_counts += np.bincount(b.label[rows], minlength=MAX_CLASSES)[:MAX_CLASSES]
                    id_digest_update(w.digest, ids[rows])
                if split == "test" and truth_path is not None:
                    test_rows.append(b.line_index[rows])
                    test_labels.append(b.label[rows])
        for w in writers.values():
            w.close()
        stream_seconds = time.perf_counter() - t0
        warn_bad_lines(input_path, stats)
        manifest = _manifest(input_path, parties, encoders, writers, opts, stats, before_alignment, label_party)
        if truth_path is not None and opts.num_classes > 2:
            manifest["bayes_test_accuracy"] = bayes_accuracy(truth_path, test_rows, test_labels, opts.num_classes)
            manifest["truth_path"] = os.path.abspath(truth_path)
        elif truth_path is not None:
            manifest["bayes_test_auc"] = _bayes_auc(truth_path, test_rows, test_labels)
            manifest["truth_path"] = os.path.abspath(truth_path)
        elapsed = time.perf_counter() - t0
        manifest["prepare_seconds"] = round(elapsed, 3)
        for p in parties:
            party_manifest = party_manifest_of(manifest, p)
            _write_json(os.path.join(tmp, p.name, "manifest.json"), party_manifest)
        if vocabs is not None:
            for p in parties:
                vdir = os.path.join(tmp, p.name, "vocab")
                os.makedirs(vdir)
                for c in p.categorical:
                    np.save(os.path.join(vdir, f"{c}.npy"), vocabs[c])
        _write_json(os.path.join(tmp, "manifest.json"), manifest)
        _commit(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    manifest["rows_per_second"] = stats.lines / max(stream_seconds, 1e-9)
    manifest["seconds_total"] = elapsed
    manifest["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return manifest


# What a feature party's manifest may hold: its own columns and sizes, row counts, id digests, the
# public split rule and transforms. Never label counts, the Bayes AUC of the true test labels, the
# labelled source's digest or path, or the truth file: each is computed from the leader's labels.
FOLLOWER_MANIFEST_KEYS = ("format_version", "split", "transforms", "sample_ids", "id_digest", "rows")


def party_manifest_of(manifest: dict, party: PartyColumns) -> dict:
    """One party's manifest.json: everything for the labelled party, an allow-list for the others."""
    if party.label:
        doc = {k: v for k, v in manifest.items() if k != "parties"}
    else:
        doc = {k: manifest[k] for k in FOLLOWER_MANIFEST_KEYS}
        doc["split"] = {k: manifest["split"][k] for k in ("test_fraction", "valid_fraction", "seed", "rule")}
    doc["party"] = manifest["parties"][party.name]
    return doc


def hash_name(name: str) -> int:
    """A stable integer per party name (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def _manifest(input_path, parties, encoders, writers, opts, stats, before_alignment, label_party) -> dict:
    party_docs = {}
    for p, enc in zip(parties, encoders):
        rows = {s: writers[(p.name, s)].ids.rows for s in SPLITS}
        party_docs[p.name] = {
            "name": p.name,
            "dense": list(p.dense),
            "categorical": list(p.categorical),
            "has_labels": p.label,
            "field_sizes": enc.field_sizes(),
            "drop_fraction": p.drop_fraction,
            "rows_before_alignment": before_alignment[p.name],
            "rows": rows,
        }
    label_name = parties[label_party].name
    digests = {s: writers[(label_name, s)].digest.hexdigest() for s in SPLITS}
    return {
        "format_version": FORMAT_VERSION,
        "source": {"path": os.path.abspath(input_path), "sha256": stats.sha256, "bytes": stats.bytes_read,
                   "lines": stats.lines, "good_rows": stats.good_rows, "malformed_rows_skipped": stats.bad_rows},
        "split": {"test_fraction": opts.test_fraction, "valid_fraction": opts.valid_fraction, "seed": opts.seed,
                  "rule": "u = splitmix64(sample_id ^ key(seed)) / 2**64; test iff u < test_fraction; "
                          "valid iff test_fraction <= u < test_fraction + valid_fraction; else train"},
        "transforms": {
            "dense": DENSE_TRANSFORM_DOC,
            "categorical": (
                f"hash: id = 2 + splitmix64(key ^ salt(column)) mod (hash_buckets - 2); 0 = missing; hash_buckets = {opts.hash_buckets}"
                if opts.vocab_min_count is None else
                f"vocabulary: values seen >= {opts.vocab_min_count} times get ids 2.. in sorted key order; 1 = out of vocabulary; 0 = missing"
            ),
            "categorical_mode": "hash" if opts.vocab_min_count is None else "vocabulary",
            "vocab_min_count": opts.vocab_min_count,
        },
        "sample_ids": "leading id column" if stats.has_id_column else "0-based line number of the input",
        "id_digest": digests,
        "rows": {s: writers[(label_name, s)].ids.rows for s in SPLITS},
        "positives": {s: writers[(label_name, s)].positives for s in SPLITS} if opts.num_classes == 2 else None,
        "label": label_doc(opts.num_classes, {s: writers[(label_name, s)].class_counts[:opts.num_classes].tolist()
                                              for s in SPLITS} if opts.num_classes > 2 else None),
        "unassigned_columns": unassigned_columns(parties),
        "parties": party_docs,
        "options": asdict(opts),
    }


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
