"""The ``fast`` backends: qconform's own implementations in ``fast/``.

``fast`` runs on CUDA when a GPU is present (Triton kernels where the contract has one,
torch ops otherwise) and on the CPU torch paths elsewhere.  ``fast-triton`` forces the
Triton kernels; without a GPU they run in Triton's interpreter (``TRITON_INTERPRET=1``,
slow: small shapes only), which is how CI checks kernel code on CPU machines.
Each contract resolves by name to ``fast.<family>.<operation>`` (``Spec.function_name``).
"""

from __future__ import annotations

import importlib
import os

from conformance.backends import Backend
from conformance.registry import load_specs

__all__ = ["backend", "triton_backend"]


def _build(name: str) -> Backend:
    import torch

    contracts = {}
    for spec in load_specs():
        try:
            module = importlib.import_module(f"fast.{spec.family}")
        except ModuleNotFoundError:
            continue
        if hasattr(module, spec.function_name):
            contracts[spec.contract] = getattr(module, spec.function_name)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    info = {"torch": torch.__version__, "path": os.environ.get("QCONFORM_FAST_PATH", "auto")}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = "not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        info["triton_interpreter"] = "on"
    return Backend(name=name, device=device, array_kind="torch", contracts=contracts, info=info, validates_inputs=True)


def backend() -> Backend:
    return _build("fast")


def triton_backend() -> Backend:
    """Force the Triton kernels; turn the interpreter on when there is no GPU.

    Call this in a fresh process (the engine's worker is one): the interpreter switch must
    be set before Triton is imported.
    """
    import torch

    os.environ["QCONFORM_FAST_PATH"] = "triton"
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    return _build("fast-triton")
