"""The ``reference`` backend: the NumPy oracle itself, run as a backend.

A run of the reference against itself must always pass; it proves the engine, the specs
and the reference agree before any other backend is judged.
"""

from __future__ import annotations

from conformance.backends import Backend
from conformance.registry import load_specs

__all__ = ["backend"]


def backend() -> Backend:
    contracts = {spec.contract: spec.reference_function() for spec in load_specs()}
    return Backend(
        name="reference", device="cpu", array_kind="numpy", contracts=contracts, info={"module": "reference"}
    )
