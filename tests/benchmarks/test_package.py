"""The benchmarks are a package run from the repository root (`python -m benchmarks.NAME`).

No module touches sys.path (each imports the library and its neighbours by their package names), and every bench's
main takes its command line, so `python -m benchmarks.NAME ARGS` and a test calling main(ARGS) parse the same.
"""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from tests.support.paths import REPO

MODULES = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "__init__")
SHARED = (
    "common",
    "datasets",
    "runs",
    "wan_accuracy",
)  # shared modules and wan.py's accuracy grid: no command of their own


def sys_path_edits(source: str) -> list[int]:
    """The lines that touch sys.path (an attribute `path` of a name `sys`, read or written)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def test_no_benchmark_touches_sys_path():
    # Prepare / Execute
    bad = {
        name: lines for name in MODULES if (lines := sys_path_edits((REPO / "benchmarks" / f"{name}.py").read_text()))
    }
    # Assert
    assert bad == {}


def test_a_sys_path_edit_is_found_even_inside_a_function():
    """Power: an insert at the top and an append inside a function are found; os.path and a local named path are
    not."""
    # Prepare
    source = (
        "import os, sys\nsys.path.insert(0, 'x')\ndef f(path):\n    os.path.join(path)\n    sys.path.append(path)\n"
    )
    # Execute
    lines = sys_path_edits(source)
    # Assert
    assert lines == [2, 5]


@pytest.mark.parametrize("name", [m for m in MODULES if m not in SHARED])
def test_every_bench_is_a_module_whose_main_takes_its_command_line(name):
    # Execute
    module = importlib.import_module(f"benchmarks.{name}")
    # Assert
    assert list(inspect.signature(module.main).parameters) == ["argv"]
