"""Several raw files of one party prepared in parallel, one shard set per file, read back as one dataset.

Criteo's day files, for one, .gz included.

`python -m vfl.data prepare --party P --input day_0.gz day_1.gz ... --workers K` writes OUT/P/parts/part-NNNNN
(each a complete shard of one file, prepared by its own process) and OUT/P/manifest.json listing the parts.
Only hash mode (--hash-buckets) qualifies: a categorical value hashes to the same id in every file (the salts
derive from --seed), and the dense transform is fixed, so the parts share one id space; per-file vocabularies
would not. A sample's split is a keyed function of its id, so each part's splits are the dataset's.
PartyShard reads such a directory as the concatenation of its parts, each split in ascending id order (the
order a single shard has), so a party's row order is independent of the order of its files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from vfl.data.errors import DataError
from vfl.data.shard_writer import commit, write_json
from vfl.data.table import SCHEMA_FILE

PARTS_DIR = "parts"


def _one(args) -> tuple[int, dict, float]:
    from vfl.data.prepare import prepare_party

    i, path, out, party, opts, id_column, label_column = args
    t0 = time.perf_counter()
    m = prepare_party(path, out, party, opts, id_column, label_column)
    return i, {"rows": m["rows"], "source": m.get("source")}, time.perf_counter() - t0


def prepare_files(
    paths: list[str], out_dir: str, party, opts, workers: int = 0, id_column: str = "id", label_column: str = "label"
) -> dict:
    """Prepare each of a party's raw files (vfl/data/prepare.py's prepare_party) into out_dir/parts/part-NNNNN in up
    to `workers` processes (0: one per core); write out_dir/manifest.json listing them. Nothing is left half-written."""
    if opts.vocab_min_count is not None:
        raise DataError(
            "several input files need hash mode (--hash-buckets): a vocabulary fitted per file would give "
            "the same value different ids in different parts"
        )
    if len(set(map(os.path.abspath, paths))) != len(paths):
        raise DataError(f"--input names a file twice: {paths}")
    for p in paths:
        if not os.path.isfile(p):
            raise DataError(f"input file not found: {p}")
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not opts.force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    tmp = os.path.join(os.path.dirname(out_dir), f".{os.path.basename(out_dir)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    workers = workers or min(len(paths), os.cpu_count() or 1)
    names = [f"part-{i:05d}" for i in range(len(paths))]
    jobs = [
        (i, p, os.path.join(tmp, PARTS_DIR, names[i]), party, opts, id_column, label_column)
        for i, p in enumerate(paths)
    ]
    t0 = time.perf_counter()
    try:
        os.makedirs(os.path.join(tmp, PARTS_DIR))
        parts: list[dict] = [{} for _ in paths]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for done, (i, info, seconds) in enumerate(pool.map(_one, jobs), 1):
                parts[i] = {"name": names[i], "input": os.path.basename(paths[i]), "seconds": round(seconds, 2), **info}
                rows = sum(parts[i]["rows"].values())
                print(
                    f"prepare {party.name}: part {done}/{len(jobs)} ({paths[i]}): {rows} rows in {seconds:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        manifest = _combined_manifest(tmp, parts)
        manifest["seconds_total"] = time.perf_counter() - t0
        manifest["rows_per_second"] = sum(sum(p["rows"].values()) for p in parts) / max(manifest["seconds_total"], 1e-9)
        manifest["workers"] = workers
        first_schema = os.path.join(tmp, PARTS_DIR, names[0], SCHEMA_FILE)  # hash mode: every part's is the same
        shutil.copyfile(first_schema, os.path.join(tmp, SCHEMA_FILE))  # prediction reads the set's transforms
        write_json(os.path.join(tmp, "manifest.json"), manifest)
        commit(tmp, out_dir)  # fsynced, renamed into place; an old set's PSI caches kept where its ids are the same
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _combined_manifest(root: str, parts: list[dict]) -> dict:
    """Part 0's manifest (the party's columns and transforms, as it was written) with the whole dataset's
    ids, rows and source digest, and the list of parts."""
    docs = []
    for p in parts:
        with open(os.path.join(root, PARTS_DIR, p["name"], "manifest.json")) as f:
            docs.append(json.load(f))
    first = docs[0]
    same = lambda d: ({k: v for k, v in (d.get("party") or {}).items() if k != "rows"}, d.get("transforms"))
    for p, d in zip(parts[1:], docs[1:]):
        if same(d) != same(first):
            raise DataError(f"part {p['input']} was prepared with other columns or transforms than {parts[0]['input']}")
    shard = PartsView(root, [p["name"] for p in parts], first)
    out = dict(first)
    out["id_digest"] = {s: shard.digest(s) for s in shard.splits}
    out["rows"] = {s: int(sum(d["rows"][s] for d in docs)) for s in shard.splits}
    if isinstance(first.get("party"), dict) and "rows" in first["party"]:
        out["party"] = {**first["party"], "rows": out["rows"]}
    if first.get("source") is not None:  # the labelled party: the dataset (label-DP ledger) is the list of files
        out["source"] = {
            "sha256": hashlib.sha256("".join(d["source"]["sha256"] for d in docs).encode()).hexdigest(),
            "lines": int(sum(d["source"].get("lines") or 0 for d in docs)),
            "files": [p["input"] for p in parts],
            "malformed_rows_skipped": int(sum(d["source"].get("malformed_rows_skipped", 0) for d in docs)),
        }
    for key in ("bayes_test_auc", "bayes_test_accuracy", "seconds_total", "rows_per_second", "peak_rss_mib"):
        out.pop(key, None)
    out["parts"] = [{"name": p["name"], "input": p["input"], "seconds": p["seconds"]} for p in parts]
    return out


class PartsView:
    """The ids of each split over every part, in ascending order, checked to be disjoint."""

    splits = ("train", "valid", "test")

    def __init__(self, root: str, names: list[str], manifest: dict):
        self.root, self.names = root, names

    def ids(self, split: str) -> np.ndarray:
        ids = np.concatenate([np.load(os.path.join(self.root, PARTS_DIR, n, split, "ids.npy")) for n in self.names])
        out = np.sort(ids, kind="stable")
        if out.size > 1 and np.any(out[1:] == out[:-1]):
            raise DataError(f"the input files share sample ids in the {split} split: each id must be in one file only")
        return out

    def digest(self, split: str) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.ids(split), dtype="<i8").tobytes()).hexdigest()
