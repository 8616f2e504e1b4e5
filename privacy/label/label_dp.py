"""LabelDP: randomized response on binary, one-hot or class-id labels (MindSpore Federated's API, minus its flaws).

Two forms:
* once per sample (use this): `LabelDP(eps, dataset="clicks-2026-11")(labels, ids=sample_ids)` draws
  every sample's noise from a keyed PRF of (secret key, release, sample id, its label), so a sample gets the same
  noisy label on every call, epoch and run (calls may give the dataset batch by batch), and a changed label meets
  fresh coins (privacy/label/release_draws.randomize_binary_by_label). The release is (dataset
  name, eps, K, key): another eps or another dataset name is another release with independent draws. The store pins
  each id's label per release (privacy/label/ledger/label_pins.py): a call that gives an id another label than the
  release drew for it is refused, since it would be a second, uncharged release of that id (a corrected label set
  takes another dataset name; `key=` bytes keep no pins, so there that is the caller's duty). The key and a ledger of releases live
  in the leader's store (privacy/label/ledger/store.py; `store_dir`, `key_file`), created on first use;
  `key=` bytes instead skips the ledger. Cost: `privacy_cost()` = rr_cost(eps), (eps, 0) per sample
  for the release however many times it is called; the ledger adds up distinct releases, and a new release that
  would take the dataset's total over `budget` (8 by default, as training's privacy.label_dp.budget; None: no cap)
  raises LabelDPBudgetError before anything is drawn or recorded.
* fresh noise per call (MindSpore's `LabelDP(eps=...)(labels)`, kept for compatibility): every call
  is a new eps-DP release of the same labels, drawn with the leader's PRF under a fresh key (`fresh_key`: 32 bytes
  of OS entropy); calling it once per epoch spends epochs x eps. An int seed or a numpy / torch Generator passed as
  `generator=` is refused unless `insecure_seed=True` says the noise is for tests and examples only: whoever knows
  the seed replays the noise and reads the labels, and no check can tell a secret seed from a known one.
Both take a numpy array or a torch tensor and return the same type, shape, dtype and device. Binary labels ((N,) or (N, 1), values in {0, 1}) flip with rho = 1/(1+e^eps);
one-hot labels ((N, K), K >= 2, exactly one 1 per row) and class ids ((N,) integers in [0, K) with
num_classes=K) keep their class with p1 = e^eps/(K-1+e^eps) and otherwise move uniformly to one of
the other K-1 classes.
Unlike MindSpore: eps must lie in [0.001, 50] (where the mechanisms are numerically sound; privacy/domains.py) or
be inf, which returns the labels exactly, not silently capped at 100; every row is validated (not just the total
count of ones), and no seed others may know ever draws the noise.
"""

from __future__ import annotations

import numbers
import secrets
import sys
import warnings

import numpy as np

from privacy.domains import LABEL_EPS_DOMAIN
from privacy.keyed_random import KEY_BYTES, key_error
from privacy.label.ledger.budget import DEFAULT_BUDGET_ARG, budget_problem, over_budget
from privacy.label.randomized_response import check_label_eps, flip_probability, keep_probability, rr_cost
from privacy.label.release_draws import (
    LABEL_COINS,
    randomize_binary_by_label,
    randomize_binary_once,
    randomize_classes_by_label,
    randomize_classes_once,
)

FRESH_RELEASE = "fresh noise"  # the release name of a fresh-noise call (its key is new each call)


def _to_numpy(labels, what: str = "labels"):
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(labels, torch.Tensor):
        t = labels.detach().cpu()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16: float32 holds every value exactly
            t = t.float()
        return t.numpy(), ("torch", labels.dtype, labels.device)
    if isinstance(labels, np.ndarray):
        return labels, ("numpy", labels.dtype, None)
    if what != "labels":
        raise ValueError(f"{what} must be a numpy array or a torch tensor, got {type(labels).__name__}")
    raise TypeError(f"labels must be a numpy array or a torch tensor, got {type(labels).__name__}")


def _from_numpy(arr: np.ndarray, kind) -> object:
    name, dtype, device = kind
    if name == "numpy":
        return arr.astype(dtype, copy=False)
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr)).to(device=device, dtype=dtype)


def checked_eps(eps) -> float:
    """eps as a float when it is a label-DP eps ([0.001, 50] or inf); a one-line ValueError otherwise."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise ValueError(f"eps must be a real number {LABEL_EPS_DOMAIN}, got {type(eps).__name__} {eps!r}")
    return check_label_eps(eps)


def fresh_key(generator=None, insecure_seed: bool = False) -> bytes:
    """The key of one fresh-noise release: 32 bytes of OS entropy (`secrets`) with no generator. A seed or a numpy /
    torch Generator is refused unless insecure_seed=True: whoever knows its seed (a config, a notebook, torch's public
    default seed of `torch.Generator()`) replays the noise exactly and reads every label, whatever eps says, and
    nothing here can tell a secret seed from a known one."""
    if generator is None:
        return secrets.token_bytes(KEY_BYTES)
    torch = sys.modules.get("torch")  # a torch Generator exists only where torch is imported: never imported here
    seed = isinstance(generator, (int, np.integer)) and not isinstance(generator, bool)
    is_torch = torch is not None and isinstance(generator, torch.Generator)
    if not (seed or is_torch or isinstance(generator, np.random.Generator)):
        raise ValueError(
            f"generator must be a numpy Generator or a torch Generator (tests only), got {type(generator).__name__}"
        )
    if not insecure_seed:
        what = f"generator={int(generator)}" if seed else f"generator={type(generator).__name__}"
        raise ValueError(
            f"{what}: a seed others can know voids the DP guarantee (it replays the noise; torch.Generator() starts "
            "from a public seed); leave generator out (OS entropy), pass ids= and dataset= for keyed noise under a "
            "secret key, or insecure_seed=True for tests and examples only"
        )
    if seed:
        return np.random.default_rng(int(generator)).bytes(KEY_BYTES)
    if isinstance(generator, np.random.Generator):
        return generator.bytes(KEY_BYTES)
    return torch.randint(0, 256, (KEY_BYTES,), dtype=torch.uint8, generator=generator).numpy().tobytes()


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
    arr, _ = _to_numpy(ids, "ids")
    if arr.ndim != 1 or arr.shape[0] != n or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"ids must be {n} integer sample ids, one per label row; got dtype {arr.dtype} shape {arr.shape}"
        )
    if np.unique(arr).size != n:
        raise ValueError("ids must be unique: two rows with one id would share one draw")
    return arr.astype(np.int64)


def key_source_error(key, store_dir, key_file) -> str | None:
    """None when the key's source is one of `key=` 32 bytes or the store (store_dir / key_file), else the error."""
    if key is not None and (store_dir is not None or key_file is not None):
        return "pass key (no ledger) or store_dir/key_file (key and ledger on disk), not both"
    return None if key is None else key_error(key)


class KeyedLabels:
    """The key of `key=` bytes, else of the leader's store (created on first use), and the store's warnings, each
    shown once with warnings.warn (training logs them): a new key store, ids shared with other datasets."""

    def _keep_key(self, key, store_dir: str | None, key_file: str | None, budget: float | None) -> None:
        self.store_dir, self.key_file = store_dir, key_file
        self.budget = None if budget is None else float(budget)  # checked by budget_problem; the store's ledger's cap
        self.budget_set = budget is not DEFAULT_BUDGET_ARG  # a caller's own budget, which fresh noise cannot keep
        self._key = bytes(key) if key is not None else None
        self._store = None
        self._shown = 0  # the store's warnings shown so far

    def _secret(self) -> bytes:
        """`key=` bytes, else the store's label key read anew on every call (under the store's lock, its seal
        checked): an ack-reset while this object lives rotates its coins too, never leaving it the old ones."""
        if self._store is None and self._key is not None:
            return self._key
        if self._store is None:
            from privacy.label.ledger.store import LabelDPStore, default_store_dir

            self._store = LabelDPStore(self.store_dir or default_store_dir(), self.key_file)
        return self._store.key()

    def _new_warnings(self) -> list[str]:
        """The store's warnings since the last call, each shown with warnings.warn."""
        if self._store is None:
            return []
        new = self._store.warnings[self._shown :]
        self._shown = len(self._store.warnings)
        for text in new:
            warnings.warn(text, UserWarning, stacklevel=3)
        return list(new)


class LabelDP(KeyedLabels):
    """eps-label-DP randomized response; once per sample when given sample ids (keyed mode)."""

    def __init__(
        self,
        eps: float,
        dataset: str | None = None,
        store_dir: str | None = None,
        key_file: str | None = None,
        key: bytes | None = None,
        num_classes: int | None = None,
        budget: float | None = DEFAULT_BUDGET_ARG,
    ):
        from privacy.label.ledger.release_names import named_dataset_id

        self.eps = checked_eps(eps)
        err = key_source_error(key, store_dir, key_file) or budget_problem(budget, key)
        if err:
            raise ValueError(err)
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2
        ):
            raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        if dataset is not None:
            named_dataset_id(dataset)  # a bad name is refused before any store is created
        self.dataset = dataset
        self._keep_key(key, store_dir, key_file, budget)
        self.num_classes = None if num_classes is None else int(num_classes)
        self.last_release: dict | None = None  # keyed mode: the release and the ledger's totals of the last call

    def release_id(self, kind: str, k: int) -> str:
        """The release this object draws for this dataset, label kind and K (public; names no key bits)."""
        return self._release_of(self._secret(), kind, k)

    def _release_of(self, key: bytes, kind: str, k: int) -> str:
        from privacy.label.ledger.label_pins import PIN_FORMAT
        from privacy.label.ledger.store import key_fingerprint, named_dataset_id, release_id

        params = {"eps": self.eps, "k": k, "coins": LABEL_COINS}  # coins per (id, label): release_draws.py
        if self._store is not None:  # pinned (label_pins.py), and this store's: another store's coins are others
            params.update(pins=PIN_FORMAT, store=self._store.identity())
        return release_id(named_dataset_id(self.dataset), key_fingerprint(key), f"labeldp/{kind}", params)

    def _keyed(self, kind: str, k: int, ids: np.ndarray, cls: np.ndarray, draw) -> np.ndarray:
        """The release's noisy labels, recorded in the store's ledger (its budget checked) and each id's label pinned
        (privacy/label/ledger/label_pins.py: a pinned id given another label is refused) before they are drawn."""
        from privacy.label.ledger.label_pins import check_pins, label_tags, pin
        from privacy.label.ledger.recording import ReleaseLedger
        from privacy.label.ledger.store import Release, named_dataset_id

        if self.dataset is None:
            raise ValueError(
                "once-per-sample randomization (ids=...) needs LabelDP(eps, dataset=NAME): the name of "
                "the label set, so that two label sets on the same ids never share coins"
            )
        key, store = self._secret(), self._store
        rel = self._release_of(key, kind, k)
        release = {"release_id": rel, "eps": self.eps, "mechanism": f"labeldp/{kind}"}
        if store is not None:
            refused = over_budget(self.eps, self.budget, "LabelDP")
            if refused is not None:
                raise refused
            tags = label_tags(key, rel, ids, cls)
            with store.locked():  # a relabelled id is refused before anything is recorded
                check_pins(store, rel, self.dataset, tags)

        def pinned_draw(rel: str) -> np.ndarray:
            if store is not None:
                with store.locked():  # checked again: another process may have pinned these ids meanwhile
                    store.check_label_key(key)  # and no ack-reset rotated the coins since this call read its key
                    pin(store, rel, self.dataset, tags)
            return draw(key, rel)

        dataset_id = named_dataset_id(self.dataset)
        ledger = ReleaseLedger(
            store,
            key,
            ids,
            {"name": self.dataset},
            lambda mechanism, params: Release(rel, dataset_id, mechanism, self.eps, params, int(ids.size)),
            self.budget,
            "LabelDP's budget",
        )
        recorded, out = ledger.record_and_draw([(f"labeldp/{kind}", {"eps": self.eps, "k": k})], pinned_draw)
        if store is not None:
            release.update(
                new_release=recorded.new, dataset_total_eps=recorded.summary["total_eps"], ledger=store.ledger_path
            )
        self.last_release = {**release, "warnings": self._new_warnings()}
        return out

    def __call__(self, labels, generator=None, ids=None, insecure_seed: bool = False):
        """The noisy labels: keyed once per sample with `ids=`; else fresh noise under `fresh_key(generator,
        insecure_seed)` (OS entropy; a seed or a Generator only with insecure_seed=True, for tests)."""
        arr, kind = _to_numpy(labels)
        label_type = label_kind(arr, self.num_classes)
        if ids is not None:
            ids = _check_ids(ids, arr.shape[0])
            if generator is not None:
                raise ValueError("pass ids (keyed, once per sample) or generator (fresh noise), not both")
        else:  # fresh noise: a new release under a new key, recorded nowhere
            if self.budget_set:
                raise ValueError(
                    "budget= caps the releases the ledger records (ids=...); fresh noise is recorded nowhere: "
                    "call with ids=, or leave budget out"
                )
            key = fresh_key(generator, insecure_seed)
        if arr.shape[0] == 0 or (ids is None and np.isinf(self.eps)):
            return _from_numpy(arr.copy(), kind)
        if label_type == "binary":
            cls, k = arr.reshape(-1).astype(np.int64), 2
        elif label_type == "classes":
            cls, k = arr.astype(np.int64), self.num_classes
        else:
            cls, k = np.argmax(arr, axis=1), arr.shape[1]
        # two classes are binary whatever their encoding: one mechanism (keep e^eps/(1+e^eps)), one release
        if np.isinf(self.eps):  # keyed: the true labels, recorded (and capped) as a release of eps = inf
            draw = lambda key, rel, rows: cls.copy()
        elif ids is not None:  # keyed: coins per (id, label), so a changed label never meets the same coins
            by_label = randomize_binary_by_label if k == 2 else randomize_classes_by_label
            extra = () if k == 2 else (k,)
            draw = lambda key, rel, rows: by_label(cls, rows, *extra, self.eps, key, rel)
        elif k == 2:
            draw = lambda key, rel, rows: randomize_binary_once(cls, rows, self.eps, key, rel)
        else:
            draw = lambda key, rel, rows: randomize_classes_once(cls, rows, k, self.eps, key, rel)
        if ids is not None:
            noisy = self._keyed("binary" if k == 2 else "classes", k, ids, cls, lambda key, rel: draw(key, rel, ids))
        else:
            noisy = draw(key, FRESH_RELEASE, np.arange(cls.shape[0], dtype=np.int64))
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
