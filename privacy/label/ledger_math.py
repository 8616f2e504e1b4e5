"""The ledger's arithmetic: bottom-k sketches of sample ids, overlap estimates, and the composition of releases.

Pure functions. A sketch is the k smallest 64-bit keyed hashes of a dataset's sample ids (Broder 1997, "On the
resemblance and containment of documents"); two sketches are comparable only when taken under the same secret, which
is why the ledger keeps its own (privacy/label/store.py), apart from the label key that rotations replace.
"""

from __future__ import annotations

import math

import numpy as np

from privacy.label.keyed_random import keyed_words

SKETCH_K = 4096
STAGE_ONE = "lp2st_stage_one"  # the mechanism name of LP-2ST's stage-one release in the ledger


def id_sketch(secret: bytes, ids: np.ndarray) -> str:
    """The k smallest 64-bit hashes of the sample ids keyed by `secret` (all of them when fewer than k), as hex."""
    h = np.unique(keyed_words(secret, "ledger", "id-sketch", np.asarray(ids, dtype=np.int64)))
    return "".join(f"{int(x):016x}" for x in h[:SKETCH_K])


def _sketch_set(sketch: str) -> set[int]:
    return {int(sketch[i : i + 16], 16) for i in range(0, len(sketch), 16)}


def estimated_overlap(a: str, n_a: int, b: str, n_b: int) -> float:
    """Estimated number of ids two datasets share, from their bottom-k sketches (exact below k ids)."""
    sa, sb = _sketch_set(a), _sketch_set(b)
    union = sorted(sa | sb)[:SKETCH_K]
    if not union:
        return 0.0
    both = sum(1 for h in union if h in sa and h in sb)
    if both == 0:
        return 0.0
    if n_a <= SKETCH_K and n_b <= SKETCH_K:
        return float(len(sa & sb))
    j = both / len(union)
    return j / (1.0 + j) * (n_a + n_b)


def jsonable(v):
    """inf as the string "inf" (JSON has no infinity); anything else unchanged."""
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


def eps_value(v) -> float:
    """The float of a ledger eps ("inf" or a number)."""
    return math.inf if v == "inf" else float(v)


def composed_eps(releases: list[dict]) -> float:
    """The eps of ledger releases by basic composition (Dwork & Roth 2014, Thm. 3.16), except within one LP-2ST run:
    its stage one (mechanism STAGE_ONE) and the stage-two releases naming it in params.stage_one_release randomize
    disjoint rows, so the group costs the larger of the two sides (parallel composition; Ghazi et al. 2021, Alg. 3
    is eps-label-DP as a whole), and each further stage-two release (a new prior) adds its eps."""
    groups: dict[str, list[float]] = {}
    for r in releases:
        params = r.get("params") if isinstance(r.get("params"), dict) else {}
        group = params.get("stage_one_release") or r["release_id"]
        side = groups.setdefault(str(group), [0.0, 0.0])
        side[0 if r.get("mechanism") == STAGE_ONE else 1] += eps_value(r["eps"])
    return sum(max(stage_one, rest) for stage_one, rest in groups.values())
