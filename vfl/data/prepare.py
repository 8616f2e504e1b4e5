"""Raw data -> memory-mappable party shards: each party prepares its own raw file, alone (prepare_party);
the local simulation splits one combined file into per-party files first (prepare).

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

import hashlib
import json
import os
import resource
import shutil
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from privacy.public_hash import uniform_from_ids
from vfl.data.ids import check_unique, id64_of_text
from vfl.data.npy_stream import NpyAppender
from vfl.data.parties import PartyColumns, unassigned_columns
from vfl.data.raw_split import hash_name, split_raw
from vfl.data.readers.criteo import DataError, ReadStats, warn_bad_lines
from vfl.data.readers.party import PartyBlock, PartySource, read_party_blocks
from vfl.data.readers.tokenizer import MAX_CLASSES
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

    def __init__(self, root: str, n_dense: int, n_cat: int, labelled: bool):
        os.makedirs(root)
        self.root = root
        self.ids = NpyAppender(os.path.join(root, "ids.npy"), np.int64)
        self.dense = NpyAppender(os.path.join(root, "dense.npy"), np.float32, (n_dense,))
        self.dense_missing = NpyAppender(os.path.join(root, "dense_missing.npy"), np.uint8, (n_dense,))
        self.cat = NpyAppender(os.path.join(root, "cat.npy"), np.int32, (n_cat,))
        self.labels = NpyAppender(os.path.join(root, "labels.npy"), np.int8) if labelled else None
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


def id_digest_update(digest, ids: np.ndarray) -> None:
    """Fold sample ids into a running sha256 (the alignment check at the handshake uses it)."""
    digest.update(np.ascontiguousarray(ids, dtype="<i8").tobytes())


def id_digest(ids: np.ndarray) -> str:
    d = hashlib.sha256()
    id_digest_update(d, ids)
    return d.hexdigest()


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


def _id_texts(src: PartySource, id64: int) -> str | None:
    """The id texts of a party file that map to id64 (for the duplicate-id error message)."""
    import pandas as pd

    from vfl.data.readers.party import sniff_header

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
        for b in read_party_blocks(src, opts.strict, ReadStats()):
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
        manifest = _party_manifest(src, party, enc, writers, digests, positives, opts, stats, class_counts)
        if truth_path is not None and opts.num_classes > 2:
            manifest["bayes_test_accuracy"] = bayes_accuracy(truth_path, test_rows, test_labels, opts.num_classes)
            manifest["truth_path"] = os.path.abspath(truth_path)
        elif truth_path is not None:
            manifest["bayes_test_auc"] = _bayes_auc(truth_path, test_rows, test_labels)
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


def _party_manifest(src, party, enc, writers, digests, positives, opts, stats, class_counts) -> dict:
    rows = {s: w.rows for s, w in zip(SPLITS, writers)}
    doc = {
        "format_version": FORMAT_VERSION,
        "source": {
            "path": os.path.abspath(src.path),
            "sha256": stats.sha256,
            "bytes": stats.bytes_read,
            "lines": stats.lines,
            "good_rows": stats.good_rows,
            "malformed_rows_skipped": stats.bad_rows,
        },
        "split": {
            "test_fraction": opts.test_fraction,
            "valid_fraction": opts.valid_fraction,
            "seed": opts.seed,
            "rule": "u = splitmix64(sample_id ^ key(seed)) / 2**64; test iff u < test_fraction; "
            "valid iff test_fraction <= u < test_fraction + valid_fraction; else train",
        },
        "transforms": _transforms_doc(opts),
        "sample_ids": f"column {src.id_column!r} of the party's own file: decimal integers as themselves, "
        "other text hashed to an int64 (vfl/data/ids.py)",
        "id_digest": digests,
        "rows": rows,
        "party": {
            "name": party.name,
            "dense": list(party.dense),
            "categorical": list(party.categorical),
            "has_labels": party.label,
            "field_sizes": enc.field_sizes(),
            "rows": rows,
        },
        "options": asdict(opts),
    }
    if party.label:
        doc["positives"] = positives if opts.num_classes == 2 else None
        doc["label"] = label_doc(opts.num_classes, class_counts if opts.num_classes > 2 else None)
    return doc


def _transforms_doc(opts: PrepareOptions) -> dict:
    return {
        "dense": DENSE_TRANSFORM_DOC,
        "categorical": (
            f"hash: id = 2 + splitmix64(key ^ salt(column)) mod (hash_buckets - 2); 0 = missing; hash_buckets = {opts.hash_buckets}"
            if opts.vocab_min_count is None
            else f"vocabulary (fitted on this party's own file): values seen >= {opts.vocab_min_count} times get ids 2.. "
            f"in sorted key order; 1 = out of vocabulary; 0 = missing"
        ),
        "categorical_mode": "hash" if opts.vocab_min_count is None else "vocabulary",
        "vocab_min_count": opts.vocab_min_count,
    }


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
        manifest = _simulation_manifest(tmp, summary, parties, docs, opts)
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


def _simulation_manifest(
    root: str, summary: dict, parties: list[PartyColumns], docs: dict, opts: PrepareOptions
) -> dict:
    label = next(p for p in parties if p.label)
    ids = {p.name: {s: np.load(os.path.join(root, p.name, s, "ids.npy")) for s in SPLITS} for p in parties}
    common = {s: ids[label.name][s] for s in SPLITS}
    for p in parties:
        for s in SPLITS:
            common[s] = np.intersect1d(common[s], ids[p.name][s], assume_unique=True)
    positives, class_counts = {}, {}
    for s in SPLITS:
        lab = np.load(os.path.join(root, label.name, s, "labels.npy"))
        keep = np.isin(ids[label.name][s], common[s])
        positives[s] = int(lab[keep].sum())
        class_counts[s] = np.bincount(lab[keep].astype(np.int64), minlength=opts.num_classes)[
            : opts.num_classes
        ].tolist()
    party_docs = {}
    for p in parties:
        d = dict(docs[p.name]["party"])
        d["drop_fraction"] = p.drop_fraction
        d["rows_before_alignment"] = int(sum(d["rows"].values()))
        party_docs[p.name] = d
    lead = docs[label.name]
    doc = {
        "format_version": FORMAT_VERSION,
        "source": summary["source"],
        "split": lead["split"],
        "transforms": lead["transforms"],
        "sample_ids": summary["sample_ids"],
        "id_digest": {s: id_digest(common[s]) for s in SPLITS},
        "rows": {s: int(common[s].size) for s in SPLITS},
        "positives": positives if opts.num_classes == 2 else None,
        "label": label_doc(opts.num_classes, class_counts if opts.num_classes > 2 else None),
        "unassigned_columns": unassigned_columns(parties),
        "raw_files": {p.name: os.path.join("raw", f"{p.name}.tsv") for p in parties},
        "parties": party_docs,
        "options": asdict(opts),
    }
    for key in ("bayes_test_auc", "bayes_test_accuracy"):
        if key in lead:
            doc[key] = lead[key]
    return doc


# What a feature party's manifest may hold: its own columns and sizes, row counts, id digests, the
# public split rule and transforms. Never label counts, the Bayes AUC of the true test labels, the
# labelled source's digest or path, or the truth file: each is computed from the leader's labels.
FOLLOWER_MANIFEST_KEYS = ("format_version", "split", "transforms", "sample_ids", "id_digest", "rows")


def party_manifest_of(manifest: dict, party: PartyColumns) -> dict:
    """One party's manifest.json: everything for the labelled party, an allow-list for the others."""
    own = (
        manifest["party"] if "party" in manifest else manifest["parties"][party.name]
    )  # one party's, or a combined one
    if party.label:
        doc = {k: v for k, v in manifest.items() if k != "parties"}
    else:
        doc = {k: manifest[k] for k in FOLLOWER_MANIFEST_KEYS}
        doc["split"] = {k: manifest["split"][k] for k in ("test_fraction", "valid_fraction", "seed", "rule")}
    doc["party"] = own
    return doc


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


__all__ = ["FOLLOWER_MANIFEST_KEYS", "PrepareOptions", "hash_name", "id_digest", "prepare", "prepare_party", "split_of"]
