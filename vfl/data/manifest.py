"""What a shard's manifest.json records, and which of it a feature party may hold.

It records the party's columns, rows and id digests, the split rule and transforms, the label task, and the
Bayes-optimal test figures of synthetic data.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict

import numpy as np

from privacy.rank_metrics import roc_auc
from vfl.data.errors import DataError
from vfl.data.parties import PartyColumns, unassigned_columns
from vfl.data.transforms import DENSE_TRANSFORM_DOC
from vfl.splits import SPLITS

FORMAT_VERSION = 1


def id_digest_update(digest, ids: np.ndarray) -> None:
    """Fold sample ids into a running sha256 (the alignment check at the handshake uses it)."""
    digest.update(np.ascontiguousarray(ids, dtype="<i8").tobytes())


def id_digest(ids: np.ndarray) -> str:
    """The sha256 of a split's sample ids (int64 little-endian), as HELLO announces it."""
    d = hashlib.sha256()
    id_digest_update(d, ids)
    return d.hexdigest()


def bayes_test_auc(truth_path: str, test_rows: list[np.ndarray], test_labels: list[np.ndarray]) -> float | None:
    """The test AUC of the true click probabilities of synthetic data (the truth file), or None without both classes."""
    try:
        truth = np.load(truth_path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"truth file {truth_path} is not a readable .npy array: {e}") from None
    rows = np.concatenate(test_rows) if test_rows else np.empty(0, np.int64)
    labels = np.concatenate(test_labels) if test_labels else np.empty(0, np.int8)
    if rows.size == 0 or rows.max(initial=-1) >= truth.shape[0] or len(np.unique(labels)) < 2:
        return None
    return roc_auc(labels, truth[rows])


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


def party_manifest(
    path, party: PartyColumns, id_column, field_sizes, writers, digests, opts, stats, transforms
) -> dict:
    """One party's manifest up to its options, for a shard prepared from its own file `path` (the labelled party adds
    its label entries, and keeps all of it; party_manifest_of cuts a follower's)."""
    rows = {s: w.rows for s, w in zip(SPLITS, writers)}
    return {
        "format_version": FORMAT_VERSION,
        "source": source_doc(path, stats),
        "split": split_doc(opts),
        "transforms": transforms,
        "sample_ids": f"column {id_column!r} of the party's own file: decimal integers as themselves, "
        "other text hashed to an int64 (vfl/data/ids.py)",
        "id_digest": digests,
        "rows": rows,
        "party": {
            "name": party.name,
            "dense": list(party.dense),
            "categorical": list(party.categorical),
            "has_labels": party.label,
            "field_sizes": field_sizes,
            "rows": rows,
        },
        "options": asdict(opts),
    }


def source_doc(path: str, stats) -> dict:
    """A shard's source file as the manifest records it (its sha256 names the labelled dataset in the ledger)."""
    return {
        "path": os.path.abspath(path),
        "sha256": stats.sha256,
        "bytes": stats.bytes_read,
        "lines": stats.lines,
        "good_rows": stats.good_rows,
        "malformed_rows_skipped": stats.bad_rows,
    }


def split_doc(opts) -> dict:
    """The public split rule and its parameters (every party's manifest holds them)."""
    return {
        "test_fraction": opts.test_fraction,
        "valid_fraction": opts.valid_fraction,
        "seed": opts.seed,
        "rule": "u = splitmix64(sample_id ^ key(seed)) / 2**64; test iff u < test_fraction; "
        "valid iff test_fraction <= u < test_fraction + valid_fraction; else train",
    }


def transforms_doc(opts) -> dict:
    """The transforms in words, with their parameters (public: every party's manifest holds them)."""
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


def simulation_manifest(root: str, summary: dict, parties: list[PartyColumns], docs: dict, opts) -> dict:
    """OUT/manifest.json of the local simulation: the intersection every party will agree on, in the clear."""
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
