"""Progress bars (tqdm) with rate and ETA on a terminal, silent otherwise (pipes, logs, --quiet, VFL_PROGRESS=0)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def enabled(stream=None) -> bool:
    """Bars are drawn only on an interactive stderr, unless VFL_PROGRESS=1 forces them (or 0 turns them off)."""
    from vfl.obs.logs import console_level

    forced = os.environ.get("VFL_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    stream = stream or sys.stderr
    return console_level() <= 20 and hasattr(stream, "isatty") and stream.isatty()


def bar(total: int | float | None = None, desc: str = "", unit: str = "it", leave: bool = True, **kw):
    """A tqdm bar (a no-op one when disabled): `.update(n)`, `.set_postfix_str(s)`, `.close()`."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        leave=leave,
        disable=not enabled(),
        dynamic_ncols=True,
        unit_scale=unit in ("B", "rows"),
        mininterval=0.5,
        **kw,
    )


def track(
    items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it", leave: bool = False
) -> Iterator[T]:
    """Iterate items with a bar."""
    with bar(
        total=total if total is not None else (len(items) if hasattr(items, "__len__") else None),
        desc=desc,
        unit=unit,
        leave=leave,
    ) as b:
        for item in items:
            yield item
            b.update(1)
