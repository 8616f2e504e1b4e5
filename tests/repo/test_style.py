"""The formatter's and the linter's rules (pyproject.toml, [tool.ruff]) hold over the whole tree: unformatted files,
unused or unsorted imports, undefined names, likely bugs (flake8-bugbear) fail the suite with ruff's own report."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None, reason="ruff is a test extra (scripts/setup.sh installs it)"
)
def test_the_tree_passes_the_linter():
    # Prepare / Execute
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None, reason="ruff is a test extra (scripts/setup.sh installs it)"
)
def test_the_tree_is_formatted():
    # Prepare / Execute
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Assert: `ruff format .` mends it
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
