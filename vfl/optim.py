"""Optimizers for split models: lazy (sparse) updates for embedding tables, dense ones elsewhere."""
from __future__ import annotations

import torch
from torch import nn

from vfl.config import TrainConfig


class OptimizerSet:
    """One or two torch optimizers that act as one (step, zero_grad, state_dict)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    def zero_grad(self) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=True)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> dict:
        return {str(i): o.state_dict() for i, o in enumerate(self.optimizers)}

    def load_state_dict(self, state: dict) -> None:
        for i, o in enumerate(self.optimizers):
            o.load_state_dict(state[str(i)])


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> OptimizerSet:
    """adam: SparseAdam on sparse embeddings (lazy Adam) + Adam on the rest; sgd and adagrad take both."""
    sparse, dense = [], []
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.sparse:
            sparse.append(module.weight)
    sparse_ids = {id(p) for p in sparse}
    dense = [p for p in model.parameters() if id(p) not in sparse_ids]
    if cfg.optimizer == "adam":
        opts: list[torch.optim.Optimizer] = []
        if dense:
            opts.append(torch.optim.Adam(dense, lr=cfg.lr, weight_decay=cfg.weight_decay))
        if sparse:
            opts.append(torch.optim.SparseAdam(sparse, lr=cfg.lr))
        return OptimizerSet(opts)
    if cfg.optimizer == "sgd":
        return OptimizerSet([torch.optim.SGD(list(model.parameters()), lr=cfg.lr)])
    return OptimizerSet([torch.optim.Adagrad(list(model.parameters()), lr=cfg.lr)])
