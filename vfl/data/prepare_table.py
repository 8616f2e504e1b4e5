"""One party's own table -> its shard, under the schema of its YAML (`data.schema`): fit on its training rows, apply.

Two passes over the party's file, nothing else opened:
1. fit: every declared column's transform on the rows whose public split (a function of the id, `split_of`) is
   train; the label's classes (multiclass without declared classes) on every row, the only case this pass reads it;
2. apply: every row's features and label, written to the split it belongs to.
A schema with nothing to fit (log1p, none and hash columns, the label's classes declared: the Criteo preset in hash
mode) is read once, applying as it goes. The shard's layout (`<split>/{ids,dense,dense_missing,cat,labels}.npy`,
labels int8 class ids or float32 regression values, `manifest.json`) is vfl/data/prepare.py's, plus `schema.json`
(the declarations and what was fitted) and `vocab/<n>.npy`. It is built in a temporary sibling and renamed into
place, so a failure (a bad label, an empty column) leaves nothing half-written. A row is never dropped for its label:
the whole file is read, then refused in one line naming every blank or invalid label's count and first lines
(vfl/data/bad_labels.py), since the shard's ids are what the leader brings to the private set intersection. A
`ShardHook` sees every block's split and adds to the manifest (the Criteo preset's truth file: vfl/data/truth_file.py).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Protocol

import numpy as np

from vfl.config.table_schema import SchemaConfig
from vfl.data.bad_labels import BadLabels
from vfl.data.errors import DataError
from vfl.data.manifest import party_manifest, party_manifest_of
from vfl.data.parties import PartyColumns
from vfl.data.prepare_options import PrepareOptions, split_of, validate_options
from vfl.data.readers.read_stats import ReadStats, warn_bad_lines
from vfl.data.readers.source_file import id_texts
from vfl.data.readers.table_file import IdCache, is_parquet, line_of, read_table_blocks
from vfl.data.shard_writer import ShardSplits, commit, temp_sibling, write_json
from vfl.data.table import SCHEMA_FILE, FittedTable
from vfl.splits import SPLITS

PROGRESS_EVERY_S = 10.0


class ShardHook(Protocol):
    """What a preset adds to the one path: it sees each written block (its rows' splits, 0 train 1 valid 2 test), then
    adds its entries to the manifest once the shard's splits are final (`splits`: vfl/data/shard_writer.py)."""

    def observe(self, block, which: np.ndarray) -> None: ...

    def annotate(self, manifest: dict, splits: ShardSplits) -> None: ...


def prepare_table(
    path: str,
    out_dir: str,
    party: str,
    schema: SchemaConfig,
    task: str | None,
    opts: PrepareOptions = PrepareOptions(),
    log=None,
    hook: ShardHook | None = None,
) -> dict:
    """The shard of `party` at out_dir from its own table at `path`; `task` (binary | multiclass | regression) for the
    labelled party, None for a feature party. Returns the full manifest (the follower's manifest.json is the
    allow-listed part)."""
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    labelled = task is not None
    out_dir = _check_request(party, schema, task, out_dir, opts)
    t0 = time.perf_counter()
    regression = task == "regression"
    fitted = FittedTable(schema, task)
    one_pass = fitted.fit_free
    fit = _Fit(fitted, opts, regression)
    ids = IdCache()  # the first pass's ids, for the second
    if one_pass:
        fitted.finish(path, allow_empty=True)  # nothing to fit: the columns' emptiness is checked after the pass
    else:
        fits_label = labelled and task == "multiclass" and schema.label.classes is None
        for block in read_table_blocks(
            path, schema, fits_label, False, opts.strict, fit.stats, digest=False, id_cache=ids
        ):
            fit.observe(block)
        fitted.finish(path)
    tmp = temp_sibling(out_dir)
    stats = ReadStats()
    label_dtype = np.float32 if regression else np.int8
    bad_labels = BadLabels(path, schema.label.column, lambda r: line_of(path, r)) if labelled else None
    try:
        splits = ShardSplits(tmp, len(fitted.dense_names), len(fitted.cat_names), labelled, label_dtype)
        progress = _Progress(say, party, stats, t0, None if one_pass else fit.stats.good_rows)
        for block in read_table_blocks(path, schema, labelled, regression, opts.strict, stats, id_cache=ids):
            progress.tick()
            which = split_of(block.sample_id, opts)
            if one_pass:
                fit.observe(block, which)
            fit.observe_label(block)
            splits.append(
                block.sample_id,
                which,
                lambda rows, block=block: fitted.apply(block, rows),
                lambda rows, block=block: fitted.label.encode(
                    block.label[rows], block.row_index[rows], path, lambda r: line_of(path, r), bad_labels
                ),
            )
            if hook is not None:
                hook.observe(block, which)
        _say_ignored(say, party, path, stats)
        if one_pass:
            fitted.check_seen(path)
        fit.check_label(path)
        if labelled:  # a row is never dropped for its label: a file with a blank or invalid one is refused
            bad_labels.refuse()
        splits.close()
        stream_seconds = time.perf_counter() - t0
        warn_bad_lines(path, stats)
        digests = splits.finish(path, None if is_parquet(path) else lambda i: id_texts(path, schema.id, i))
        label_counts = {s: _label_summary(splits.labels(s), fitted) for s in SPLITS} if labelled else {}
        columns = PartyColumns(party, tuple(fitted.dense_names), tuple(fitted.cat_names), labelled)
        manifest = _manifest(path, columns, fitted, splits.writers, digests, label_counts, opts, stats)
        if hook is not None:
            hook.annotate(manifest, splits)
        manifest["prepare_seconds"] = round(time.perf_counter() - t0, 3)
        _write_shard_files(tmp, party_manifest_of(manifest, columns), fitted)
        commit(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    manifest["rows_per_second"] = stats.good_rows / max(stream_seconds, 1e-9)
    manifest["seconds_total"] = time.perf_counter() - t0
    return manifest


def _check_request(party: str, schema: SchemaConfig, task: str | None, out_dir: str, opts: PrepareOptions) -> str:
    """The options, the schema against the party's role (a label column on the labelled party only, at least one
    feature column) and the output directory, before any row is read; the absolute output directory."""
    validate_options(opts)
    labelled = task is not None
    if labelled and schema.label is None:
        raise DataError(f"{party}: train.task is {task} but data.schema declares no label column (data.schema.label)")
    if not labelled and schema.label is not None:
        raise DataError(f"{party}: data.schema.label is for the leader (the label party); a follower declares none")
    if not schema.columns:
        raise DataError(f"{party}: data.schema.columns declares no feature column")
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not opts.force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    return out_dir


def _write_shard_files(tmp: str, party_manifest: dict, fitted) -> None:
    """The shard's manifest, its frozen schema (every fitted transform) and its vocabularies, into the temporary
    directory that is then renamed into place."""
    write_json(os.path.join(tmp, "manifest.json"), party_manifest)
    write_json(os.path.join(tmp, SCHEMA_FILE), fitted.to_doc())
    if fitted.vocab_files():
        os.makedirs(os.path.join(tmp, "vocab"))
        for name, vocab in fitted.vocab_files():
            np.save(os.path.join(tmp, name), vocab)


class _Progress:
    """Every PROGRESS_EVERY_S, the rows written (of the rows the fitting pass counted) and the rate, on `say`."""

    def __init__(self, say, party: str, stats: ReadStats, t0: float, total: int | None):
        self.say, self.party, self.stats, self.t0 = say, party, stats, t0
        self.of = "" if total is None else f" of {total}"
        self.last = time.perf_counter()

    def tick(self) -> None:
        if time.perf_counter() - self.last >= PROGRESS_EVERY_S:
            self.last = time.perf_counter()
            rate = self.stats.good_rows / max(self.last - self.t0, 1e-9)
            self.say(f"prepare {self.party}: {self.stats.good_rows}{self.of} rows, {rate:.0f} rows/s")


class _Fit:
    """What is fitted from the rows: the columns on the training rows, the label's classes on every row (where the
    block carries it); the regression label's range, seen as the shard is written; the stats of the pass that fits."""

    def __init__(self, fitted: FittedTable, opts: PrepareOptions, regression: bool):
        self.fitted, self.opts, self.regression = fitted, opts, regression
        self.stats = ReadStats()
        self.label_range = [np.inf, -np.inf]

    def observe(self, block, which: np.ndarray | None = None) -> None:
        which = split_of(block.sample_id, self.opts) if which is None else which
        self.fitted.fit_block(block, np.flatnonzero(which == 0))
        if block.label is not None:
            self.fitted.fit_labels(block)

    def observe_label(self, block) -> None:
        if self.regression and block.label.size:
            finite = block.label[np.isfinite(block.label)]
            if finite.size:
                lo, hi = self.label_range
                self.label_range = [min(lo, float(finite.min())), max(hi, float(finite.max()))]

    def check_label(self, path: str) -> None:
        lo, hi = self.label_range
        if self.regression and lo == hi:
            raise DataError(
                f"{path}: the regression label {self.fitted.schema.label.column!r} takes one value only ({lo:g}); "
                "there is nothing to learn"
            )


def _say_ignored(say, party: str, path: str, stats: ReadStats) -> None:
    if stats.ignored_columns:
        shown = stats.ignored_columns[:20]
        more = f" and {len(stats.ignored_columns) - 20} more" if len(stats.ignored_columns) > 20 else ""
        say(
            f"prepare {party}: {len(stats.ignored_columns)} column(s) of {path} not declared in data.schema, ignored: {shown}{more}"
        )


def _label_summary(labels: np.ndarray, fitted: FittedTable) -> dict | list:
    """Class counts of a split (classification), or the label's mean, spread and range (regression)."""
    task = fitted.label.task()
    if task.is_regression:
        v = labels.astype(np.float64)
        if not v.size:
            return {"rows": 0}
        return {
            "rows": int(v.size),
            "mean": float(v.mean()),
            "std": float(v.std()),
            "min": float(v.min()),
            "max": float(v.max()),
        }
    k = task.outputs if task.kind == "multiclass" else 2
    return np.bincount(labels.astype(np.int64), minlength=k)[:k].tolist()


def _manifest(path, columns: PartyColumns, fitted, writers, digests, label_counts, opts, stats) -> dict:
    transforms = {"schema": SCHEMA_FILE, "fitted_on": "this party's own training rows"}
    doc = party_manifest(
        path, columns, fitted.schema.id, fitted.field_sizes(), writers, digests, opts, stats, transforms
    )
    if fitted.label is not None:
        task = fitted.label.task()
        doc["label"] = {**fitted.label.to_doc(), "counts": label_counts}
        if task.kind == "binary":
            doc["positives"] = {s: int(c[1]) for s, c in label_counts.items()}
        if task.kind == "multiclass":
            doc["label"]["class_counts"] = label_counts
    return doc


def read_schema_doc(shard_dir: str) -> dict | None:
    """A shard's schema.json (None for shards prepared without a schema)."""
    p = os.path.join(shard_dir, SCHEMA_FILE)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)
