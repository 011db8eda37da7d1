"""Layout rules of ``fast/``: it never imports ``reference/`` (a bug both shared would be invisible),
imports without Triton, and queries no device at import time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

FAST = Path(__file__).resolve().parents[2] / "fast"
MODULES = sorted(
    ".".join(path.relative_to(FAST.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in FAST.rglob("*.py")
    if not path.stem.endswith("gluon")  # Gluon kernels import Triton; the CUDA path imports them lazily
)


def imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_modules_are_found() -> None:
    assert {"fast.cast", "fast.decode", "fast.glu", "fast.quant.nvfp4", "fast.quant.nvfp4.launch"} <= set(MODULES)


def test_fast_never_imports_reference() -> None:
    for path in FAST.rglob("*.py"):
        offending = {n for n in imported_names(path) if n == "reference" or n.startswith(("reference.", "conformance"))}
        assert not offending, f"{path.name} imports {sorted(offending)}"


BLOCKED_IMPORT = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ImportError(f"{name} is blocked for this test")
        return None

sys.meta_path.insert(0, Block())
import torch

def no_device_queries(*args, **kwargs):
    raise AssertionError("a device was queried at import time")

torch.cuda.is_available = torch.cuda.device_count = torch.cuda.get_device_properties = no_device_queries
for name in MODULES:
    importlib.import_module(name)
assert not any(m == "triton" or m.startswith("triton.") for m in sys.modules), "triton was imported"
assert not any(m == "reference" or m.startswith("reference.") for m in sys.modules), "reference was imported"
import fast.cast
print(fast.cast.fp8(torch.tensor([125.8, -464.01]), format="float8_e4m3fn", overflow="saturate")["codes"].tolist())
"""


def test_imports_without_triton_and_without_device_queries() -> None:
    script = f"import importlib\nMODULES = {MODULES!r}\n{BLOCKED_IMPORT}"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=FAST.parent, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[112, 254]"
