"""Synthetic Criteo-format data: raw TSV that looks like Criteo, plus every row's true click probability.

Generative model. The features come from generators seeded by the public `seed`; the label model
(effect tables, bias) and the label draws come from a separate `label_seed`, which by default is
128 bits from the OS and is never written anywhere. A follower that re-runs `synth --seed 0` then
regenerates the leader's feature columns, but neither the true labels nor the truth file: on
synthetic data, too, the labels are the leader's secret, as they would be on real data.
  * categoricals: value rank k ~ Zipf(1.1) over a per-field vocabulary (Criteo's cardinalities,
    capped), written as an 8-hex-digit hash of (field, k); Criteo-like missing rates
    (C22 ~82%, C19/C20/C25/C26 ~44%);
  * integers: lognormal latents u ~ N(0, 1), x = floor(exp(mu + sigma * u)) - shift, so they are
    heavy-tailed; I2 goes down to -1 like Criteo's; missing rates follow Criteo (I12 ~78%);
  * logit = bias + main effects of categorical values and dense latents on BOTH parties
    + within-party pairwise interactions (low-rank category x category, dense x dense: the
    deep part's job) + one cross-party category x category interaction (only a top model
    that sees more than a scalar per party can use it);
  * bias is calibrated so that about 25% of labels are positive; label ~ Bernoulli(sigmoid(logit)).
The truth file (FILE.truth.npy, float32) holds sigmoid(logit) per row, so the Bayes-optimal AUC
of any split is known exactly.

Sample ids. Every generated file draws its own ids (a leading id column): splitmix64(base + row) read as int64,
distinct within the file (splitmix64 is a bijection), with a fresh 64-bit base per file from the OS. Two generated
files therefore hold different people, as two real data sets would, and the label-DP ledger, which charges releases
on overlapping ids, does not count a second generated file as the first one's customers. A file written with an
explicit `label_seed` (tests, benchmarks) derives its base from (seed, label_seed) by SHA-256, so it is reproducible
and reveals nothing of the label seed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import time

import numpy as np
import pandas as pd

from privacy.durable_files import PendingFile, write_json
from privacy.public_hash import splitmix64
from vfl.data.errors import DataError
from vfl.data.npy_stream import NpyAppender
from vfl.data.presets.criteo import CATEGORICAL_COLUMNS, DENSE_COLUMNS
from vfl.obs.progress import bar

# Kaggle Criteo cardinalities of C1..C26, capped so the generator stays small.
CRITEO_CARDINALITY = [
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
]
CAT_MISSING = [
    0,
    0,
    0.034,
    0.034,
    0,
    0.12,
    0,
    0,
    0,
    0,
    0,
    0.034,
    0,
    0,
    0,
    0.034,
    0,
    0,
    0.44,
    0.44,
    0.034,
    0.82,
    0,
    0.034,
    0.44,
    0.44,
]
DENSE_MISSING = [0.45, 0, 0.21, 0.22, 0.026, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.78, 0.22]
DENSE_MU = [0.5, 1.5, 2.5, 1.8, 8.5, 4.0, 1.5, 2.3, 3.5, 0.3, 0.8, 0.3, 1.6]
DENSE_SIGMA = [1.0, 1.8, 1.6, 1.0, 2.0, 1.8, 1.6, 1.2, 1.4, 0.6, 0.9, 1.0, 1.2]
DENSE_SHIFT = [1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]  # I2 may be -1
ZIPF_EXPONENT = 1.1
POSITIVE_RATE = 0.25
BLOCK_ROWS = 100_000
# Party of each column under the default split: leader I1-I7, C1-C13; follower0 the rest.
_LEADER_DENSE, _LEADER_CAT = 7, 13


class SyntheticCriteo:
    """The fixed parameters of one synthetic world (effect tables, calibrated bias)."""

    def __init__(self, seed: int = 0, max_vocab: int = 20_000, label_seed: int | None = None):
        self.label_seed = secrets.randbits(128) if label_seed is None else int(label_seed)
        rng = np.random.default_rng([self.label_seed, 0xC1])
        self.vocab = [min(c, max_vocab) for c in CRITEO_CARDINALITY]
        ranks = [np.arange(1, v + 1, dtype=np.float64) for v in self.vocab]
        self.cdf = [np.cumsum(r**-ZIPF_EXPONENT) / np.sum(r**-ZIPF_EXPONENT) for r in ranks]
        self.hex_tables = [
            np.array(
                [
                    f"{h:08x}"
                    for h in (splitmix64(np.arange(v, dtype=np.uint64) + np.uint64(j << 40)) & np.uint64(0xFFFFFFFF))
                ],
                dtype=object,
            )
            for j, v in enumerate(self.vocab)
        ]
        # main effects: 9 informative categoricals and 4 informative dense per party
        cat_scale = np.zeros(26)
        for j in (0, 1, 3, 5, 6, 8, 9, 10, 12, 13, 14, 15, 16, 18, 20, 23, 24, 25):
            cat_scale[j] = 0.55
        self.cat_effect = [rng.normal(0.0, s, v) if s else None for s, v in zip(cat_scale, self.vocab)]
        self.dense_weight = np.array([0.35, -0.3, 0.25, 0.3, 0, 0.2, 0, -0.3, 0.25, 0.3, 0, -0.25, 0.2])
        self.dense_missing_effect = rng.normal(0.0, 0.15, 13)
        rank = 4
        # within-party low-rank interactions: (field a, field b) pairs
        self.pairs = [(1, 5), (3, 10), (14, 17), (15, 23), (0, 13)]  # last one crosses parties (C1 x C14)
        self.pair_gain = [0.8, 0.8, 0.8, 0.8, 0.6]
        self.pair_u = [rng.normal(0, 1 / np.sqrt(rank), (self.vocab[a], rank)) for a, _ in self.pairs]
        self.pair_v = [rng.normal(0, 1 / np.sqrt(rank), (self.vocab[b], rank)) for _, b in self.pairs]
        self.dense_pairs = [(0, 2, 0.35), (7, 8, 0.35)]  # I1 x I3 (leader), I8 x I9 (follower)
        self.bias = 0.0
        calib = self._latents(np.random.default_rng([seed, 0xCA11B]), 100_000)
        lo, hi = -10.0, 10.0
        base = self._logit(calib)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if np.mean(1 / (1 + np.exp(-(base + mid)))) < POSITIVE_RATE:
                lo = mid
            else:
                hi = mid
        self.bias = 0.5 * (lo + hi)

    def _latents(self, rng: np.random.Generator, n: int) -> dict:
        cat = np.empty((n, 26), np.int64)
        for j in range(26):
            cat[:, j] = np.minimum(np.searchsorted(self.cdf[j], rng.random(n)), self.vocab[j] - 1)
        cat_missing = rng.random((n, 26)) < np.array(CAT_MISSING)
        u = rng.standard_normal((n, 13))
        dense_missing = rng.random((n, 13)) < np.array(DENSE_MISSING)
        return {"cat": cat, "cat_missing": cat_missing, "u": u, "dense_missing": dense_missing}

    def _logit(self, z: dict) -> np.ndarray:
        cat, cm, u, dm = z["cat"], z["cat_missing"], z["u"], z["dense_missing"]
        logit = np.full(cat.shape[0], self.bias)
        for j, eff in enumerate(self.cat_effect):
            if eff is not None:
                logit += np.where(cm[:, j], 0.0, eff[cat[:, j]])
        uo = np.where(dm, 0.0, u)
        logit += uo @ self.dense_weight + dm @ self.dense_missing_effect
        for (a, b), g, U, V in zip(self.pairs, self.pair_gain, self.pair_u, self.pair_v):
            inter = np.einsum("nr,nr->n", U[cat[:, a]], V[cat[:, b]])
            logit += g * np.where(cm[:, a] | cm[:, b], 0.0, inter)
        for a, b, g in self.dense_pairs:
            logit += g * np.tanh(uo[:, a] * uo[:, b])
        return logit

    def sample(
        self, rng: np.random.Generator, n: int, label_rng: np.random.Generator
    ) -> tuple[pd.DataFrame, np.ndarray]:
        """n raw rows as a DataFrame in Criteo column order, and their true click probabilities;
        features from `rng`, labels from `label_rng`."""
        z = self._latents(rng, n)
        p = 1.0 / (1.0 + np.exp(-self._logit(z)))
        label = (label_rng.random(n) < p).astype(np.int8)
        return self.frame(z, label), p.astype(np.float32)

    def frame(self, z: dict, label: np.ndarray) -> pd.DataFrame:
        """Raw rows in Criteo column order from latents z and a label column."""
        cols = {"label": label}
        for i, name in enumerate(DENSE_COLUMNS):
            x = np.floor(np.exp(DENSE_MU[i] + DENSE_SIGMA[i] * z["u"][:, i])).astype(np.int64) - DENSE_SHIFT[i] + 1
            cols[name] = pd.array(np.where(z["dense_missing"][:, i], 0, x), dtype="Int64")
            cols[name][z["dense_missing"][:, i]] = pd.NA
        for j, name in enumerate(CATEGORICAL_COLUMNS):
            s = self.hex_tables[j][z["cat"][:, j]]
            s[z["cat_missing"][:, j]] = ""
            cols[name] = s
        return pd.DataFrame(cols)


def file_id_base(seed: int, label_seed: int | None) -> int:
    """The 64-bit base of one generated file's ids: from the OS, or from SHA-256(seed, label_seed) when the
    label seed is given (a reproducible file)."""
    if label_seed is None:
        return secrets.randbits(64)
    digest = hashlib.sha256(f"vfl-synthetic-ids/v1:{seed}:{label_seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def file_ids(base: int, start: int, n: int) -> np.ndarray:
    """int64 ids of rows start .. start+n-1 of the file with this base (distinct: splitmix64 is a bijection)."""
    rows = np.arange(start, start + n, dtype=np.uint64) + np.uint64(base)
    return splitmix64(rows).view(np.int64)


def check_file_size(rows: int, max_vocab: int) -> None:
    """DataError unless a generated file has at least one row and each categorical at least two values."""
    if rows < 1:
        raise DataError(f"--rows must be >= 1, got {rows}")
    if max_vocab < 2:
        raise DataError(f"--max-vocab must be >= 2, got {max_vocab}")


def write_rows_and_truth(
    out_path: str, rows: int, id_base: int, sample, truth_row_shape: tuple[int, ...] = (), tally=None, show=False
) -> None:
    """Write OUT.tsv (the ids of `id_base` first) and OUT.truth.npy (float32 P per row) in blocks of BLOCK_ROWS, each
    fsynced and renamed into place only when complete. sample(n): a block's (frame, P); tally(frame, P) sees every
    block; show: a progress bar."""
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    pending = [PendingFile(out_path), PendingFile(out_path + ".truth.npy")]  # fsynced and renamed when complete
    tmp_tsv, tmp_truth = pending[0].tmp, pending[1].tmp
    truth = NpyAppender(tmp_truth, np.float32, truth_row_shape)
    try:
        with open(tmp_tsv, "w", newline="\n") as f, _progress_bar(rows, show) as progress:
            done = 0
            while done < rows:
                n = min(BLOCK_ROWS, rows - done)
                df, p = sample(n)
                df.insert(0, "id", file_ids(id_base, done, n))
                df.to_csv(f, sep="\t", header=False, index=False, lineterminator="\n")
                truth.append(p)
                if tally is not None:
                    tally(df, p)
                done += n
                if progress is not None:
                    progress.update(n)
        truth.close()
        for file in pending:
            file.commit()
    except BaseException:
        truth.close()
        for file in pending:
            file.discard()
        raise


def _progress_bar(rows: int, show: bool):
    return bar(total=rows, desc="synth", unit="rows") if show else contextlib.nullcontext()


def write_synthetic(
    out_path: str, rows: int, seed: int = 0, max_vocab: int = 20_000, label_seed: int | None = None
) -> dict:
    """Write OUT.tsv, OUT.truth.npy and OUT.meta.json atomically; return the meta document.
    label_seed None (the default) draws a secret one that is not recorded."""
    check_file_size(rows, max_vocab)
    t0 = time.perf_counter()
    world = SyntheticCriteo(seed, max_vocab, label_seed)
    rng = np.random.default_rng([seed, 0xDA7A])
    label_rng = np.random.default_rng([world.label_seed, 0x1ABE1])
    id_base = file_id_base(seed, label_seed)
    totals = {"positives": 0, "psum": 0.0}

    def tally(df: pd.DataFrame, p: np.ndarray) -> None:
        totals["positives"] += int(df["label"].sum())
        totals["psum"] += float(p.sum())

    write_rows_and_truth(out_path, rows, id_base, lambda n: world.sample(rng, n, label_rng), (), tally, show=True)
    meta = {
        "rows": rows,
        "seed": seed,
        "max_vocab": max_vocab,
        "label_seed": "secret: drawn from the OS, not recorded" if label_seed is None else label_seed,
        "sample_ids": "leading id column, splitmix64(base + row), a fresh base per file",
        "positive_rate": totals["positives"] / rows,
        "mean_true_probability": totals["psum"] / rows,
        "bias": world.bias,
        "truth": out_path + ".truth.npy",
        "seconds": round(time.perf_counter() - t0, 3),
    }
    write_json(out_path + ".meta.json", meta, indent=2)
    return meta
