"""LabelDP: randomized response on binary, one-hot or class-id labels (MindSpore Federated's API, minus its flaws).

Two forms:
* once per sample (use this): `LabelDP(eps, dataset="clicks-2026-11")(labels, ids=sample_ids)` draws
  every sample's noise from a keyed PRF of (secret key, release, sample id), so a sample gets the same
  noisy label on every call, epoch and run. The release is (dataset name, eps, K, key): another eps or
  another label set is another release with independent draws. The key and a ledger of releases live
  in the leader's store (privacy/label/store.py; `store_dir`, `key_file`), created on first use;
  `key=` bytes instead skips the ledger. Cost: `privacy_cost()` = rr_cost(eps), (eps, 0) per sample
  for the release however many times it is called; the ledger adds up distinct releases.
* fresh noise per call (MindSpore's `LabelDP(eps=...)(labels)`, kept for compatibility): every call
  is a new eps-DP release of the same labels; calling it once per epoch spends epochs x eps.
Both take a numpy array or a torch tensor and return the same type, shape, dtype and device. Binary labels ((N,) or (N, 1), values in {0, 1}) flip with rho = 1/(1+e^eps);
one-hot labels ((N, K), K >= 2, exactly one 1 per row) and class ids ((N,) integers in [0, K) with
num_classes=K) keep their class with p1 = e^eps/(K-1+e^eps) and otherwise move uniformly to one of
the other K-1 classes.
Unlike MindSpore: eps must lie in [0.001, 50] (where the mechanisms are numerically sound; privacy/domains.py) or
be inf, which returns the labels exactly, not silently capped at 100; every row is validated (not just the total
count of ones), and a generator makes results reproducible.
"""

from __future__ import annotations

import numpy as np

from privacy.label.keyed_random import KEY_BYTES
from privacy.label.randomized_response import (
    binary_rr,
    check_label_eps,
    flip_probability,
    kary_rr,
    keep_probability,
    rr_cost,
)
from privacy.label.release_draws import randomize_binary_once, randomize_classes_once


def _to_numpy(labels):
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(labels, torch.Tensor):
        return labels.detach().cpu().numpy(), ("torch", labels.dtype, labels.device)
    if isinstance(labels, np.ndarray):
        return labels, ("numpy", labels.dtype, None)
    raise TypeError(f"labels must be a numpy array or a torch tensor, got {type(labels).__name__}")


def _from_numpy(arr: np.ndarray, kind) -> object:
    name, dtype, device = kind
    if name == "numpy":
        return arr.astype(dtype, copy=False)
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr)).to(device=device, dtype=dtype)


def _numpy_generator(generator) -> np.random.Generator:
    if generator is None:
        return np.random.default_rng()
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    import torch

    if isinstance(generator, torch.Generator):
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        return np.random.default_rng(seed)
    raise TypeError(
        f"generator must be a numpy Generator, a torch Generator or an int seed, got {type(generator).__name__}"
    )


def label_kind(labels: np.ndarray, num_classes: int | None = None) -> str:
    """'binary', 'onehot' or 'classes' (num_classes given, 1-D); ValueError naming the first bad row otherwise."""
    if num_classes is not None and labels.ndim == 1:
        if not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"class ids must be integers in [0, {num_classes}), got dtype {labels.dtype}")
        bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
        if bad.size:
            raise ValueError(f"class ids must be in [0, {num_classes}); row {bad[0]} is {labels[bad[0]].item()!r}")
        return "classes"
    if labels.ndim == 0 or labels.ndim > 2:
        raise ValueError(f"labels must have shape (N,), (N, 1) or (N, K); got ndim={labels.ndim} shape {labels.shape}")
    values = labels.astype(np.float64, copy=False)
    if labels.ndim == 1 or labels.shape[1] == 1:
        flat = values.reshape(-1)
        bad = np.flatnonzero((flat != 0) & (flat != 1))
        if bad.size:
            raise ValueError(
                f"binary labels must be 0 or 1; row {bad[0]} is {labels.reshape(-1)[bad[0]].item()!r} "
                "(for class ids pass num_classes=K)"
            )
        return "binary"
    k = labels.shape[1]
    if k < 2:
        raise ValueError(f"one-hot labels need K >= 2 classes, got K={k}")
    not01 = ((values != 0) & (values != 1)).any(axis=1)
    not_one = values.sum(axis=1) != 1
    bad = np.flatnonzero(not01 | not_one)
    if bad.size:
        raise ValueError(
            f"one-hot labels need exactly one 1 (and K-1 zeros) per row; row {bad[0]} is {labels[bad[0]].tolist()}"
        )
    return "onehot"


def _check_ids(ids, n: int) -> np.ndarray:
    arr, _ = _to_numpy(ids)
    if arr.ndim != 1 or arr.shape[0] != n or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"ids must be {n} integer sample ids, one per label row; got dtype {arr.dtype} shape {arr.shape}"
        )
    if np.unique(arr).size != n:
        raise ValueError("ids must be unique: two rows with one id would share one draw")
    return arr.astype(np.int64)


class LabelDP:
    """eps-label-DP randomized response; once per sample when given sample ids (keyed mode)."""

    def __init__(
        self,
        eps: float,
        dataset: str | None = None,
        store_dir: str | None = None,
        key_file: str | None = None,
        key: bytes | None = None,
        num_classes: int | None = None,
    ):
        self.eps = check_label_eps(eps)
        if key is not None and (store_dir is not None or key_file is not None):
            raise ValueError("pass key (no ledger) or store_dir/key_file (key and ledger on disk), not both")
        if key is not None and (not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES):
            raise ValueError(f"key must be {KEY_BYTES} secret random bytes (secrets.token_bytes({KEY_BYTES}))")
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
        ):
            raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        self.dataset = dataset
        self.store_dir, self.key_file = store_dir, key_file
        self._key = bytes(key) if key is not None else None
        self._store = None
        self.num_classes = num_classes
        self.last_release: dict | None = None  # keyed mode: the release and the ledger's totals of the last call

    def _secret(self) -> bytes:
        if self._key is None:
            from privacy.label.store import LabelDPStore, default_store_dir

            self._store = LabelDPStore(self.store_dir or default_store_dir(), self.key_file)
            self._key = self._store.key()
        return self._key

    def release_id(self, kind: str, k: int) -> str:
        """The release this object draws for this dataset, label kind and K (public; names no key bits)."""
        from privacy.label.store import key_fingerprint, named_dataset_id, release_id

        return release_id(
            named_dataset_id(self.dataset),
            key_fingerprint(self._secret()),
            f"labeldp/{kind}",
            {"eps": self.eps, "k": k},
        )

    def _keyed(self, kind: str, k: int, ids: np.ndarray, draw) -> np.ndarray:
        from privacy.label.store import Release, named_dataset_id

        if self.dataset is None:
            raise ValueError(
                "once-per-sample randomization (ids=...) needs LabelDP(eps, dataset=NAME): the name of "
                "the label set, so that two label sets on the same ids never share coins"
            )
        rel = self.release_id(kind, k)
        out = draw(self._secret(), rel)
        self.last_release = {"release_id": rel, "eps": self.eps, "mechanism": f"labeldp/{kind}"}
        if self._store is not None:
            is_new, summary = self._store.record(
                Release(
                    rel,
                    named_dataset_id(self.dataset),
                    f"labeldp/{kind}",
                    self.eps,
                    {"eps": self.eps, "k": k},
                    int(ids.size),
                ),
                self._key,
                ids,
                {"name": self.dataset},
            )
            self.last_release.update(
                new_release=is_new, dataset_total_eps=summary["total_eps"], ledger=self._store.ledger_path
            )
        return out

    def __call__(self, labels, generator=None, ids=None):
        arr, kind = _to_numpy(labels)
        label_type = label_kind(arr, self.num_classes)
        if ids is not None:
            ids = _check_ids(ids, arr.shape[0])
            if generator is not None:
                raise ValueError("pass ids (keyed, once per sample) or generator (fresh noise), not both")
        if arr.shape[0] == 0 or np.isinf(self.eps):
            return _from_numpy(arr.copy(), kind)
        if label_type == "binary":
            cls, k = arr.reshape(-1).astype(np.int64), 2
        elif label_type == "classes":
            cls, k = arr.astype(np.int64), self.num_classes
        else:
            cls, k = np.argmax(arr, axis=1), arr.shape[1]
        # two classes are binary whatever their encoding: one mechanism (keep e^eps/(1+e^eps)), one release
        if k == 2:
            if ids is not None:
                noisy = self._keyed(
                    "binary", 2, ids, lambda key, rel: randomize_binary_once(cls, ids, self.eps, key, rel)
                )
            else:
                noisy = binary_rr(cls, self.eps, _numpy_generator(generator))
        elif ids is not None:
            noisy = self._keyed(
                "classes", k, ids, lambda key, rel: randomize_classes_once(cls, ids, k, self.eps, key, rel)
            )
        else:
            noisy = kary_rr(cls, k, self.eps, _numpy_generator(generator))
        if label_type == "onehot":
            out = np.zeros_like(arr)
            out[np.arange(arr.shape[0]), noisy] = 1
        else:
            out = noisy.reshape(arr.shape).astype(arr.dtype)
        return _from_numpy(out, kind)

    def flip_probability(self) -> float:
        return flip_probability(self.eps)

    def keep_probability(self, k: int) -> float:
        return keep_probability(self.eps, k)

    def privacy_cost(self) -> dict:
        """rr_cost(eps): (eps, 0)-label-DP per record for one release. With ids and a key every call
        repeats that release (no further cost); without them every call is a new release."""
        return rr_cost(self.eps)

    def __repr__(self) -> str:
        return f"LabelDP(eps={self.eps})"
