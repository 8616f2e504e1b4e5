"""A party's own torch module by import path (`model.bottom.import: "pkg.mod:Class"`): loaded, adapted, dry-run.

It is the party's own code, imported and run by that party only; nothing of it is sent over the wire (peers see
its cut, as of any bottom). The contracts (docs/models.md):

- bottom: `Class(schema: InputSchema, cut_dim: int, options: dict)`, an nn.Module whose
  `forward(batch: dict[str, Tensor])` takes `numeric`, `numeric_missing`, `categorical` (vfl/models/inputs.py)
  and returns a floating (rows, cut_dim) tensor;
- top: `Class(cut_dims: tuple[int, ...], outputs: int, options: dict)` (the parties' cut widths, leader first), an
  nn.Module whose `forward(cuts: Tensor)` takes the (rows, sum(cut_dims)) concatenated cuts and returns a floating
  (rows,) or (rows, 1) tensor for one output, (rows, outputs) for K classes.

`dry_run_bottom` / `dry_run_top` build the module and run it once on a dummy batch before any peer is contacted;
every broken contract is a ModelError (a ConfigError: exit status 2) of one line naming the module and what was
expected.
"""

from __future__ import annotations

import importlib
import inspect

import torch
from torch import nn

from vfl.config.schema import ConfigError
from vfl.models.inputs import InputSchema


class ModelError(ConfigError):
    """A user module that cannot be used: import error, not a module, a constructor or forward that fails, or an
    output of the wrong shape or dtype."""


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def load_class(path: str, where: str) -> type[nn.Module]:
    """The class named by `package.module:Class`, checked to be a torch.nn.Module subclass."""
    module_name, _, qualname = path.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or whatever the module raises while it is imported
        raise ModelError(
            f"{where}.import {path!r}: cannot import module {module_name!r} ({_one_line(e)}); it must be importable "
            "by this party's Python (on sys.path or installed)"
        ) from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ModelError(f"{where}.import {path!r}: module {module_name!r} has no attribute {qualname!r}")
        obj = getattr(obj, part)
    if not (inspect.isclass(obj) and issubclass(obj, nn.Module)):
        raise ModelError(f"{where}.import {path!r} is {type(obj).__name__} {obj!r:.80}, not a torch.nn.Module subclass")
    return obj


def construct(cls: type[nn.Module], path: str, where: str, args: tuple, signature: str) -> nn.Module:
    try:
        return cls(*args)
    except Exception as e:
        raise ModelError(f"{where}.import {path!r}: {signature} raised {_one_line(e)}") from None


class UserBottom(nn.Module):
    """A user bottom behind the built-ins' call forward(dense, dense_missing, cat): it gets the batch keyed by kind."""

    def __init__(self, module: nn.Module, path: str):
        super().__init__()
        self.module = module
        self.path = path

    def forward(self, dense: torch.Tensor, dense_missing: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        return self.module({"numeric": dense, "numeric_missing": dense_missing, "categorical": cat})


class UserTop(nn.Module):
    """A user top whose one-output (rows, 1) answer is squeezed to (rows,), as the built-in tops return."""

    def __init__(self, module: nn.Module, path: str, outputs: int):
        super().__init__()
        self.module = module
        self.path = path
        self.outputs = outputs

    def forward(self, cuts: torch.Tensor) -> torch.Tensor:
        out = self.module(cuts)
        return out.squeeze(1) if self.outputs == 1 and out.dim() == 2 else out


def user_bottom(path: str, schema: InputSchema, cut_dim: int, options: dict) -> UserBottom:
    cls = load_class(path, "model.bottom")
    signature = f"{cls.__name__}(schema, cut_dim={cut_dim}, options={options!r:.80})"
    return UserBottom(construct(cls, path, "model.bottom", (schema, cut_dim, dict(options)), signature), path)


def user_top(path: str, cut_dims: tuple[int, ...], outputs: int, options: dict) -> UserTop:
    cls = load_class(path, "model.top")
    signature = f"{cls.__name__}(cut_dims={cut_dims}, outputs={outputs}, options={options!r:.80})"
    return UserTop(
        construct(cls, path, "model.top", (tuple(cut_dims), outputs, dict(options)), signature), path, outputs
    )


def _check_output(out, path: str, where: str, call: str, want: tuple[int, ...], also: tuple[int, ...] | None = None):
    expected = f"{want}" + (f" or {also}" if also else "")
    if not isinstance(out, torch.Tensor):
        raise ModelError(
            f"{where}.import {path!r}: {call} returned {type(out).__name__}, expected a tensor of shape {expected}"
        )
    if tuple(out.shape) not in (want, also):
        raise ModelError(f"{where}.import {path!r}: {call} returned shape {tuple(out.shape)}, expected {expected}")
    if not out.dtype.is_floating_point:
        raise ModelError(
            f"{where}.import {path!r}: {call} returned dtype {out.dtype}, expected a floating dtype (float32)"
        )


def dry_run_bottom(module: UserBottom, schema: InputSchema, cut_dim: int, rows: int = 2) -> None:
    """Run a user bottom once on a dummy batch; a ModelError if it fails or answers the wrong shape or dtype."""
    batch = schema.dummy_batch(rows)
    call = f"forward(batch of {rows} rows: numeric {tuple(batch['numeric'].shape)}, categorical {tuple(batch['categorical'].shape)})"
    try:
        with torch.no_grad():
            out = module(batch["numeric"], batch["numeric_missing"], batch["categorical"])
    except Exception as e:
        raise ModelError(f"model.bottom.import {module.path!r}: {call} raised {_one_line(e)}") from None
    _check_output(out, module.path, "model.bottom", call, (rows, cut_dim))


def dry_run_top(module: UserTop, cut_dims: tuple[int, ...], outputs: int, rows: int = 2) -> None:
    """Run a user top once on dummy cuts; a ModelError if it fails or answers the wrong shape or dtype."""
    cuts = torch.randn(rows, sum(cut_dims), generator=torch.Generator().manual_seed(0))
    call = f"forward(cuts of shape {tuple(cuts.shape)})"
    try:
        with torch.no_grad():
            out = module.module(cuts)
    except Exception as e:
        raise ModelError(f"model.top.import {module.path!r}: {call} raised {_one_line(e)}") from None
    want = (rows,) if outputs == 1 else (rows, outputs)
    _check_output(out, module.path, "model.top", call, want, (rows, 1) if outputs == 1 else None)
