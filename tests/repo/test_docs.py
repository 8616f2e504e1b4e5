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

ROOT = pathlib.Path(__file__).resolve().parents[2]
README_MAX_LINES = 220
TOP_DIRS = ("vfl", "privacy", "leader", "follower", "benchmarks", "scripts", "examples", "tests", "docs")
PATH_PATTERN = re.compile(r"(?<![\w/.-])((?:%s)/[\w./-]*\w)" % "|".join(TOP_DIRS))
MODULE_PATTERN = re.compile(r"python -m ([A-Za-z_][\w.]*)")
LINK_PATTERN = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
LIBRARY = ("vfl", "privacy", "leader", "follower")
# a line of layout.md's tree that names a package (`config/`, `align/psi/`) or a file (`api.py`): indented 0-6
LAYOUT_ENTRY = re.compile(r"^( {0,6})((?:[a-z_][a-z0-9_]*/)+|[a-z_][a-z0-9_]*\.py)(?=[\s,;(]|$)")
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
        if m.split(".")[0] in ("vfl", "privacy", "leader", "follower", "benchmarks")
        and importlib.util.find_spec(m) is None
    ]
    return missing


def outside_parentheses(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch != ")":
            out.append(ch)
    return "".join(out)


def layout_entries(text: str) -> list[list[str]]:
    """[path, the rest of its lines] for every entry of layout.md's tree (its first code block), nested packages
    under their parent's path (the reading layout_listing describes)."""
    entries: list[list[str]] = []
    opened: dict[int, str] = {}
    for line in text.split("```")[1].splitlines():
        m = LAYOUT_ENTRY.match(line)
        if m is None or len(m.group(1)) % 2:
            if entries:
                entries[-1][1] += " " + line
            continue
        indent, token = len(m.group(1)), m.group(2)
        path = (opened.get(indent - 2, "") if indent else "") + token
        opened = {i: p for i, p in opened.items() if i < indent}
        if token.endswith("/"):
            opened[indent] = path
        entries.append([path, line[m.end() :] if token.endswith("/") else token + line[m.end() :]])
    return entries


def layout_test_packages(text: str) -> set[str]:
    """The packages of the tests (`tests/data/`) that layout.md's tree names."""
    return {path for path, _ in layout_entries(text) if path.startswith("tests/") and path.count("/") == 2}


def layout_listing(text: str) -> tuple[set[str], list[str]]:
    """(the library modules the tree of layout.md names, as paths; the items it cannot read).

    The tree is the page's first code block. A line indented 0 to 6 spaces that starts with `name/` opens a package
    (nested under the entry two spaces less indented), one that starts with `name.py` names a file; deeper lines go
    on with the entry above. Outside parentheses an entry holds only names, separated by commas or semicolons: a
    package's module names, more `name.py` files, or `python -m` commands; descriptions stand in parentheses."""
    named, unreadable = set(), []
    for path, rest in layout_entries(text):
        if path.split("/")[0] not in LIBRARY:
            continue
        package = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
        for item in re.split(r"[,;]", outside_parentheses(rest)):
            item = item.strip()
            if not item or item.startswith("python -m "):
                continue
            if re.fullmatch(r"[a-z_][a-z0-9_]*\.py" if not path.endswith("/") else r"[a-z_][a-z0-9_]*", item):
                named.add(package + item + ("" if item.endswith(".py") else ".py"))
            else:
                unreadable.append(f"{package}: {item!r}")
    return named, unreadable


def library_modules(root: pathlib.Path = ROOT) -> set[str]:
    """Every module of the library's packages but their __init__ and __main__ (`python -m` names those)."""
    return {
        p.relative_to(root).as_posix()
        for pkg in LIBRARY
        for p in (root / pkg).rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }


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
        "from vfl_api import",
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
    text = "see `privacy/keyed_prf.py` and run `python -m vfl.labels`; `vfl/labeldp/release.py` is current"
    # Execute / Assert
    assert missing_references(text) == ["privacy/keyed_prf.py", "python -m vfl.labels"]


def test_the_layout_names_every_library_module_and_only_modules():
    # Prepare
    named, unreadable = layout_listing((ROOT / "docs" / "layout.md").read_text())
    # Execute
    modules = library_modules()
    # Assert
    assert unreadable == [], "put descriptions in parentheses"
    assert sorted(named - modules) == [], "layout.md names modules the tree does not hold"
    assert sorted(modules - named) == [], "modules layout.md does not name"


def test_the_layout_listing_reads_names_and_skips_descriptions():
    """Power: a module named outside parentheses counts, one only inside a description does not, nested packages
    take their parent's path, and prose outside parentheses is reported."""
    # Prepare
    text = """intro
```
vfl/
  config/       schema (pydantic, with report inside these words), yamlfile; python -m vfl.config
    nested/     deep (a module, (nested) words), other
  api.py        (the Python API)
  cli.py, ports.py (free ports)
leader/         trainer (drives the run); python -m leader
examples/       anything at all, here
privacy/        (numpy only)
  label/        the store of keys, rr_prior
```
"""
    # Execute
    named, unreadable = layout_listing(text)
    # Assert
    assert named == {
        "vfl/config/schema.py",
        "vfl/config/yamlfile.py",
        "vfl/config/nested/deep.py",
        "vfl/config/nested/other.py",
        "vfl/api.py",
        "vfl/cli.py",
        "vfl/ports.py",
        "leader/trainer.py",
        "privacy/label/rr_prior.py",
    }
    assert unreadable == ["privacy/label/: 'the store of keys'"]


def test_the_layout_names_every_package_of_the_tests_and_only_those():
    # Prepare
    named = layout_test_packages((ROOT / "docs" / "layout.md").read_text())
    # Execute
    packages = {p.parent.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "tests").glob("*/__init__.py")}
    # Assert
    assert sorted(named - packages) == [], "layout.md names packages of the tests the tree does not hold"
    assert sorted(packages - named) == [], "packages of the tests layout.md does not name"


def test_the_layout_reads_the_packages_of_the_tests():
    """Power: a package nested under tests/ counts, with its description; tests/ itself, a library package and a
    deeper folder do not."""
    # Prepare
    text = """intro
```
vfl/
  data/         table
tests/          unit, integration
  data/         (vfl/data, a party's own table)
  support/      (the helpers
                they share)
    deep/       (a folder in a package)
docs/           this documentation
```
"""
    # Execute
    named = layout_test_packages(text)
    # Assert
    assert named == {"tests/data/", "tests/support/"}
