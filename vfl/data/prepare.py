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

import os
import resource
import shutil
import sys
import time
from dataclasses import asdict

import numpy as np

from vfl.data.errors import DataError
from vfl.data.manifest import (
    SPLITS,
    bayes_accuracy,
    bayes_test_auc,
    id_digest,
    label_doc,
    party_manifest,
    party_manifest_of,
    simulation_manifest,
    transforms_doc,
)
from vfl.data.parties import PartyColumns
from vfl.data.prepare_options import PrepareOptions, split_of, validate_options
from vfl.data.presets.criteo import party_schema
from vfl.data.raw_split import hash_name, split_raw
from vfl.data.readers.party_file import PartySource, read_party_blocks
from vfl.data.readers.read_stats import ReadStats, warn_bad_lines
from vfl.data.readers.source_file import id_texts
from vfl.data.shard_writer import ShardSplits, commit, temp_sibling, write_json
from vfl.data.table import FittedTable


def prepare_party(src: PartySource, out_dir: str, party: PartyColumns, opts: PrepareOptions = PrepareOptions()) -> dict:
    """One party's shard directory out_dir from its own raw file only; returns the shard's full manifest.

    The returned dict is the labelled party's manifest; a feature party's manifest.json is the
    allow-listed part (FOLLOWER_MANIFEST_KEYS). Nothing is left half-written.
    """
    validate_options(opts)
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not opts.force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    truth_path = opts.truth_path if party.label else None
    if party.label and truth_path is None and os.path.exists(src.path + ".truth.npy"):
        truth_path = src.path + ".truth.npy"
    if truth_path is not None and not os.path.exists(truth_path):
        raise DataError(f"truth file not found: {truth_path}")
    t0 = time.perf_counter()
    schema = party_schema(
        party.dense,
        party.categorical,
        src.label_column if party.label else None,
        opts.hash_buckets,
        opts.vocab_min_count,
        src.id_column,
        opts.num_classes,
    )
    enc = FittedTable(schema, None)  # the label is the reader's: 0 or 1, or a class id 0..K-1
    if opts.vocab_min_count is not None:  # fitted on this party's own file only, every row of it
        for b in read_party_blocks(src, opts.strict, ReadStats(), digest=False):
            enc.fit_block(b, slice(None))
    enc.finish(src.path, allow_empty=True)
    tmp = temp_sibling(out_dir)
    stats = ReadStats()
    test_rows: list[np.ndarray] = []
    test_labels: list[np.ndarray] = []
    try:
        splits = ShardSplits(tmp, len(party.dense), len(party.categorical), party.label)
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
            splits.append(b.sample_id, which, lambda rows, b=b: enc.apply(b, rows), lambda rows, b=b: b.label[rows])
            test = np.flatnonzero(which == 2)
            if truth_path is not None and test.size:
                test_rows.append(b.row_index[test])
                test_labels.append(b.label[test])
        splits.close()
        stream_seconds = time.perf_counter() - t0
        warn_bad_lines(src.path, stats)
        digests = splits.finish(src.path, lambda i: id_texts(src.path, src.id_column, i))
        positives, class_counts = {}, {}
        for s in SPLITS if party.label else ():
            lab = splits.labels(s)
            positives[s] = int(lab.sum())
            class_counts[s] = np.bincount(lab.astype(np.int64), minlength=opts.num_classes)[: opts.num_classes].tolist()
        manifest = party_manifest(
            src.path,
            party,
            src.id_column,
            enc.field_sizes(),
            splits.writers,
            digests,
            opts,
            stats,
            transforms_doc(opts),
        )
        if party.label:
            manifest["positives"] = positives if opts.num_classes == 2 else None
            manifest["label"] = label_doc(opts.num_classes, class_counts if opts.num_classes > 2 else None)
        if truth_path is not None and opts.num_classes > 2:
            manifest["bayes_test_accuracy"] = bayes_accuracy(truth_path, test_rows, test_labels, opts.num_classes)
            manifest["truth_path"] = os.path.abspath(truth_path)
        elif truth_path is not None:
            manifest["bayes_test_auc"] = bayes_test_auc(truth_path, test_rows, test_labels)
            manifest["truth_path"] = os.path.abspath(truth_path)
        elapsed = time.perf_counter() - t0
        manifest["prepare_seconds"] = round(elapsed, 3)
        write_json(os.path.join(tmp, "manifest.json"), party_manifest_of(manifest, party))
        if opts.vocab_min_count is not None:
            vdir = os.path.join(tmp, "vocab")
            os.makedirs(vdir)
            for c in enc.categorical_columns():
                np.save(os.path.join(vdir, f"{c.name}.npy"), c.vocab)
        commit(tmp, out_dir)
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
    validate_options(opts)
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not opts.force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    t0 = time.perf_counter()
    tmp = temp_sibling(out_dir)
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
                write_json(os.path.join(tmp, p.name, "manifest.json"), party_manifest_of(docs[p.name], p))
        manifest = simulation_manifest(tmp, summary, parties, docs, opts)
        manifest["prepare_seconds"] = round(time.perf_counter() - t0, 3)
        write_json(os.path.join(tmp, "manifest.json"), manifest)
        commit(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    elapsed = time.perf_counter() - t0
    manifest["rows_per_second"] = summary["source"]["lines"] / max(elapsed, 1e-9)
    manifest["seconds_total"] = elapsed
    manifest["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return manifest


__all__ = ["PrepareOptions", "hash_name", "id_digest", "prepare", "prepare_party", "split_of"]
