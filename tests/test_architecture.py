"""Dependencies point one way: privacy <- vfl <- leader / follower."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = {"privacy": ("vfl", "leader", "follower", "zmq"), "vfl": ("leader", "follower"),
             "leader": ("follower",), "follower": ("leader",)}


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_packages_import_only_downstream():
    # Prepare / Execute
    bad = [f"{p.relative_to(ROOT)} imports {sorted(_imports(p) & set(banned))}"
           for pkg, banned in FORBIDDEN.items() for p in (ROOT / pkg).rglob("*.py") if _imports(p) & set(banned)]
    # Assert
    assert bad == []


def test_every_module_starts_with_a_docstring():
    missing = [str(p.relative_to(ROOT)) for pkg in FORBIDDEN for p in (ROOT / pkg).rglob("*.py")
               if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert missing == []
