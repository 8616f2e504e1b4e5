"""The README is a short front door and docs/ builds: mkdocs --strict (broken links and anchors fail it), every page
in the navigation, and every repository path, module and launch command the Markdown names exists."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
README_MAX_LINES = 220
TOP_DIRS = ("vfl", "privacy", "leader", "follower", "scripts", "examples", "tests", "docs")
PATH_PATTERN = re.compile(r"(?<![\w/.-])((?:%s)/[\w./-]*\w)" % "|".join(TOP_DIRS))
MODULE_PATTERN = re.compile(r"python -m ([A-Za-z_][\w.]*)")
LINK_PATTERN = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="mkdocs is a test extra (scripts/setup.sh installs it)"
)


def markdown_files() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]


def missing_references(text: str, root: pathlib.Path = ROOT) -> list[str]:
    """Repository paths and `python -m` modules that `text` names but the tree does not hold."""
    missing = [p for p in PATH_PATTERN.findall(text) if not (root / p).exists()]
    missing += [
        f"python -m {m}"
        for m in MODULE_PATTERN.findall(text)
        if m.split(".")[0] in ("vfl", "privacy", "leader", "follower") and importlib.util.find_spec(m) is None
    ]
    return missing


def _mkdocs_build(config: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@needs_mkdocs
def test_the_docs_build_strictly(tmp_path):
    # Prepare / Execute
    r = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    # Assert
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "site" / "label-dp" / "index.html").exists()


@needs_mkdocs
def test_a_broken_link_fails_the_strict_build(tmp_path):
    # Prepare: a copy of the docs with one link to a page that does not exist
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "wire.md"
    page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md).\n")
    # Execute
    r = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    # Assert
    assert r.returncode != 0 and "no-such-page.md" in r.stderr


def test_every_docs_page_is_in_the_navigation():
    # Prepare
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = {next(iter(entry.values())) for entry in nav}
    # Execute
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    # Assert
    assert pages == listed, f"not in nav: {sorted(pages - listed)}; in nav, no file: {sorted(listed - pages)}"


def test_the_readme_is_a_front_door():
    # Prepare / Execute
    text = (ROOT / "README.md").read_text()
    # Assert
    assert len(text.splitlines()) <= README_MAX_LINES
    for needed in (
        "bash scripts/run_vfl_train_local.sh",
        "bash scripts/test.sh",
        "privacy.label_dp.eps",
        "from vfl.api import",
    ):
        assert needed in text, needed
    assert "(docs/" in text  # the map of the documentation


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(page):
    # Prepare / Execute
    broken = [
        link
        for link in LINK_PATTERN.findall(page.read_text())
        if "://" not in link and not (page.parent / link).exists()
    ]
    # Assert
    assert not broken, f"{page.name}: {broken}"


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_module_named_exists(page):
    # Prepare / Execute
    missing = missing_references(page.read_text())
    # Assert
    assert not missing, f"{page.name} names {missing}"


def test_a_stale_path_or_module_is_found():
    # Prepare: names from before the tree was regrouped
    text = "see `privacy/keyed_random.py` and run `python -m vfl.labels`; `vfl/labeldp/release.py` is current"
    # Execute / Assert
    assert missing_references(text) == ["privacy/keyed_random.py", "python -m vfl.labels"]
