"""The ``reference`` backend: the NumPy oracle itself, run as a backend.

A run of the reference against itself must always pass; it proves the engine, the specs
and the reference agree before any other backend is judged.  Each contract's reference
function is looked up when the contract is first called, so a contract whose reference
cannot be imported errors on its own rows instead of keeping the backend from loading.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from conformance.backends import Backend
from conformance.registry import Spec, load_specs

__all__ = ["backend"]


def _deferred(spec: Spec) -> Callable[..., Mapping[str, Any]]:
    def call(**arguments: Any) -> Mapping[str, Any]:
        return spec.reference_function()(**arguments)

    return call


def backend() -> Backend:
    contracts = {spec.contract: _deferred(spec) for spec in load_specs()}
    return Backend(
        name="reference",
        device="cpu",
        array_kind="numpy",
        contracts=contracts,
        info={"module": "reference"},
        validates_inputs=True,
    )
