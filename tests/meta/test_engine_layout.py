"""Layering rules of the engine, read from the source with ``ast`` (nothing is imported).

The core of ``conformance/`` -- every module but the plugins (``conformance/plugins/``) and the two
backends that resolve a contract by name in their own package (``backends/reference_backend.py``,
``backends/fast_backend.py``) -- never imports:

- ``reference`` or ``fast`` (anywhere, also inside a function): the engine that draws the cases and
  judges the outputs must not share code with what it judges.  ``Spec.reference_function`` reaches
  the oracle by name (``importlib``), which this scan does not count, by design;
- a plugin (anywhere): plugins load through their entry points or ``module:attr`` only;
- ``torch`` at module level, directly or through another core module: the CLI, the pytest plugin
  and the NumPy backends start without it.  Only :data:`TORCH_AT_IMPORT` may, with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME_RESOLVERS = {"conformance.backends.reference_backend", "conformance.backends.fast_backend"}
TORCH_AT_IMPORT = {
    "conformance.backends.torch_arrays": "the torch carrier conversions; core modules import it inside functions",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "conformance").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()
CORE = {n: p for n, p in MODULES.items() if not n.startswith("conformance.plugins") and n not in NAME_RESOLVERS}


def imports(name: str, path: Path, top_level_only: bool = False) -> Iterator[tuple[str, int]]:
    """``(module, line)`` of each import (``from a import b`` also yields ``a.b``), relative ones resolved;
    ``top_level_only``: those that run on import (not inside a function or class body)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes: list[ast.AST] = []
    if top_level_only:
        stack: list[ast.AST] = list(tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                continue
            nodes.append(node)
            stack.extend(ast.iter_child_nodes(node))
    else:
        nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            yield module, node.lineno
            for alias in node.names:
                yield f"{module}.{alias.name}", node.lineno


def _is(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def test_the_scan_sees_the_imports_it_must_forbid() -> None:
    planted = {m for m, _ in imports("conformance.plugins.planted", MODULES["conformance.plugins.planted"])}
    assert "reference.cast" in planted
    arrays = MODULES["conformance.backends.torch_arrays"]
    assert "torch" in {m for m, _ in imports("conformance.backends.torch_arrays", arrays, top_level_only=True)}
    testing = {m for m, _ in imports("conformance.testing", MODULES["conformance.testing"], top_level_only=True)}
    assert "conformance.backends.torch_arrays" not in testing  # imported inside a function only
    assert {"conformance.registry", "conformance.compare", "conformance.formats", "conformance.cli"} <= set(CORE)


def test_core_imports_neither_reference_fast_nor_a_plugin() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for name, path in CORE.items()
        for module, line in imports(name, path)
        if _is(module, "reference", "fast", "conformance.plugins")
    ]
    assert not offending, "\n".join(offending)


def test_core_does_not_import_torch_on_import() -> None:
    graph = {name: {m for m, _ in imports(name, path, top_level_only=True)} for name, path in MODULES.items()}
    offending = []
    for name in sorted(set(CORE) - set(TORCH_AT_IMPORT)):
        seen, todo, trail = {name}, [name], {name: name}
        while todo:
            current = todo.pop()
            for target in graph[current]:
                if _is(target, "torch"):
                    offending.append(f"{name} imports torch on import via {trail[current]}")
                elif target in CORE and target not in seen:
                    seen.add(target)
                    trail[target] = f"{trail[current]} -> {target}"
                    todo.append(target)
    assert not offending, "\n".join(sorted(set(offending)))


def test_exceptions_are_still_needed() -> None:
    for name in TORCH_AT_IMPORT:
        assert "torch" in {m for m, _ in imports(name, MODULES[name], top_level_only=True)}, name


def test_every_backend_entry_point_names_a_function_of_the_source_tree() -> None:
    """``pyproject.toml``'s ``qconform.backends`` entry points, read from the file (an installed copy's
    metadata can be stale): each ``module:attr`` is a module here that defines ``attr`` at top level."""
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["qconform.backends"]
    missing = []
    for name, value in declared.items():
        module, _, attr = value.partition(":")
        path = MODULES.get(module)
        tree = ast.parse(path.read_text()) if path else None
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)} if tree else set()
        if attr not in defined:
            missing.append(f"{name} = {value}")
    assert not missing, missing
    plugins = {v.partition(":")[0] for v in declared.values()} - NAME_RESOLVERS
    assert all(p.startswith("conformance.plugins.") for p in plugins), sorted(plugins)
