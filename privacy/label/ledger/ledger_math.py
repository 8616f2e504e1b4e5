"""The ledger's arithmetic: keyed id hashes, bottom-k sketches, overlap tests, migration and composition.

Keyed hashes of sample ids, their bottom-k sketches, exact overlap tests, the migration of older ledgers, and the
composition of releases.

Pure functions. A dataset's ids are held as the sorted set of their 64-bit hashes keyed by the ledger secret (never
the label key, which rotations replace: privacy/label/ledger/store.py). Its sketch is the k smallest of them (Broder 1997,
"On the resemblance and containment of documents"), hex in the ledger: the whole set when it holds at most k ids, and
the prefix of the set's file otherwise. Overlap is decided on whole sets, never estimated from sketches: the same id
always has the same hash, so a shared id is never missed; two different ids with one hash (about n^2 / 2^65 pairs,
3e-6 for 10M ids) can only make two datasets look overlapping, which over-counts.
"""

from __future__ import annotations

import math

import numpy as np

from privacy.keyed_random import keyed_words

SKETCH_K = 4096
STAGE_ONE = "lp2st_stage_one"  # the mechanism name of LP-2ST's stage-one release in the ledger
EMPTY = np.zeros(0, np.uint64)


def _sorted_distinct(h: np.ndarray) -> np.ndarray:
    h = np.sort(h)  # (np.unique hashes first on numpy 2: ~10x slower on millions of ids)
    return h[np.concatenate([[True], h[1:] != h[:-1]])] if h.size else h


def id_hashes(secret: bytes, ids: np.ndarray) -> np.ndarray:
    """The sorted distinct 64-bit hashes of the sample ids keyed by `secret` (uint64)."""
    return _sorted_distinct(keyed_words(secret, "ledger", "id-sketch", np.asarray(ids, dtype=np.int64)))


def sketch_hex(hashes: np.ndarray) -> str:
    """The k smallest of sorted hashes, 16 hex digits each."""
    return np.asarray(hashes[:SKETCH_K], dtype=">u8").tobytes().hex()


def sketch_hashes(sketch: str) -> np.ndarray:
    """The sorted hashes of a hex sketch."""
    return np.frombuffer(bytes.fromhex(sketch or ""), dtype=">u8").astype(np.uint64)


def id_sketch(secret: bytes, ids: np.ndarray) -> str:
    """The k smallest 64-bit hashes of the sample ids keyed by `secret` (all of them when fewer than k), as hex."""
    return sketch_hex(id_hashes(secret, ids))


def shares_any(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two sorted sets of hashes have an element in common (exact)."""
    small, large = (a, b) if a.size <= b.size else (b, a)
    if small.size == 0:
        return False
    pos = np.minimum(np.searchsorted(large, small), large.size - 1)
    return bool(np.any(large[pos] == small))


def merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted union of two sets of hashes (the bottom-k sketch of a union is the k smallest of it: exact)."""
    return _sorted_distinct(np.concatenate([a, b]).astype(np.uint64))


def one_run(releases: list[dict]) -> bool:
    """Whether ledger releases were recorded by a single run: one LP-2ST group (or one release), each used once."""
    groups = {_group(r) for r in releases}
    return len(groups) <= 1 and all(int(r.get("uses", 1)) == 1 for r in releases)


def migrate(doc: dict, fmt: int) -> dict:
    """A format-2 or format-3 ledger as format 4. Both kept the sketch of a dataset's first run only, so a dataset
    recorded by more than one run, or over more than k ids (its sketch is not its whole set), is marked `partial`
    (charged to every dataset, and every dataset to it). A format-2 sketch (or a format-3 entry still carrying one,
    `legacy_sketch_key`) was keyed by the label key of the time: it becomes the dataset's `legacy` part, comparable
    only with ids hashed under that key."""
    for name, ds in doc["datasets"].items():
        mine = [r for r in doc["releases"] if r.get("dataset") == name]
        legacy_key = ds.pop("legacy_sketch_key", None)
        rows = int(ds.get("rows", 0))
        if fmt == 2 or legacy_key is not None:
            key = legacy_key or next((r.get("key_fingerprint") for r in mine), None) or "unknown"
            ds["legacy"] = {"key": key, "sketch": ds.get("sketch", ""), "rows": rows}
            ds["sketch"], ds["rows"] = "", 0
        if not (one_run(mine) and rows <= SKETCH_K):
            ds["partial"] = (
                f"recorded by a format-{fmt} ledger, which kept the sample ids of this dataset's first run only"
                if rows <= SKETCH_K
                else f"recorded by a format-{fmt} ledger, which kept {SKETCH_K} of this dataset's {rows} sample ids"
            )
    doc.setdefault("migrated_from", fmt)
    return doc


def jsonable(v):
    """inf as the string "inf" (JSON has no infinity); anything else unchanged."""
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def eps_value(v) -> float:
    """The float of a ledger eps ("inf" or a number)."""
    return math.inf if v == "inf" else float(v)


def _group(r: dict) -> str:
    params = r.get("params") if isinstance(r.get("params"), dict) else {}
    return str(params.get("stage_one_release") or r["release_id"])


def composed_eps(releases: list[dict]) -> float:
    """The eps of ledger releases by basic composition (Dwork & Roth 2014, Thm. 3.16), except within one LP-2ST run:
    its stage one (mechanism STAGE_ONE) and the stage-two releases naming it in params.stage_one_release randomize
    disjoint rows, so the group costs the larger of the two sides (parallel composition; Ghazi et al. 2021, Alg. 3
    is eps-label-DP as a whole), and each further stage-two release (a new prior) adds its eps."""
    groups: dict[str, list[float]] = {}
    for r in releases:
        side = groups.setdefault(_group(r), [0.0, 0.0])
        side[0 if r.get("mechanism") == STAGE_ONE else 1] += eps_value(r["eps"])
    return sum(max(stage_one, rest) for stage_one, rest in groups.values())
