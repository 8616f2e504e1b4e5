"""Synthetic K-class data in Criteo format: the binary generator's features, a K-class label, P(y | x) per row.

Generative model. The feature columns are those of `vfl.data.synth.criteo.SyntheticCriteo` (public `seed`:
Zipf categoricals, heavy-tailed integers, Criteo's missing rates). The label model comes from the
secret `label_seed` (128 bits from the OS by default, never written):
  * class scores s_c(x) = b_c + sum_f E_f[value_f, c] over 18 informative categoricals held by BOTH
    parties (default split: 9 each) + W[:, c] . dense latents (both parties)
    + g * U[C1, c] * V[C14, c] (one cross-party interaction, which no single party can model);
  * P(y = c | x) = softmax(s(x))_c, label ~ Categorical(P(. | x)).
The truth file (FILE.truth.npy, float32, shape (rows, K)) holds P(y | x) per row, so the accuracy of
the Bayes classifier argmax_c P(y = c | x) on any split is known; meta.json gives its expectation
(mean_x max_c P(y = c | x)) over all rows.
"""

from __future__ import annotations

import time

import numpy as np

from privacy.durable_files import write_json
from vfl.data.errors import DataError
from vfl.data.readers.tokenizer import MAX_CLASSES
from vfl.data.synth.criteo import SyntheticCriteo, check_file_size, file_id_base, write_rows_and_truth

INFORMATIVE_CATEGORICALS = (0, 1, 3, 5, 6, 8, 9, 10, 12, 13, 14, 15, 16, 18, 20, 23, 24, 25)
CAT_SCALE = 0.45
DENSE_SCALE = 0.45
CROSS_GAIN = 0.8


class SyntheticMulticlass:
    """The fixed parameters of one K-class world: the feature world plus per-class effect tables."""

    def __init__(self, classes: int, seed: int = 0, max_vocab: int = 20_000, label_seed: int | None = None):
        if isinstance(classes, bool) or not isinstance(classes, int) or not 3 <= classes <= MAX_CLASSES:
            raise DataError(
                f"--classes must be an integer in [3, {MAX_CLASSES}] for a multi-class set, got {classes!r}"
            )
        self.world = SyntheticCriteo(seed, max_vocab, label_seed)  # features; its secret label_seed is ours too
        self.classes = classes
        rng = np.random.default_rng([self.world.label_seed, 0x3C1A55, classes])
        vocab = self.world.vocab
        self.cat_effect = {j: rng.normal(0.0, CAT_SCALE, (vocab[j], classes)) for j in INFORMATIVE_CATEGORICALS}
        self.dense_weight = rng.normal(0.0, DENSE_SCALE, (13, classes))
        self.cross_u = rng.normal(0.0, 1.0, (vocab[0], classes))  # C1 (leader) x C14 (follower0)
        self.cross_v = rng.normal(0.0, 1.0, (vocab[13], classes))
        self.class_bias = rng.normal(0.0, 0.3, classes)

    def probabilities(self, z: dict) -> np.ndarray:
        """P(y = c | x) for latents z: softmax of the class scores, (n, K) float64."""
        cat, cm, u, dm = z["cat"], z["cat_missing"], z["u"], z["dense_missing"]
        s = np.tile(self.class_bias, (cat.shape[0], 1))
        for j, eff in self.cat_effect.items():
            s += np.where(cm[:, j, None], 0.0, eff[cat[:, j]])
        s += np.where(dm, 0.0, u) @ self.dense_weight
        cross = self.cross_u[cat[:, 0]] * self.cross_v[cat[:, 13]]
        s += CROSS_GAIN * np.where((cm[:, 0] | cm[:, 13])[:, None], 0.0, cross)
        s -= s.max(axis=1, keepdims=True)
        e = np.exp(s)
        return e / e.sum(axis=1, keepdims=True)

    def sample(self, rng: np.random.Generator, n: int, label_rng: np.random.Generator):
        """n raw rows (Criteo columns, label = class id) and their P(y | x); features from rng, labels from label_rng."""
        z = self.world._latents(rng, n)
        p = self.probabilities(z)
        label = (label_rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
        label = np.minimum(label, self.classes - 1).astype(np.int8)
        return self.world.frame(z, label), p.astype(np.float32)


def write_synthetic_multiclass(
    out_path: str, rows: int, classes: int, seed: int = 0, max_vocab: int = 20_000, label_seed: int | None = None
) -> dict:
    """Write OUT.tsv (label = class id), OUT.truth.npy (rows, K) and OUT.meta.json atomically; return the meta."""
    check_file_size(rows, max_vocab)
    t0 = time.perf_counter()
    world = SyntheticMulticlass(classes, seed, max_vocab, label_seed)
    rng = np.random.default_rng([seed, 0xDA7A])
    label_rng = np.random.default_rng([world.world.label_seed, 0x1ABE1, classes])
    id_base = file_id_base(seed, label_seed)  # each generated file its own ids (see synth/criteo.py)
    counts = np.zeros(classes, np.int64)
    bayes = {"sum": 0.0}

    def tally(df, p: np.ndarray) -> None:
        counts[:] += np.bincount(df["label"].to_numpy(), minlength=classes)
        bayes["sum"] += float(p.max(axis=1).sum())

    write_rows_and_truth(out_path, rows, id_base, lambda n: world.sample(rng, n, label_rng), (classes,), tally)
    meta = {
        "rows": rows,
        "classes": classes,
        "seed": seed,
        "max_vocab": max_vocab,
        "label_seed": "secret: drawn from the OS, not recorded" if label_seed is None else label_seed,
        "class_frequencies": (counts / rows).tolist(),
        "bayes_accuracy": bayes["sum"] / rows,  # E_x max_c P(y = c | x): the Bayes classifier's expected accuracy
        "truth": out_path + ".truth.npy",
        "truth_shape": [rows, classes],
        "seconds": round(time.perf_counter() - t0, 3),
    }
    write_json(out_path + ".meta.json", meta, indent=2)
    return meta
