"""Model registry: bottoms and tops by config name, built with seeded, per-party initialisation."""

from __future__ import annotations

import hashlib

import torch
from torch import nn

from vfl.config.schema import BottomConfig, TopConfig
from vfl.models.mlp import LinearTop, MLPTop
from vfl.models.wide_deep import WideDeepBottom

BOTTOMS = {"wide_deep": WideDeepBottom}


def init_seed(seed: int, role: str) -> int:
    """A 63-bit seed per (run seed, party or 'top'), identical in split and centralized runs."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{role}".encode()).digest()[:8], "little") >> 1


def build_bottom(cfg: BottomConfig, field_sizes: list[int], n_dense: int, seed: int, party: str) -> nn.Module:
    """The bottom model of one party, initialised from (seed, party) only."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed(seed, party))
        return BOTTOMS[cfg.name](field_sizes, n_dense, cfg.embedding_dim, cfg.hidden, cfg.cut_dim, cfg.dropout)


def build_top(cfg: TopConfig, in_dim: int, seed: int, outputs: int = 1) -> nn.Module:
    """The leader's top model over `in_dim` concatenated cut values: 1 logit (binary) or K class logits."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed(seed, "top"))
        return LinearTop(in_dim, outputs) if cfg.name == "linear" else MLPTop(in_dim, cfg.hidden, outputs)
