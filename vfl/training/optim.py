"""Optimizers for split models: lazy (sparse) updates for embedding tables, dense ones elsewhere."""

from __future__ import annotations

import torch
from torch import nn

from vfl.config.schema import ConfigError, TrainConfig
from vfl.models.registry import linear_parameters, require_linear_part
from vfl.training.lazy_adam import LazyAdam


class OptimizerSet:
    """One or two torch optimizers that act as one (step, zero_grad, state_dict)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers
        self._base_lrs = [[g["lr"] for g in o.param_groups] for o in optimizers]
        # the configured hyperparameters besides lr: a checkpoint's load must not put its own back (a resumed run
        # with another train.embedding_adam_eps or weight_decay runs with the configured one)
        self._configured = [
            [{k: g[k] for k in ("eps", "weight_decay", "betas") if k in g} for g in o.param_groups] for o in optimizers
        ]

    def set_lr_factor(self, factor: float) -> None:
        """Scale every group's learning rate to factor x its configured value (lr schedules)."""
        for o, bases in zip(self.optimizers, self._base_lrs):
            for g, base in zip(o.param_groups, bases):
                g["lr"] = base * factor

    def zero_grad(self) -> None:
        from vfl.training.step_timer import TIMER

        with TIMER.part("dense_optimizer"):
            for o in self.optimizers:
                o.zero_grad(set_to_none=True)

    def step(self) -> None:
        from vfl.training.step_timer import TIMER

        for o in self.optimizers:
            with TIMER.part("sparse_update" if isinstance(o, torch.optim.SparseAdam) else "dense_optimizer"):
                o.step()

    def state_dict(self) -> dict:
        return {**{str(i): o.state_dict() for i, o in enumerate(self.optimizers)}, "kinds": self.kinds()}

    def kinds(self) -> list[str]:
        """Each optimizer's class, in order: a checkpoint's must match the config's to resume."""
        return [type(o).__name__ for o in self.optimizers]

    def load_state_dict(self, state: dict) -> None:
        # a checkpoint without "kinds" is older: matched by the number of parameters each of its optimizers holds
        sizes = [sum(len(g["params"]) for g in o.param_groups) for o in self.optimizers]
        saved_sizes = [sum(len(g["params"]) for g in state[k]["param_groups"]) for k in state if k.isdigit()]
        if state.get("kinds", self.kinds()) != self.kinds() or saved_sizes != sizes:
            saved = state.get("kinds") or f"of {saved_sizes} parameters (an older checkpoint)"
            raise ConfigError(
                f"train.resume_from: the checkpoint's optimizers {saved} differ from this config's {self.kinds()}; "
                "resume with the train.optimizer and train.linear_optimizer it was trained with, or start a new run"
            )
        for i, o in enumerate(self.optimizers):
            o.load_state_dict(state[str(i)])
            for g, configured in zip(o.param_groups, self._configured[i]):
                g.update(configured)
            if type(o) is torch.optim.Adam:  # a checkpoint's kernel choice belongs to the device it was written on
                for g in o.param_groups:
                    g["fused"] = fused_kernel(g["params"])


class ScheduledOptimizer:
    """An OptimizerSet whose learning rate follows train.lr_schedule by the global step of each update."""

    def __init__(self, optimizer: OptimizerSet, cfg: TrainConfig, total_steps: int, start_step: int = 0):
        self.optimizer = optimizer
        self.schedule = cfg.lr_schedule
        self.total_steps = total_steps
        self.updates = start_step
        self.average = None  # a WeightAverage (train.ema_decay) its holder attaches, updated after every step

    def step(self, scale: float = 1.0, count: bool = True) -> None:
        """One update at `scale` x the scheduled learning rate (train.staleness_correction's lr / tau); count=False:
        a local update (CELU-VFL's), which does not advance the schedule's step count."""
        from vfl.training.schedule import lr_factor

        factor = lr_factor(self.updates, self.total_steps, self.schedule.name, self.schedule.warmup_steps)
        self.optimizer.set_lr_factor(factor if scale == 1.0 else factor * scale)
        if self.average is not None:
            self.average.before_step()
        self.optimizer.step()
        if self.average is not None:
            self.average.after_step()
        self.updates += int(count)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def state_dict(self) -> dict:
        return {**self.optimizer.state_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        self.updates = int(state.pop("updates", self.updates))
        self.optimizer.load_state_dict(state)


def fused_kernel(params) -> bool | None:
    """Adam's `fused` option: one fused kernel for every tensor on CUDA (the default foreach path launches ~10 a
    step there); None, torch's default, elsewhere."""
    return True if all(p.is_cuda for p in params) else None


def build_optimizer(model: nn.Module, cfg: TrainConfig, bottom: bool = False) -> OptimizerSet:
    """adam: LazyAdam (= SparseAdam) on sparse embeddings + Adam on the rest; sgd and adagrad take both. With
    train.linear_optimizer, the linear part the model declares (wide_deep's wide part, deepfm's first order) has an
    Adagrad of its own, as Wide&Deep trains its wide part apart from the deep (Cheng et al. 2016, Sec. 4); bottom:
    the model is a party's bottom (a top never has one), ModelError when it declares no linear part."""
    linear = linear_parameters(model) if bottom and cfg.linear_optimizer is not None else []
    if bottom:
        require_linear_part(cfg, bool(linear), "this bottom")
    own = {id(p) for p in linear}
    params = [p for p in model.parameters() if id(p) not in own]
    sparse_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse}
    opts: list[torch.optim.Optimizer] = []
    if cfg.optimizer == "adam":
        sparse = [p for p in params if id(p) in sparse_ids]
        dense = [p for p in params if id(p) not in sparse_ids]
        if dense:
            opts.append(torch.optim.Adam(dense, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused_kernel(dense)))
        if sparse:
            # SparseAdam's update, bit for bit, without sparse masks
            opts.append(LazyAdam(sparse, lr=cfg.lr, eps=cfg.embedding_adam_eps))
    elif params:
        opts.append((torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adagrad)(params, lr=cfg.lr))
    if linear:  # Adagrad moves only the rows of a sparse gradient, as lazy Adam does (the averaged weights rely on it)
        torch.sparse.check_sparse_tensor_invariants.disable()  # torch's default, set explicitly: no warning per party
        opts.append(torch.optim.Adagrad(linear, lr=cfg.linear_optimizer.lr))
    return OptimizerSet(opts)
