"""Model registry: bottoms and tops by config name, with seeded, per-party initialisation.

A user's module is found by its import path.

Each built-in is registered with its options model (vfl/config/model_options.py, which the config validates) and a
builder; `build_bottom` builds from the party's InputSchema (its fitted columns), never from Criteo positions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from vfl.config.model_options import BOTTOM_OPTIONS, TOP_OPTIONS, Options
from vfl.config.model_sections import BottomConfig, TopConfig
from vfl.models.dcn_v2 import DCNv2Bottom
from vfl.models.deepfm import DeepFMBottom
from vfl.models.inputs import InputSchema
from vfl.models.interaction import InteractionTop
from vfl.models.mlp import LinearTop, MLPTop
from vfl.models.mlp_bottom import MLPBottom
from vfl.models.numeric_embeddings import EmbeddedInputs, NumericEmbeddings, inner_schema
from vfl.models.numeric_scaling import with_numeric_scaling
from vfl.models.user_module import ModelError, dry_run_bottom, dry_run_top, user_bottom, user_top
from vfl.models.wide_deep import WideDeepBottom

BottomBuilder = Callable[[InputSchema, BottomConfig, Options], nn.Module]
TopBuilder = Callable[[tuple[int, ...], int, TopConfig, Options], nn.Module]


@dataclass(frozen=True)
class Registered:
    build: Callable
    options: type[Options]
    linear_part: bool = False  # the module has linear_parameters() (train.linear_optimizer)


BOTTOMS: dict[str, Registered] = {}
TOPS: dict[str, Registered] = {}


def register_bottom(name: str, build: BottomBuilder, options: type[Options], linear_part: bool = False) -> None:
    """A built-in bottom: build(schema, cfg, options) -> module whose forward(dense, dense_missing, cat) is the cut.
    Its options model must be the one the config validates `model.bottom.options` with; linear_part: the module
    declares a linear part (linear_parameters()) that train.linear_optimizer trains."""
    if BOTTOM_OPTIONS.get(name) is not options:
        raise ValueError(f"bottom {name!r}: options {options.__name__} is not BOTTOM_OPTIONS[{name!r}]")
    BOTTOMS[name] = Registered(build, options, linear_part)


def register_top(name: str, build: TopBuilder, options: type[Options]) -> None:
    """A built-in top: build(cut_dims, outputs, cfg, options) -> module over the concatenated cuts."""
    if TOP_OPTIONS.get(name) is not options:
        raise ValueError(f"top {name!r}: options {options.__name__} is not TOP_OPTIONS[{name!r}]")
    TOPS[name] = Registered(build, options)


register_bottom(
    "wide_deep",
    lambda s, c, o: WideDeepBottom(list(s.vocab_sizes), s.n_numeric, c.embedding_dim, c.hidden, c.cut_dim, c.dropout),
    BOTTOM_OPTIONS["wide_deep"],
    linear_part=True,
)
# these bottoms' classes take the builder's arguments: DeepFMBottom(schema, cfg, options)
register_bottom("deepfm", DeepFMBottom, BOTTOM_OPTIONS["deepfm"], linear_part=True)
register_bottom("dcn_v2", DCNv2Bottom, BOTTOM_OPTIONS["dcn_v2"])
register_bottom("mlp", MLPBottom, BOTTOM_OPTIONS["mlp"])
register_top("linear", lambda dims, k, c, o: LinearTop(sum(dims), k), TOP_OPTIONS["linear"])
register_top("mlp", lambda dims, k, c, o: MLPTop(sum(dims), c.hidden, k), TOP_OPTIONS["mlp"])
register_top("interaction", lambda dims, k, c, o: InteractionTop(dims, k, o.rank, c.hidden), TOP_OPTIONS["interaction"])


def init_seed(seed: int, role: str) -> int:
    """A 63-bit seed per (run seed, party or 'top'), identical in split and centralized runs."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{role}".encode()).digest()[:8], "little") >> 1


def build_bottom(cfg: BottomConfig, schema: InputSchema, seed: int, party: str) -> nn.Module:
    """The bottom model of one party over its own columns, initialised from (seed, party) only; a user's module
    is dry-run on a dummy batch (ModelError when it breaks its contract). With numeric_scaling standard, the bottom
    (built-in or the user's) sees its numeric inputs standardized by the schema's statistics."""
    embedded = schema.numeric_embeddings is not None
    if embedded and cfg.numeric_scaling != "none":
        raise ModelError(
            f"model.bottom.numeric_scaling {cfg.numeric_scaling!r} cannot scale embedded numeric columns (their "
            "transform standardizes them already): set model.bottom.numeric_scaling: none"
        )
    inner = inner_schema(schema) if embedded else schema
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed(seed, party))
        if cfg.import_ is not None:
            module = user_bottom(cfg.import_, inner, cfg.cut_dim, cfg.options)
        else:
            entry = BOTTOMS[cfg.name]
            module = entry.build(inner, cfg, entry.options.model_validate(cfg.options))
        embeddings = NumericEmbeddings(schema.numeric_embeddings) if embedded else None  # drawn after the inner's
    if cfg.import_ is not None:
        dry_run_bottom(module, inner, cfg.cut_dim)
    if embeddings is not None:
        module = EmbeddedInputs(module, embeddings)
    return with_numeric_scaling(module, cfg.numeric_scaling, schema)


def build_top(cfg: TopConfig, cut_dims: int | Sequence[int], seed: int, outputs: int = 1) -> nn.Module:
    """The leader's top over the concatenated cuts: 1 logit (binary) or K class logits. cut_dims: each party's cut
    width, leader first (an int: the total width, each value its own field for the interaction top)."""
    dims = (1,) * cut_dims if isinstance(cut_dims, int) else tuple(int(c) for c in cut_dims)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed(seed, "top"))
        if cfg.import_ is not None:
            module = user_top(cfg.import_, dims, outputs, cfg.options)
        else:
            entry = TOPS[cfg.name]
            return entry.build(dims, outputs, cfg, entry.options.model_validate(cfg.options))
    dry_run_top(module, dims, outputs)
    return module


def linear_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The trainable parameters of the linear part that `model` (or a module inside it: the numeric scaler wraps a
    bottom) declares with a linear_parameters() method; empty when it declares none."""
    found: dict[int, nn.Parameter] = {}
    for module in model.modules():
        declared = getattr(module, "linear_parameters", None)
        if callable(declared):
            found.update((id(p), p) for p in declared() if p.requires_grad)
    return list(found.values())


def require_linear_part(train, has_linear: bool, which: str) -> None:
    """train.linear_optimizer needs a bottom with a linear part: a ModelError of one line otherwise."""
    if train.linear_optimizer is not None and not has_linear:
        raise ModelError(
            f"train.linear_optimizer trains a bottom's linear part, but {which} has none: use wide_deep or deepfm, "
            "give your module a linear_parameters() method (docs/models.md), or drop train.linear_optimizer"
        )


def model_spec(cfg: BottomConfig | TopConfig) -> str:
    """The model's identity as canonical JSON (name or import path, options, sizes): kept in every checkpoint."""
    return json.dumps(cfg.spec, sort_keys=True, separators=(",", ":"))


def check_model_spec(saved: str | None, current: str, who: str) -> None:
    """Resuming needs the model the checkpoint was trained with (a checkpoint without a spec is older: accepted)."""
    if saved is not None and saved != current:
        raise ModelError(
            f"train.resume_from: the checkpoint's {who} was trained as {saved}, but this config builds {current}; "
            "resume with the model it was trained with, or start a new run"
        )


def dry_run_models(cfg, shard) -> None:
    """Build this party's own modules (model.bottom.import, and the leader's model.top.import) once and run them on
    a dummy batch, before any peer is contacted: a ModelError of one line when one breaks its contract. The top is
    tried with every follower's cut as wide as this party's (their widths arrive with HELLO). Built-ins need no try.
    With train.linear_optimizer, the bottom must declare a linear part (ModelError otherwise)."""
    bottom = cfg.model.bottom
    if bottom.import_ is not None:
        module = build_bottom(bottom, InputSchema.of_shard(shard), cfg.train.seed, cfg.party)
        has_linear = bool(linear_parameters(module))
    else:
        has_linear = BOTTOMS[bottom.name].linear_part
    which = f"model.bottom.import {bottom.import_}" if bottom.import_ is not None else f"bottom {bottom.name!r}"
    require_linear_part(cfg.train, has_linear, which)
    top = cfg.model.top
    if cfg.is_leader and top is not None and top.import_ is not None:
        outputs = shard.task.outputs if shard.task is not None else 1
        build_top(top, (cfg.model.bottom.cut_dim,) * (1 + len(cfg.network.followers)), cfg.train.seed, outputs)
