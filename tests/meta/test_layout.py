"""Layering rules of the packages, read from the source with ``ast`` (nothing is imported).

- no module of ``fast/`` above :data:`MAX_LINES` lines, except those listed in :data:`LONG_MODULES` with the reason;
- no import cycle among the modules of ``fast/`` (every ``import`` counts, also those inside functions);
- no module of ``fast/`` imports a private name (leading underscore) from another module, or reads one as an
  attribute of an imported ``fast`` module: what one module uses of another is its public surface;
- ``fast/`` never imports ``reference/`` or ``conformance/`` (a bug both shared would be invisible);
- ``reference/`` imports only NumPy and the standard library.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600
LONG_MODULES: dict[str, str] = {
    "fast.cast": "one module per contract family (cast.fp8/fp6/fp4/e8m0/int share the rounding kernel); not split yet",
    "fast.gemm": "scaled and grouped GEMM contracts with their launch tables; not split yet",
    "fast.int4": "the four tinygemm int4 contracts (pack, unpack, dequant, mm) share the tile layout; not split yet",
    "fast.quant.fp8": "current and delayed scaling plus the FP8 device functions other recipes import; not split yet",
}
"""Modules allowed above :data:`MAX_LINES`, with the reason (each must still be above it)."""


def modules(package: str) -> dict[str, Path]:
    """Dotted name -> path of every module under ``ROOT / package``."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


FAST = modules("fast")
REFERENCE = modules("reference")


def imports(name: str, path: Path) -> Iterator[tuple[str, tuple[str, ...], int]]:
    """``(module, imported names, line)`` of every import in the module ``name`` (relative ones resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            yield module, tuple(alias.name for alias in node.names), node.lineno


def fast_targets(module: str, names: tuple[str, ...]) -> set[str]:
    """The ``fast`` modules an import reaches: the module itself, or the submodules it names."""
    if module not in FAST:
        return set()
    submodules = {f"{module}.{n}" for n in names if f"{module}.{n}" in FAST}
    return submodules if submodules and len(submodules) == len(names) else {module} | submodules


def test_modules_are_found() -> None:
    assert {"fast.quant.nvfp4", "fast.quant.nvfp4.launch", "fast.group.kernels", "fast.formats"} <= set(FAST)
    assert {"reference.formats", "reference.quant.nvfp4"} <= set(REFERENCE)


def test_no_module_of_fast_is_too_long() -> None:
    lengths = {name: len(path.read_text().splitlines()) for name, path in FAST.items()}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in LONG_MODULES}
    assert not too_long, f"above {MAX_LINES} lines (split by role, or list in LONG_MODULES with the reason): {too_long}"
    stale = {name for name in LONG_MODULES if lengths.get(name, 0) <= MAX_LINES}
    assert not stale, f"no longer above {MAX_LINES} lines: remove from LONG_MODULES: {sorted(stale)}"


def test_fast_has_no_import_cycle() -> None:
    graph = {
        name: {t for module, names, _ in imports(name, path) for t in fast_targets(module, names)} - {name}
        for name, path in FAST.items()
    }
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = [*trail[trail.index(target) :], target]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def test_fast_imports_no_private_name_from_another_module() -> None:
    offending = []
    for name, path in FAST.items():
        for module, names, line in imports(name, path):
            if module in FAST and module != name:
                offending += [f"{path.relative_to(ROOT)}:{line} imports {module}.{n}" for n in names if n[0] == "_"]
        for node in ast.walk(ast.parse(path.read_text())):
            chain = dotted(node) if isinstance(node, ast.Attribute) else None
            if chain and chain.startswith("fast.") and node.attr[0] == "_" and not node.attr.startswith("__"):
                offending.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {chain}")
    assert not offending, "\n".join(offending)


def test_fast_never_imports_reference_or_conformance() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for name, path in FAST.items()
        for module, _, line in imports(name, path)
        if module.split(".")[0] in ("reference", "conformance")
    ]
    assert not offending, "\n".join(offending)


def test_reference_imports_only_numpy_and_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"numpy", "reference", "__future__"}
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for name, path in REFERENCE.items()
        for module, _, line in imports(name, path)
        if module.split(".")[0] not in allowed
    ]
    assert not offending, "\n".join(offending)
