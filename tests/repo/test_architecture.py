"""The layering the tree promises (docs/layout.md): which package may import which, no import cycles, docstrings.

Also: only entry points import the party CLI's shared code (vfl/cli.py), no two modules share a file name beyond
each package's own entry and sides, no module of vfl/data imports another module's private name (a leading
underscore), every module's docstring opens with a one-line summary, and no module of the tests imports a test module
(shared helpers live in tests/support, whose modules open with a one-line summary too).

Every import counts, including the lazy ones inside functions: a cycle through a function-level import is still a
cycle a reader has to untangle. Each rule has a power test that plants a violation and sees it reported.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("privacy", "vfl", "leader", "follower")
TESTS = "tests"

# (modules under this prefix, may not import modules under these prefixes, why)
RULES = (
    ("privacy", ("vfl", "leader", "follower", "zmq"), "the mechanisms are pure maths, usable without the framework"),
    ("vfl", ("leader", "follower"), "the framework never imports a role"),
    ("leader", ("follower",), "a role never imports another role"),
    ("follower", ("leader",), "a role never imports another role"),
    (
        "vfl.wire",
        ("vfl.training", "vfl.labeldp", "vfl.models", "vfl.data", "torch"),
        "the transport knows nothing of training",
    ),
    (
        "vfl.data",
        ("vfl.training", "vfl.wire", "vfl.labeldp", "vfl.models", "zmq"),
        "data preparation knows nothing of training or the wire",
    ),
    (
        "vfl.data",
        (
            "privacy.label",
            "privacy.keyed_random",
            "privacy.federated",
            "privacy.attacks",
            "privacy.domains",
            "privacy.embedding_dp",
            "privacy.dp_accountant",
        ),
        "data uses only the public hashes (privacy.public_hash), field types and the AUC (privacy.rank_metrics), never a mechanism",
    ),
    (
        "vfl.config",
        ("vfl.models", "vfl.training", "vfl.labeldp", "vfl.data", "vfl.session", "vfl.inference", "torch"),
        "the config is checked before anything it configures is imported",
    ),
)
# the split-learning path (everything but the FedAvg simulation itself) never imports horizontal
HORIZONTAL = "vfl.horizontal"
# the party entry points' shared code (arguments, overrides, the guarded run): imported by entry points only, that is
# a package's __main__, a `cli` module, and the Python API that runs a command's body in its own process
PARTY_CLI = "vfl.cli"
API_ENTRY_POINTS = ("vfl.api", "vfl.inference.predict.in_process")
# a file name several packages hold on purpose: each package's own entry (__main__, cli) or its two sides
SHARED_NAMES = ("__init__", "__main__", "cli", "leader", "follower", "trainer")
# file names held twice that are still to be renamed, each with exactly the modules that hold it: scripts/ import
# both criteo modules by these names
KNOWN_DUPLICATES = {
    "criteo": {"vfl/data/presets/criteo.py", "vfl/data/synth/criteo.py"},
}
# modules whose docstring's summary still runs over one line: none (shrink only)
LONG_SUMMARIES: set[str] = set()


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """Every absolute module name a source imports (relative imports resolved against `module`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module` imports pkg.module
    return names


def project_modules() -> dict[str, set[str]]:
    """module name -> the names it imports, for every module of the four packages."""
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = module_name(p)
            out[name] = imports_of(p.read_text(), name, p.name == "__init__.py")
    return out


def suite_modules() -> dict[str, set[str]]:
    """module name -> the names it imports, for every module under tests/ (test modules, support, conftest)."""
    out = {}
    for p in (ROOT / TESTS).rglob("*.py"):
        name = module_name(p)
        out[name] = imports_of(p.read_text(), name, p.name == "__init__.py")
    return out


def imports_of_test_modules(modules: dict[str, set[str]]) -> list[str]:
    """Every import of a test module (a module of the tests, or a bare name, whose file name starts with test_) by a
    module of the tests: pytest alone imports test modules; what two of them share belongs in tests/support."""
    return [
        f"{name} imports {i} (a test module; move what it shares to tests/support)"
        for name, imported in sorted(modules.items())
        for i in sorted(imported)
        if i.rsplit(".", 1)[-1].startswith("test_") and ("." not in i or _under(i, TESTS))
    ]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(modules: dict[str, set[str]]) -> list[str]:
    bad = []
    for name, imported in sorted(modules.items()):
        for prefix, banned, why in RULES:
            if _under(name, prefix):
                bad += [f"{name} imports {i} ({why})" for i in sorted(imported) if any(_under(i, b) for b in banned)]
        if not _under(name, HORIZONTAL):
            bad += [
                f"{name} imports {i} (the split path never imports horizontal)"
                for i in sorted(imported)
                if _under(i, HORIZONTAL)
            ]
    return bad


def is_entry_point(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("__main__", "cli") or name in API_ENTRY_POINTS


def cli_violations(modules: dict[str, set[str]]) -> list[str]:
    """Every import of vfl.cli by a module that is not an entry point."""
    return [
        f"{name} imports {i} (only an entry point imports the party CLI's shared code)"
        for name, imported in sorted(modules.items())
        if not is_entry_point(name)
        for i in sorted(imported)
        if _under(i, PARTY_CLI)
    ]


# the package whose modules may not import each other's private names: what one needs of another is public
NO_PRIVATE_IMPORTS = "vfl.data"


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


def library_files() -> list[pathlib.Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def duplicate_names(paths: list[str]) -> list[str]:
    """File names held by more than one module (paths relative to the root), beyond SHARED_NAMES and
    KNOWN_DUPLICATES."""
    holders: dict[str, set[str]] = {}
    for path in paths:
        holders.setdefault(pathlib.PurePosixPath(path).stem, set()).add(path)
    return [
        f"{name}.py is held by {sorted(held)}"
        for name, held in sorted(holders.items())
        if len(held) > 1 and name not in SHARED_NAMES and held != KNOWN_DUPLICATES.get(name)
    ]


def summary_problem(source: str) -> str | None:
    """None when the module's docstring opens with a one-line summary (a blank line, or the end, after it)."""
    doc = ast.get_docstring(ast.parse(source))
    if doc is None:
        return "no docstring"
    if "\n" in doc.split("\n\n", 1)[0]:
        return "its summary runs over more than one line"
    return None


def cycles(modules: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph = {m: sorted(i for i in imported if i in modules and i != m) for m, imported in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_imports_only_what_its_layer_allows():
    # Prepare
    modules = project_modules()
    # Execute
    bad = violations(modules)
    # Assert
    assert bad == []


def test_the_layer_rules_report_a_planted_violation():
    """Power: a wire module importing training, data importing the wire or a label mechanism, privacy importing vfl,
    a split module importing horizontal are each reported."""
    # Prepare
    planted = {
        "vfl.wire.channel": {"vfl.training.loop"},
        "vfl.data.prepare": {"vfl.wire.frames"},
        "vfl.data.transforms": {"privacy.label.keyed_random"},
        "privacy.label.rr_prior": {"vfl.config.schema"},
        "vfl.training.loop": {"vfl.horizontal.fedavg"},
        "vfl.horizontal.fedavg": {"vfl.horizontal.config"},
    }
    # Execute
    bad = violations(planted)
    # Assert
    assert len(bad) == 5 and not any(b.startswith("vfl.horizontal.fedavg") for b in bad)


def test_no_import_cycles():
    # Prepare
    modules = project_modules()
    # Execute
    found = cycles(modules)
    # Assert
    assert found == []


def test_a_planted_cycle_is_found_even_through_a_lazy_import():
    # Prepare: b imports a inside a function
    modules = {
        "m.a": imports_of("from m.b import f\n", "m.a", False),
        "m.b": imports_of("def f():\n    from m import a\n", "m.b", False),
        "m.c": imports_of("import m.a\n", "m.c", False),
    }
    # Execute
    found = cycles(modules)
    # Assert
    assert found == [["m.a", "m.b"]]


def test_every_module_starts_with_a_docstring():
    missing = [
        str(p.relative_to(ROOT))
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert missing == []


def test_only_entry_points_import_the_party_cli():
    # Prepare
    modules = project_modules()
    # Execute
    bad = cli_violations(modules)
    # Assert
    assert bad == []


def test_a_library_module_importing_the_party_cli_is_reported():
    """Power: a data entry point's helper or a config module importing vfl.cli is reported; a __main__, a cli module
    and the Python API are not."""
    # Prepare
    planted = {
        "vfl.data.prepare": {"vfl.cli", "vfl.cli.command_name"},
        "vfl.config.schema": {"vfl.cli.fail"},
        "vfl.data.__main__": {"vfl.cli.fail"},
        "vfl.inference.serve.cli": {"vfl.cli.party_keys"},
        "vfl.api": {"vfl.cli.party_keys"},
    }
    # Execute
    bad = cli_violations(planted)
    # Assert
    assert len(bad) == 3 and all(b.startswith(("vfl.data.prepare ", "vfl.config.schema ")) for b in bad)


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


def test_the_config_importing_models_is_reported():
    # Prepare
    planted = {"vfl.config.schema": {"vfl.models.registry"}, "vfl.models.registry": {"vfl.config.schema"}}
    # Execute
    bad = violations(planted)
    # Assert
    assert bad == [
        "vfl.config.schema imports vfl.models.registry (the config is checked before anything it configures is imported)"
    ]


def test_no_two_modules_share_a_file_name_beyond_the_known_ones():
    # Prepare
    paths = [p.relative_to(ROOT).as_posix() for p in library_files()]
    # Execute
    bad = duplicate_names(paths)
    # Assert
    assert bad == []


def test_a_new_shared_file_name_is_reported():
    """Power: a second table.py is reported, a third criteo.py too (the known pair no longer matches); each
    package's leader.py and cli.py are not."""
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
    ]
    # Execute
    bad = duplicate_names(paths)
    # Assert
    assert [b.split(" ")[0] for b in bad] == ["criteo.py", "table.py"]


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


# the benchmarks (benchmarks/, run from the repository root as `python -m benchmarks.NAME`) stand on the library
BENCHMARKS = "benchmarks"


def benchmark_imports(modules: dict[str, set[str]]) -> list[str]:
    """Every import of the benchmarks package by a module of the library."""
    return [
        f"{name} imports {i} (the library never imports the benchmarks)"
        for name, imported in sorted(modules.items())
        for i in sorted(imported)
        if _under(i, BENCHMARKS)
    ]


def test_the_library_never_imports_the_benchmarks():
    # Prepare
    modules = project_modules()
    # Execute
    bad = benchmark_imports(modules)
    # Assert
    assert bad == []


def test_a_library_module_importing_a_benchmark_is_reported():
    """Power: a module of each library package importing the benchmarks, a module of it, or a name from one, is
    reported; a name that merely starts with the same letters is not."""
    # Prepare
    sources = {
        "vfl.data.prepare": "from benchmarks.datasets import synthetic_criteo\n",
        "privacy.label.rr_prior": "def f():\n    import benchmarks\n",
        "leader.__main__": "from benchmarks import common\n",
        "follower.__main__": "import benchmarks_extra\n",
    }
    modules = {name: imports_of(source, name, False) for name, source in sources.items()}
    # Execute
    bad = benchmark_imports(modules)
    # Assert
    assert sorted({b.split(" ")[0] for b in bad}) == ["leader.__main__", "privacy.label.rr_prior", "vfl.data.prepare"]
