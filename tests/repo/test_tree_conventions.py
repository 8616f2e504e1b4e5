"""The tree's conventions (docs/layout.md): file names, module docstrings, private names, and the tests' own shape.

No two modules share a file name beyond each package's own entry and sides, every module's docstring opens with a
one-line summary, no module of vfl/data imports another module's private name (a leading underscore), every package of
vfl (and privacy) has a package of the tests, and no module of the tests imports a test module (shared helpers live in
tests/support, whose modules open with a one-line summary too). Each rule has a power test that plants a violation.
"""

from __future__ import annotations

import ast
import pathlib

from tests.support.import_graph import (
    PACKAGES,
    ROOT,
    TESTS,
    imports_of,
    library_files,
    module_name,
    suite_modules,
    under,
)

# a file name several packages hold on purpose: each package's own entry (__main__, cli) or its two sides
SHARED_NAMES = ("__init__", "__main__", "cli", "leader", "follower")


# the two roles mirror each other: a name held by leader/ and follower/ (and no other module) is one module per side
# (train.py, predict.py, serve.py, trainer.py, ...)
ROLES = ("leader", "follower")


# file names held twice that are still to be renamed, each with exactly the modules that hold it: scripts/ import
# both criteo modules by these names
KNOWN_DUPLICATES = {
    "criteo": {"vfl/data/presets/criteo.py", "vfl/data/synth/criteo.py"},
}


# modules whose docstring's summary still runs over one line: none (shrink only)
LONG_SUMMARIES: set[str] = set()


# the package whose modules may not import each other's private names: what one needs of another is public
NO_PRIVATE_IMPORTS = "vfl.data"


def imports_of_test_modules(modules: dict[str, set[str]]) -> list[str]:
    """Every import of a test module (a module of the tests, or a bare name, whose file name starts with test_) by a
    module of the tests: pytest alone imports test modules; what two of them share belongs in tests/support."""
    return [
        f"{name} imports {i} (a test module; move what it shares to tests/support)"
        for name, imported in sorted(modules.items())
        for i in sorted(imported)
        if i.rsplit(".", 1)[-1].startswith("test_") and ("." not in i or under(i, TESTS))
    ]


def untested_packages(library: set[str], suite: set[str]) -> list[str]:
    """The packages (vfl's own, and privacy) that have no package of the tests of the same name."""
    return sorted(library - suite)


def private_imports(source: str, module: str, is_package: bool) -> list[str]:
    """`module imports other._name` for every private name (one leading underscore, not a dunder) that the source
    imports from another module with `from ... import`, lazy imports inside functions included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        if base == module:
            continue
        for a in node.names:
            if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__")):
                found.append(f"{module} imports {base}.{a.name}")
    return found


def duplicate_names(paths: list[str]) -> list[str]:
    """File names held by more than one module (paths relative to the root), beyond SHARED_NAMES and
    KNOWN_DUPLICATES."""
    holders: dict[str, set[str]] = {}
    for path in paths:
        holders.setdefault(pathlib.PurePosixPath(path).stem, set()).add(path)
    return [
        f"{name}.py is held by {sorted(held)}"
        for name, held in sorted(holders.items())
        if len(held) > 1
        and name not in SHARED_NAMES
        and held != KNOWN_DUPLICATES.get(name)
        and held != {f"{role}/{name}.py" for role in ROLES}
    ]


def summary_problem(source: str) -> str | None:
    """None when the module's docstring opens with a one-line summary (a blank line, or the end, after it)."""
    doc = ast.get_docstring(ast.parse(source))
    if doc is None:
        return "no docstring"
    if "\n" in doc.split("\n\n", 1)[0]:
        return "its summary runs over more than one line"
    return None


def test_every_module_starts_with_a_docstring():
    missing = [
        str(p.relative_to(ROOT))
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert missing == []


def test_every_module_docstring_opens_with_a_one_line_summary():
    # Prepare / Execute
    bad = {
        p.relative_to(ROOT).as_posix(): problem
        for p in library_files()
        if (problem := summary_problem(p.read_text())) is not None
    }
    # Assert: none beyond the known long summaries, each of which is still a module
    assert {path: why for path, why in bad.items() if path not in LONG_SUMMARIES} == {}
    assert all((ROOT / path).exists() for path in LONG_SUMMARIES)


def test_a_summary_over_two_lines_is_reported():
    # Prepare
    sources = {
        "one line": '"""One line.\n\nMore, on\ntwo lines.\n"""\n',
        "alone": '"""One line."""\n',
        "two lines": '"""A summary that\nwraps.\n\nMore.\n"""\n',
        "none": "x = 1\n",
    }
    # Execute
    found = {name: summary_problem(source) for name, source in sources.items()}
    # Assert
    assert found == {
        "one line": None,
        "alone": None,
        "two lines": "its summary runs over more than one line",
        "none": "no docstring",
    }


def test_no_two_modules_share_a_file_name_beyond_the_known_ones():
    # Prepare
    paths = [p.relative_to(ROOT).as_posix() for p in library_files()]
    # Execute
    bad = duplicate_names(paths)
    # Assert
    assert bad == []


def test_a_new_shared_file_name_is_reported():
    """Power: a second table.py is reported, a third criteo.py too (the known pair no longer matches), and a role's
    module name held by a third module (serve.py); each package's leader.py and cli.py, and a name the two roles
    mirror (train.py), are not."""
    # Prepare
    paths = [
        "vfl/data/table.py",
        "vfl/config/table.py",
        "vfl/data/presets/criteo.py",
        "vfl/data/synth/criteo.py",
        "vfl/data/readers/criteo.py",
        "vfl/session/leader.py",
        "vfl/inference/serve/leader.py",
        "vfl/cli.py",
        "vfl/inference/predict/cli.py",
        "leader/train.py",
        "follower/train.py",
        "leader/serve.py",
        "follower/serve.py",
        "vfl/inference/serve.py",
    ]
    # Execute
    bad = duplicate_names(paths)
    # Assert
    assert [b.split(" ")[0] for b in bad] == ["criteo.py", "serve.py", "table.py"]


def test_no_data_module_imports_a_private_name_of_another():
    # Prepare
    pkg = ROOT.joinpath(*NO_PRIVATE_IMPORTS.split("."))
    # Execute
    bad = [
        line
        for p in sorted(pkg.rglob("*.py"))
        for line in private_imports(p.read_text(), module_name(p), p.name == "__init__.py")
    ]
    # Assert
    assert bad == []


def test_a_private_import_is_reported_even_lazy_or_relative():
    """Power: a private name imported at the top, inside a function, or relatively, is reported; a public name, a
    dunder (`__doc__`) and a module's own names are not."""
    # Prepare
    sources = {
        "vfl.data.a": "from vfl.data.b import _commit, write_json\n",
        "vfl.data.c": "def f():\n    from vfl.data.readers.table_file import _line\n",
        "vfl.data.readers.d": "from .party_file import _missing\nfrom vfl.data.e import __doc__\n",
        "vfl.data.f": "from vfl.data.f import _own\n",
    }
    # Execute
    bad = [line for name, src in sources.items() for line in private_imports(src, name, False)]
    # Assert
    assert bad == [
        "vfl.data.a imports vfl.data.b._commit",
        "vfl.data.c imports vfl.data.readers.table_file._line",
        "vfl.data.readers.d imports vfl.data.readers.party_file._missing",
    ]


def test_every_package_of_vfl_and_privacy_has_a_package_of_the_tests():
    # Prepare
    library = {p.parent.name for p in (ROOT / "vfl").glob("*/__init__.py")} | {"privacy"}
    suite = {p.parent.name for p in (ROOT / TESTS).glob("*/__init__.py")}
    # Execute
    missing = untested_packages(library, suite)
    # Assert
    assert missing == []


def test_a_package_without_tests_is_reported():
    # Prepare
    library, suite = {"wire", "runs", "privacy"}, {"wire", "privacy", "support"}
    # Execute / Assert
    assert untested_packages(library, suite) == ["runs"]


def test_no_module_of_the_tests_imports_a_test_module():
    # Prepare
    modules = suite_modules()
    # Execute
    bad = imports_of_test_modules(modules)
    # Assert
    assert len(modules) > 100
    assert bad == []


def test_a_test_module_importing_another_is_reported():
    """Power: a test module importing another by its package path, lazily inside a function, relatively, or by its
    bare name, and a support module importing a test module, are each reported; imports from tests/support, and a
    library function whose name starts with test_, are not."""
    # Prepare
    sources = {
        "tests.models.test_models_split": "from tests.distributed.test_ranks import start_ranks\n",
        "tests.inference.test_predict": "def f():\n    from tests.training import test_trainers_in_memory as m\n",
        "tests.wire.test_wire_refusals": "from .test_wire_messages import CUT\n",
        "tests.config.test_other": "import test_config\n",
        "tests.support.ranks": "import tests.distributed.test_ranks\n",
        "tests.wire.test_wire_messages": "from tests.support.wire_samples import SAMPLES\nfrom tests import support\n",
        "tests.obs.test_run_outputs": "from vfl.obs.metrics import test_metrics\n",
    }
    modules = {name: imports_of(source, name, False) for name, source in sources.items()}
    # Execute
    bad = imports_of_test_modules(modules)
    # Assert
    assert [b.split(" ")[0] for b in bad] == [
        "tests.config.test_other",
        "tests.inference.test_predict",
        "tests.models.test_models_split",
        "tests.support.ranks",
        "tests.wire.test_wire_refusals",
    ]


def test_every_support_module_of_the_tests_opens_with_a_one_line_summary():
    # Prepare / Execute
    bad = {
        p.relative_to(ROOT).as_posix(): problem
        for p in sorted((ROOT / TESTS / "support").glob("*.py"))
        if (problem := summary_problem(p.read_text())) is not None
    }
    # Assert
    assert bad == {}
