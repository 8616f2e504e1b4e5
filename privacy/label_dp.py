"""LabelDP: randomized response on binary or one-hot labels (MindSpore Federated's API, minus its flaws).

`LabelDP(eps=1.0)(labels)` takes a numpy array or a torch tensor and returns the same type, shape,
dtype and device. Binary labels ((N,) or (N, 1), values in {0, 1}) flip with rho = 1/(1+e^eps);
one-hot labels ((N, K), K >= 2, exactly one 1 per row) keep their class with
p1 = e^eps/(K-1+e^eps) and otherwise move uniformly to one of the other K-1 classes.
Unlike MindSpore: eps is not capped at 100 (eps = inf returns the labels exactly), every row is
validated (not just the total count of ones), and a generator makes results reproducible.
"""
from __future__ import annotations

import numpy as np

from privacy.randomized_response import binary_rr, check_eps, flip_probability, kary_rr, keep_probability, rr_cost


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
    raise TypeError(f"generator must be a numpy Generator, a torch Generator or an int seed, got {type(generator).__name__}")


def label_kind(labels: np.ndarray) -> str:
    """'binary' or 'onehot'; ValueError naming the first bad row otherwise."""
    if labels.ndim == 0 or labels.ndim > 2:
        raise ValueError(f"labels must have shape (N,), (N, 1) or (N, K); got ndim={labels.ndim} shape {labels.shape}")
    values = labels.astype(np.float64, copy=False)
    if labels.ndim == 1 or labels.shape[1] == 1:
        flat = values.reshape(-1)
        bad = np.flatnonzero((flat != 0) & (flat != 1))
        if bad.size:
            raise ValueError(f"binary labels must be 0 or 1; row {bad[0]} is {labels.reshape(-1)[bad[0]].item()!r}")
        return "binary"
    k = labels.shape[1]
    if k < 2:
        raise ValueError(f"one-hot labels need K >= 2 classes, got K={k}")
    not01 = ((values != 0) & (values != 1)).any(axis=1)
    not_one = values.sum(axis=1) != 1
    bad = np.flatnonzero(not01 | not_one)
    if bad.size:
        raise ValueError(f"one-hot labels need exactly one 1 (and K-1 zeros) per row; row {bad[0]} is {labels[bad[0]].tolist()}")
    return "onehot"


class LabelDP:
    """eps-label-DP randomized response, applied once per label."""

    def __init__(self, eps: float):
        self.eps = check_eps(eps)

    def __call__(self, labels, generator=None):
        arr, kind = _to_numpy(labels)
        label_type = label_kind(arr)
        if arr.shape[0] == 0 or np.isinf(self.eps):
            return _from_numpy(arr.copy(), kind)
        rng = _numpy_generator(generator)
        if label_type == "binary":
            out = binary_rr(arr.astype(np.int64), self.eps, rng).astype(arr.dtype)
        else:
            k = arr.shape[1]
            cls = np.argmax(arr, axis=1)
            noisy = kary_rr(cls, k, self.eps, rng)
            out = np.zeros_like(arr)
            out[np.arange(arr.shape[0]), noisy] = 1
        return _from_numpy(out, kind)

    def flip_probability(self) -> float:
        return flip_probability(self.eps)

    def keep_probability(self, k: int) -> float:
        return keep_probability(self.eps, k)

    def privacy_cost(self) -> dict:
        """Each label is randomized once: (eps, 0)-label-DP for every record it touches."""
        return rr_cost(self.eps)

    def __repr__(self) -> str:
        return f"LabelDP(eps={self.eps})"
