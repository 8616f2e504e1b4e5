"""The 40k-row shards the follower-view label attacks run on: synthetic rows with secret labels, two parties.

On them (~36k training labels, ~25% positive) a balanced accuracy has sd <= 0.0028; TOL = 0.017 is a 6-sigma
one-sided margin (P < 1e-9 per guess), and the union over the ~100 guesses of an attack keeps a false failure below
1e-7 per run.
"""

from __future__ import annotations

import pathlib

ROWS = 40_000
TOL = 0.017


def write_attack_shards(root: pathlib.Path) -> pathlib.Path:
    """ROWS synthetic rows (feature seed 3, a secret label seed) prepared into default two-party shards under root."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare
    from vfl.data.synth.criteo import write_synthetic

    write_synthetic(str(root / "rows.tsv"), ROWS, seed=3, max_vocab=2_000)
    prepare(str(root / "rows.tsv"), str(root / "shards"), load_parties(None), PrepareOptions(hash_buckets=2_000))
    return root / "shards"
