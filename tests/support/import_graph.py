"""The import graph of the tree's modules, read from their source: every import, lazy ones and string literals included.

What the architecture and convention tests of tests/repo read: each module's imports (relative ones resolved, imports
inside functions and `__import__("pkg.mod")` included), the loops between modules (Tarjan's strongly connected
components), and the loops between packages, folder by folder.
"""

from __future__ import annotations

import ast
import pathlib

from tests.support.paths import REPO as ROOT

PACKAGES = ("privacy", "vfl", "leader", "follower", "vfl_api")
TESTS = "tests"


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
        elif (target := dynamic_import_target(node)) is not None and isinstance(target, ast.Constant):
            names.add(str(target.value))  # __import__("pkg.mod") and import_module("pkg.mod") count as imports
    return names


def dynamic_import_target(node: ast.AST) -> ast.expr | None:
    """The argument of a call to `__import__` or `import_module` (bare or as `importlib.import_module`), else None."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return node.args[0] if name in ("__import__", "import_module") else None


def computed_imports(source: str) -> int:
    """How many imports in `source` name their module by a value computed at run time (not a string literal)."""
    return sum(
        1
        for node in ast.walk(ast.parse(source))
        if (target := dynamic_import_target(node)) is not None and not isinstance(target, ast.Constant)
    )


def project_modules() -> dict[str, set[str]]:
    """module name -> the names it imports, for every module of the library's packages (PACKAGES)."""
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


def library_files() -> list[pathlib.Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


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


def package_cycles(modules: dict[str, set[str]]) -> list[str]:
    """Loops between packages, `FOLDER: [its children in a loop]`, for every folder: its children are its own modules
    and its subpackages (each taken whole, all it holds), and a child depends on another when any module inside the
    one imports any module inside the other. A loop between files is the deepest case; this also finds the loop that
    runs through several files of several packages, which no two files close by themselves."""

    def known(name: str) -> str | None:  # the module an imported name belongs to (`pkg.mod.func` -> `pkg.mod`)
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def child(folder: str, name: str) -> str | None:  # the child of `folder` that holds module `name`
        head = folder + "." if folder else ""
        if name == folder or not name.startswith(head):
            return None
        return head + name[len(head) :].split(".")[0]

    folders = (
        {""}
        | {m.rsplit(".", 1)[0] for m in modules if "." in m}
        | {".".join(m.split(".")[:k]) for m in modules for k in range(1, m.count(".") + 1)}
    )
    found = []
    for folder in sorted(folders):
        graph: dict[str, set[str]] = {}
        for name, imported in modules.items():
            here = child(folder, name)
            if here is None:
                continue
            graph.setdefault(here, set())
            for i in imported:
                target = known(i)
                there = child(folder, target) if target else None
                if there is not None and there != here:
                    graph[here].add(there)
                    graph.setdefault(there, set())
        found += [f"{folder or '(root)'}: {loop}" for loop in cycles(graph)]
    return found
