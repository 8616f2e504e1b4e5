"""scikit-learn's bundled 8x8 digits (1797 images, 10 classes, offline) as two vertical parties' shards.

Each image's 64 pixels (0..16) are split by image column: the leader (label party) holds columns 0-3
(32 pixels, `px<r><c>`), follower0 columns 4-7. The layout and manifests are those of
`python -m vfl.data prepare` (vfl/data/prepare.py): per-party train/valid/test splits by the same
public keyed-hash rule on the sample id (the image's index), dense values x / 16, no missing values,
no categorical fields; the leader's manifest records the task (10 classes) and its class counts, a
follower's the allow-listed keys only.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np

from privacy.public_hash import uniform_from_ids
from vfl.data.errors import DataError
from vfl.data.manifest import FORMAT_VERSION, SPLITS, id_digest_update, label_doc, party_manifest_of
from vfl.data.parties import PartyColumns
from vfl.data.prepare_options import SPLIT_SALT, PrepareOptions, validate_options
from vfl.data.shard_writer import commit, temp_sibling, write_json

CLASSES = 10
LEADER_COLUMNS = range(0, 4)
FOLLOWER_COLUMNS = range(4, 8)


def _pixel_names(cols) -> tuple[str, ...]:
    return tuple(f"px{r}{c}" for r in range(8) for c in cols)


def digits_parties() -> list[PartyColumns]:
    return [
        PartyColumns("leader", _pixel_names(LEADER_COLUMNS), (), True),
        PartyColumns("follower0", _pixel_names(FOLLOWER_COLUMNS), (), False),
    ]


def write_digits_shards(
    out_dir: str, test_fraction: float = 0.2, valid_fraction: float = 0.2, seed: int = 0, force: bool = False
) -> dict:
    """Write OUT/{leader,follower0}/{train,valid,test}/... and the manifests; return the full manifest."""
    from sklearn.datasets import load_digits

    opts = PrepareOptions(
        test_fraction=test_fraction, valid_fraction=valid_fraction, seed=seed, force=force, num_classes=CLASSES
    )
    validate_options(opts)
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not force:
        raise DataError(f"output directory already exists: {out_dir} (pass --force to replace it)")
    data = load_digits()
    images = np.asarray(data.images, dtype=np.float32)  # (n, 8, 8)
    labels = np.asarray(data.target, dtype=np.int8)
    ids = np.arange(labels.size, dtype=np.int64)
    u = uniform_from_ids(ids, seed, SPLIT_SALT)
    masks = {
        "test": u < test_fraction,
        "valid": (u >= test_fraction) & (u < test_fraction + valid_fraction),
        "train": u >= test_fraction + valid_fraction,
    }
    parties = digits_parties()
    columns = {"leader": list(LEADER_COLUMNS), "follower0": list(FOLLOWER_COLUMNS)}
    tmp = temp_sibling(out_dir)
    digests, rows, counts = {}, {}, {}
    try:
        for p in parties:
            x = (images[:, :, columns[p.name]] / 16.0).reshape(labels.size, -1)
            for split in SPLITS:
                m = masks[split]
                root = os.path.join(tmp, p.name, split)
                os.makedirs(root)
                np.save(os.path.join(root, "ids.npy"), ids[m])
                np.save(os.path.join(root, "dense.npy"), np.ascontiguousarray(x[m], np.float32))
                np.save(os.path.join(root, "dense_missing.npy"), np.zeros((int(m.sum()), x.shape[1]), np.uint8))
                np.save(os.path.join(root, "cat.npy"), np.zeros((int(m.sum()), 0), np.int32))
                if p.label:
                    np.save(os.path.join(root, "labels.npy"), labels[m])
                d = hashlib.sha256()
                id_digest_update(d, ids[m])
                digests[split], rows[split] = d.hexdigest(), int(m.sum())
                counts[split] = np.bincount(labels[m], minlength=CLASSES).tolist()
        manifest = _manifest(images, labels, parties, digests, rows, counts, test_fraction, valid_fraction, seed)
        for p in parties:
            write_json(os.path.join(tmp, p.name, "manifest.json"), party_manifest_of(manifest, p))
        write_json(os.path.join(tmp, "manifest.json"), manifest)
        commit(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _manifest(images, labels, parties, digests, rows, counts, test_fraction, valid_fraction, seed) -> dict:
    """The shard set's manifest: its source, split rule, transforms, rows per split and parties."""
    source = hashlib.sha256(images.tobytes() + labels.tobytes()).hexdigest()
    return {
        "format_version": FORMAT_VERSION,
        "source": {
            "path": "sklearn.datasets.load_digits",
            "sha256": source,
            "bytes": images.nbytes + labels.nbytes,
            "lines": int(labels.size),
            "good_rows": int(labels.size),
            "malformed_rows_skipped": 0,
        },
        "split": {
            "test_fraction": test_fraction,
            "valid_fraction": valid_fraction,
            "seed": seed,
            "rule": "u = splitmix64(sample_id ^ key(seed)) / 2**64; test iff u < test_fraction; "
            "valid iff test_fraction <= u < test_fraction + valid_fraction; else train",
        },
        "transforms": {
            "dense": "pixel / 16 (8x8 digits, values 0..16)",
            "categorical": "none",
            "categorical_mode": "none",
            "vocab_min_count": None,
        },
        "sample_ids": "index of the image in sklearn.datasets.load_digits",
        "id_digest": digests,
        "rows": rows,
        "label": label_doc(CLASSES, counts),
        "unassigned_columns": [],
        "parties": {
            p.name: {
                "name": p.name,
                "dense": list(p.dense),
                "categorical": [],
                "has_labels": p.label,
                "field_sizes": {},
                "drop_fraction": 0.0,
                "rows_before_alignment": int(labels.size),
                "rows": rows,
            }
            for p in parties
        },
        "options": {
            "dataset": "digits",
            "test_fraction": test_fraction,
            "valid_fraction": valid_fraction,
            "seed": seed,
        },
    }
