"""Lazy Adam for sparse embedding gradients: SparseAdam's update, with row indexing instead of sparse masks.

torch.optim.SparseAdam (the lazy Adam of CTR systems: only the rows a batch touched move, Kingma & Ba 2015,
Algorithm 1, applied row-wise) reads the moments with `dense.sparse_mask(grad)` and writes them back with
`dense.add_(sparse)`. On CUDA those sparse-tensor kernels dominate a Wide&Deep step (bench_compute on an H100:
the sparse update was 31-37% of a split step). This optimizer computes the same update, in the same order of
floating-point operations, with `index_select` and `index_add_` on the gradient's unique rows, so it is
bit-identical to SparseAdam on a CPU (tests/training/test_lazy_adam.py) and keeps its state layout (step, exp_avg,
exp_avg_sq), so checkpoints load into either. On CUDA the duplicates are summed without coalesce (`unique_rows`).
"""

from __future__ import annotations

import math

import torch


def unique_rows(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, summed values) of a sparse row gradient, each row once, in ascending order.

    On a CPU this is `coalesce()`, as SparseAdam does. On CUDA, coalesce's value kernel runs one thread per unique
    row over that row's duplicates, so one very frequent id (a missing value, id 0, in ~78% of rows of some Criteo
    fields) serialises it: 2.5 ms a table per step at batch 16000 on an H100, half of the GPU's step time. There the
    duplicates are summed with `torch.unique` and `index_add_` (parallel over all entries; atomic adds, so the sum
    order, and the last bit, may differ from run to run)."""
    if grad.is_coalesced() or not grad.is_cuda:
        grad = grad.coalesce()
        return grad._indices()[0], grad._values()
    return sum_duplicate_rows(grad._indices()[0], grad._values())


def sum_duplicate_rows(indices: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(ascending unique indices, the values of each index summed): coalesce without its per-row loop."""
    rows, inverse = torch.unique(indices, return_inverse=True)
    summed = torch.zeros((rows.numel(), *values.shape[1:]), dtype=values.dtype, device=values.device)
    return rows, summed.index_add_(0, inverse, values)


def lazy_adam_rows(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: int,
    *,
    lr: float | torch.Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    maximize: bool = False,
) -> None:
    """One lazy Adam update of the rows of `param` present in the sparse `grad` (torch's sparse_adam, row-wise).

    Per touched row r with gradient g (duplicates summed by coalesce):
      m_r <- m_r + (1 - b1)(g - m_r);  v_r <- v_r + (1 - b2)(g^2 - v_r)
      p_r <- p_r - lr sqrt(1 - b2^t) / (1 - b1^t) * m_r / (sqrt(v_r) + eps)
    """
    rows, values = unique_rows(-grad if maximize else grad)  # the update is non-linear: every row once
    if values.numel() == 0:
        return
    old_m = exp_avg.index_select(0, rows)
    m_update = values.sub(old_m).mul_(1 - beta1)
    exp_avg.index_add_(0, rows, m_update)
    old_v = exp_avg_sq.index_select(0, rows)
    v_update = values.pow(2).sub_(old_v).mul_(1 - beta2)
    exp_avg_sq.index_add_(0, rows, v_update)
    numer = m_update.add_(old_m)  # the new m of these rows: old + update, as SparseAdam computes it
    denom = v_update.add_(old_v).sqrt_().add_(eps)
    step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    param.index_add_(0, rows, -step_size * numer.div_(denom))


class LazyAdam(torch.optim.SparseAdam):
    """torch.optim.SparseAdam with its update computed by `lazy_adam_rows` (same parameters, state and result)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:  # every gradient is checked before any parameter moves
            for p in group["params"]:
                if p.grad is None:
                    continue
                if not p.grad.is_sparse:
                    raise RuntimeError(
                        "LazyAdam takes sparse gradients only (nn.Embedding(sparse=True)); use Adam for dense ones"
                    )
                if p.dim() != 2 or p.grad.sparse_dim() != 1:
                    raise RuntimeError(
                        f"LazyAdam updates rows of a 2-D table from a row-sparse gradient, got a parameter of "
                        f"shape {tuple(p.shape)} with {p.grad.sparse_dim()} sparse dimensions"
                    )
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr = group["lr"]  # a tensor lr stays a (0-d) tensor, as in SparseAdam
            if isinstance(lr, torch.Tensor) and lr.dim() != 0:
                lr = lr.squeeze()
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                lazy_adam_rows(
                    p,
                    p.grad,
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    state["step"],
                    lr=lr,
                    beta1=beta1,
                    beta2=beta2,
                    eps=group["eps"],
                    maximize=group.get("maximize", False),
                )
        return loss
