"""Raw Criteo-format data -> memory-mappable party shards, by the one table path (vfl/data/prepare_table.py).

Each party prepares its own raw file, alone (prepare_party): its columns are the Criteo preset's table schema
(vfl/data/presets/criteo.py: log1p dense columns, hashed or vocabulary categorical columns keyed by the hex scheme,
the leader's 0/1 or class-id label), prepared like any table; a truth file beside a synthetic file adds its
Bayes-optimal test figure (vfl/data/truth_file.py). The local simulation (prepare) splits one combined file into
per-party files first (vfl/data/raw_split.py).

Layout of one party's shard directory (written atomically: built in a temporary sibling, renamed):

    <party>/manifest.json                  columns, field sizes, rows, id digests, split rule, transforms
    <party>/schema.json                    the party's schema and what was fitted (vfl/data/table.py)
    <party>/vocab/NNNN.npy                 uint64 sorted keys of a vocabulary column (vocabulary mode)
    <party>/<split>/ids.npy                int64 (n,)   sample ids (vfl/data/ids.py), sorted ascending
    <party>/<split>/dense.npy              float32 (n, d) transformed dense values
    <party>/<split>/dense_missing.npy      uint8 (n, d)  1 where the raw value was missing
    <party>/<split>/cat.npy                int32 (n, c)  per-field ids (0 missing, 1 OOV)
    <party>/<split>/labels.npy             int8 (n,)     labelled party only
with split in {train, valid, test}: valid is for model selection (early stopping), test only reports.
A sample's split is a public function of its id (uniform_from_ids), so after the private set
intersection every party's splits agree without another message. Vocabularies are fitted on the
party's own training rows only; hash salts derive from the column names.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from dataclasses import asdict

from vfl.data.errors import DataError
from vfl.data.manifest import id_digest, party_manifest_of, simulation_manifest, transforms_doc
from vfl.data.parties import PartyColumns
from vfl.data.prepare_options import PrepareOptions, split_of, validate_options
from vfl.data.prepare_table import prepare_table
from vfl.data.presets.criteo import party_schema
from vfl.data.raw_split import hash_name, split_raw
from vfl.data.shard_writer import commit, temp_sibling, write_json
from vfl.data.truth_file import TruthFile


def prepare_party(
    path: str,
    out_dir: str,
    party: PartyColumns,
    opts: PrepareOptions = PrepareOptions(),
    id_column: str = "id",
    label_column: str = "label",
) -> dict:
    """One party's shard directory out_dir from its own raw file at `path` only (a header line, the id column, the
    party's columns, the leader's label column); returns the shard's full manifest.

    The returned dict is the labelled party's manifest; a feature party's manifest.json is the
    allow-listed part (FOLLOWER_MANIFEST_KEYS). Nothing is left half-written.
    """
    validate_options(opts)
    truth_path = opts.truth_path if party.label else None
    if party.label and truth_path is None and os.path.exists(path + ".truth.npy"):
        truth_path = path + ".truth.npy"
    truth = TruthFile(truth_path, opts.num_classes) if truth_path is not None else None
    schema = party_schema(
        party.dense,
        party.categorical,
        label_column if party.label else None,
        opts.hash_buckets,
        opts.vocab_min_count,
        id_column,
        opts.num_classes,
    )
    task = ("binary" if opts.num_classes == 2 else "multiclass") if party.label else None
    manifest = prepare_table(path, out_dir, party.name, schema, task, opts, hook=_CriteoNotes(opts, truth))
    manifest["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return manifest


class _CriteoNotes:
    """The preset's manifest entries: its transforms in words (with their options), and the truth file's figure."""

    def __init__(self, opts: PrepareOptions, truth: TruthFile | None):
        self.opts, self.truth = opts, truth

    def observe(self, block, which) -> None:
        if self.truth is not None:
            self.truth.observe(block, which)

    def annotate(self, manifest: dict, splits) -> None:
        manifest["transforms"] = {**transforms_doc(self.opts), **manifest["transforms"]}
        if self.truth is not None:
            self.truth.annotate(manifest, splits)


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
            docs[p.name] = prepare_party(summary["files"][p.name], os.path.join(tmp, p.name), p, inner)
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
