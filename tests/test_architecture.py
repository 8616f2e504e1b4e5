"""The layering the tree promises (docs/layout.md): which package may import which, no import cycles, docstrings.

Every import counts, including the lazy ones inside functions: a cycle through a function-level import is still a
cycle a reader has to untangle. Each rule has a power test that plants a violation and sees it reported.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("privacy", "vfl", "leader", "follower")

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
        ("privacy.label", "privacy.federated", "privacy.attacks"),
        "data uses only the public hashes (privacy.public_hash) and parameter domains, never a mechanism",
    ),
)
# the split-learning path (everything but the FedAvg simulation itself) never imports horizontal
HORIZONTAL = "vfl.horizontal"


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
