"""The layering the tree promises (docs/layout.md): which package may import which, and no loop between modules or packages.

Roles at the top, machinery below: vfl/ imports no role (leader, follower) and not the Python API (vfl_api) that
stands above both; a role imports neither the other role nor the API. Also: only entry points import the party CLI's
shared code (vfl/cli.py), and every import by a computed name is a known one. Every import counts, including the lazy ones inside functions and imports by a string literal: a cycle
through a function-level import is still a cycle a reader has to untangle. Each rule has a power test that plants a
violation and sees it reported. The tree's conventions (file names, docstrings, the tests' own imports and packages)
are tests/repo/test_tree_conventions.py.
"""

from __future__ import annotations

from tests.support.import_graph import (
    ROOT,
    computed_imports,
    cycles,
    imports_of,
    library_files,
    package_cycles,
    project_modules,
    under,
)

# (modules under this prefix, may not import modules under these prefixes, why)
RULES = (
    (
        "privacy",
        ("vfl", "vfl_api", "leader", "follower", "zmq"),
        "the mechanisms are pure maths, usable without the framework",
    ),
    ("vfl", ("leader", "follower"), "the framework never imports a role"),
    ("vfl", ("vfl_api",), "the framework never imports the Python API, which stands above the roles"),
    ("leader", ("follower",), "a role never imports another role"),
    ("follower", ("leader",), "a role never imports another role"),
    ("leader", ("vfl_api",), "a role never imports the Python API, which stands above it"),
    ("follower", ("vfl_api",), "a role never imports the Python API, which stands above it"),
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
        "vfl.config",
        ("vfl.models", "vfl.training", "vfl.labeldp", "vfl.data", "vfl.session", "vfl.inference", "torch"),
        "the config is checked before anything it configures is imported",
    ),
)


# (modules under this prefix, may import from this package only these modules, why)
ONLY_FROM = (
    (
        "vfl.data",
        "privacy",
        ("privacy.public_hash", "privacy.field_types", "privacy.rank_metrics", "privacy.durable_files"),
        "data uses only the public hashes (privacy.public_hash), field types, the AUC (privacy.rank_metrics) and durable writes (privacy.durable_files), never a mechanism",
    ),
)


# the split-learning path (everything but the FedAvg simulation itself) never imports horizontal
HORIZONTAL = "vfl.horizontal"


# the party entry points' shared code (arguments, overrides, the guarded run): imported by entry points only, that is
# a package's __main__, a `cli` module, a role's command module (its one entry function, which __main__ dispatches
# to) and the Python API that runs a role's entry function in its own process
PARTY_CLI = "vfl.cli"


ROLES = ("leader", "follower")
ROLE_COMMANDS = ("train", "predict", "serve")
API = "vfl_api"


# the modules that import by a name computed at run time, which no rule here can follow (shrink only), and why
KNOWN_DYNAMIC_IMPORTS = {
    "vfl/models/user_module.py": "a party's own module, by the import path its config names",
}


def violations(modules: dict[str, set[str]]) -> list[str]:
    bad = []
    for name, imported in sorted(modules.items()):
        for prefix, banned, why in RULES:
            if under(name, prefix):
                bad += [f"{name} imports {i} ({why})" for i in sorted(imported) if any(under(i, b) for b in banned)]
        for prefix, package, allowed, why in ONLY_FROM:
            if under(name, prefix):
                bad += [
                    f"{name} imports {i} ({why})"
                    for i in sorted(imported)
                    if under(i, package) and not any(under(i, a) for a in allowed)
                ]
        if not under(name, HORIZONTAL):
            bad += [
                f"{name} imports {i} (the split path never imports horizontal)"
                for i in sorted(imported)
                if under(i, HORIZONTAL)
            ]
    return bad


def is_entry_point(name: str) -> bool:
    role_commands = {f"{role}.{command}" for role in ROLES for command in ROLE_COMMANDS}
    return name.rsplit(".", 1)[-1] in ("__main__", "cli") or name in role_commands or under(name, API)


def cli_violations(modules: dict[str, set[str]]) -> list[str]:
    """Every import of vfl.cli by a module that is not an entry point."""
    return [
        f"{name} imports {i} (only an entry point imports the party CLI's shared code)"
        for name, imported in sorted(modules.items())
        if not is_entry_point(name)
        for i in sorted(imported)
        if under(i, PARTY_CLI)
    ]


def test_every_package_imports_only_what_its_layer_allows():
    # Prepare
    modules = project_modules()
    # Execute
    bad = violations(modules)
    # Assert
    assert bad == []


def test_the_layer_rules_report_a_planted_violation():
    """Power: a wire module importing training, data importing the wire or a privacy module beyond the public hashes,
    field types and AUC, privacy importing vfl, a split module importing horizontal are each reported."""
    # Prepare
    planted = {
        "vfl.wire.leader_channel": {"vfl.training.loop"},
        "vfl.data.prepare": {"vfl.wire.frames"},
        "vfl.data.transforms": {"privacy.keyed_random"},
        "vfl.data.ids": {"privacy.public_hash.splitmix64", "privacy.embedding_noise"},
        "privacy.label.rr_prior": {"vfl.config.schema"},
        "vfl.training.loop": {"vfl.horizontal.fedavg"},
        "vfl.horizontal.fedavg": {"vfl.horizontal.config"},
    }
    # Execute
    bad = violations(planted)
    # Assert
    assert len(bad) == 6 and not any(b.startswith("vfl.horizontal.fedavg") for b in bad)
    assert [b for b in bad if b.startswith("vfl.data.ids")] == [
        "vfl.data.ids imports privacy.embedding_noise (data uses only the public hashes (privacy.public_hash), field "
        "types, the AUC (privacy.rank_metrics) and durable writes (privacy.durable_files), never a mechanism)"
    ]


def test_the_roles_rule_reports_the_framework_or_a_role_reaching_up():
    """Power: a module of vfl/ importing a role (even lazily) or the Python API, a role importing the other role or
    the API, are each reported; the API importing both roles' entry functions and a role importing vfl are not."""
    # Prepare
    sources = {
        "vfl.inference.serve.cli": "def f():\n    from leader.serve import serve\n",
        "vfl.inference.predict.cli": "import follower.predict\n",
        "vfl.cli": "from vfl_api import Leader\n",
        "leader.predict": "from follower.predictor import FollowerPredictor\n",
        "follower.serve": "from vfl_api.roles import party_config\n",
        "vfl_api.roles": "from leader.train import train\nfrom follower.train import train as t\n",
        "leader.train": "from vfl.cli import party_keys\n",
    }
    modules = {name: imports_of(source, name, False) for name, source in sources.items()}
    # Execute
    bad = violations(modules)
    # Assert
    assert [b.split(" (")[0] for b in bad] == [
        "follower.serve imports vfl_api.roles",
        "follower.serve imports vfl_api.roles.party_config",
        "leader.predict imports follower.predictor",
        "leader.predict imports follower.predictor.FollowerPredictor",
        "vfl.cli imports vfl_api",
        "vfl.cli imports vfl_api.Leader",
        "vfl.inference.predict.cli imports follower.predict",
        "vfl.inference.serve.cli imports leader.serve",
        "vfl.inference.serve.cli imports leader.serve.serve",
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


def test_no_loop_between_packages():
    # Prepare
    modules = project_modules()
    # Execute
    found = package_cycles(modules)
    # Assert
    assert found == []


def test_a_planted_loop_between_packages_is_found_where_no_two_files_loop():
    """Power: three packages in a loop (the last step a lazy import inside a function), and a subpackage and a module
    of the same folder importing each other, are each reported at the folder that holds them, though no module is in
    a loop with another; a one-way chain is not."""
    # Prepare
    sources = {
        "v.cli": "from v.align.handshake import f\n",
        "v.align.handshake": "from v.session.digest import g\n",
        "v.session.digest": "x = 1\n",
        "v.session.leader": "def g():\n    from v.cli import main\n",
        "v.data.readers.table": "from v.data.errors import DataError\n",
        "v.data.errors": "x = 1\n",
        "v.data.prepare": "from v.data.readers import table\n",
        "v.data.ids": "from v.data.readers.extra import y\n",
        "v.data.readers.extra": "from v.data.prepare import z\n",
        "v.wire.frames": "import v.data.errors\n",
    }
    modules = {name: imports_of(source, name, False) for name, source in sources.items()}
    # Execute
    found = package_cycles(modules)
    # Assert
    assert cycles(modules) == []
    assert found == ["v: ['v.align', 'v.cli', 'v.session']", "v.data: ['v.data.prepare', 'v.data.readers']"]


def test_every_dynamic_import_is_a_known_one():
    # Prepare / Execute
    found = {p.relative_to(ROOT).as_posix() for p in library_files() if computed_imports(p.read_text())}
    # Assert: none beyond the known ones, each of which is still there
    assert sorted(found - set(KNOWN_DYNAMIC_IMPORTS)) == []
    assert sorted(set(KNOWN_DYNAMIC_IMPORTS) - found) == [], "shrink KNOWN_DYNAMIC_IMPORTS"


def test_a_dynamic_import_is_followed_or_reported():
    """Power: an import of a role by a string literal counts as an import (the roles rule reports it); one by a
    computed name is counted as one the rules cannot follow."""
    # Prepare
    literal = "import importlib\ndef f():\n    return importlib.import_module('leader.train')\n"
    computed = "def f(role):\n    return __import__(f'{role}.train', fromlist=['train'])\n"
    # Execute
    modules = {"vfl.inference.predict.cli": imports_of(literal, "vfl.inference.predict.cli", False)}
    # Assert
    assert violations(modules) == [
        "vfl.inference.predict.cli imports leader.train (the framework never imports a role)"
    ]
    assert (computed_imports(literal), computed_imports(computed)) == (0, 1)


def test_only_entry_points_import_the_party_cli():
    # Prepare
    modules = project_modules()
    # Execute
    bad = cli_violations(modules)
    # Assert
    assert bad == []


def test_a_library_module_importing_the_party_cli_is_reported():
    """Power: a data entry point's helper, a config module or a role's trainer importing vfl.cli is reported; a
    __main__, a cli module, a role's command module and the Python API are not."""
    # Prepare
    planted = {
        "vfl.data.prepare": {"vfl.cli", "vfl.cli.command_name"},
        "vfl.config.schema": {"vfl.cli.fail"},
        "leader.trainer": {"vfl.cli.party_keys"},
        "vfl.data.__main__": {"vfl.cli.fail"},
        "vfl.inference.serve.cli": {"vfl.cli.party_keys"},
        "leader.train": {"vfl.cli.party_keys"},
        "follower.serve": {"vfl.cli.party_keys"},
        "vfl_api.in_process": {"vfl.cli.party_keys"},
    }
    # Execute
    bad = cli_violations(planted)
    # Assert
    assert len(bad) == 4 and all(
        b.startswith(("vfl.data.prepare ", "vfl.config.schema ", "leader.trainer ")) for b in bad
    )


# the benchmarks (benchmarks/, run from the repository root as `python -m benchmarks.NAME`) stand on the library
BENCHMARKS = "benchmarks"


def benchmark_imports(modules: dict[str, set[str]]) -> list[str]:
    """Every import of the benchmarks package by a module of the library."""
    return [
        f"{name} imports {i} (the library never imports the benchmarks)"
        for name, imported in sorted(modules.items())
        for i in sorted(imported)
        if under(i, BENCHMARKS)
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
