"""The backend plugin API.

A backend is an implementation under test.  It has a ``name``, a ``device`` and an
``array_kind`` and maps contract ids to callables.  Each callable takes the contract's
inputs as keyword arguments -- NumPy arrays for ``array_kind="numpy"``, torch tensors on
``device`` for ``array_kind="torch"`` -- plus the contract's params as keyword arguments,
and returns a dict of named outputs (arrays or tensors of the spec's output dtypes).

A contract may be implemented for some parameter sets only: wrap the callable in an
``Implementation`` whose ``supports(params)`` returns ``None`` when the set is implemented
and a reason string when it is not.  Param sets a backend does not implement are reported
as *not-implemented*, not as failures.  For one case (an input dtype or a size the callable
has no path for), the callable raises ``NotSupported(reason)``.  ``validates_inputs`` (on the
``Backend``, or per ``Implementation``) says whether the callables raise the spec's argument
errors; it is off by default, so a contract's invalid-input row is *not-implemented*.

Backends are found by name in the entry-point group ``qconform.backends`` (the value is a
``Backend`` or a zero-argument callable returning one), or loaded from ``module:attr``::

    # my_vendor/qconform_plugin.py
    from conformance.backends import Backend

    def backend() -> Backend:
        import my_vendor
        return Backend(name="my-vendor", device="cuda", array_kind="torch",
                       contracts={"cast.fp8": my_vendor.cast_fp8})

    # pyproject.toml
    [project.entry-points."qconform.backends"]
    my-vendor = "my_vendor.qconform_plugin:backend"
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import Any, Literal

import numpy as np

from conformance.errors import BackendError

__all__ = ["Backend", "Implementation", "NotSupported", "available_backends", "load_backend", "numpy_output"]

ENTRY_POINT_GROUP = "qconform.backends"


class NotSupported(Exception):
    """Raised by a contract's callable for one case it does not implement (a dtype, a size, a value its hardware
    has no path for), with the reason as its message: that case is skipped and counted, not an error.  A row whose
    every case raised it is *not-implemented* with the first reason; a row that passed with some skipped passes
    and its message says how many.  Where a whole parameter set is unsupported, say so in ``supports()`` instead
    (the row then runs no case at all)."""


def _always(params: Mapping[str, Any]) -> str | None:
    return None


@dataclass(frozen=True)
class Implementation:
    """A callable for one contract and the parameter sets it implements."""

    fn: Callable[..., Mapping[str, Any]]
    supports: Callable[[Mapping[str, Any]], str | None] = _always
    validates_inputs: bool | None = None
    """Whether the callable promises the spec's ``invalid`` errors (a ``ValueError``/``TypeError`` naming the
    argument); ``None`` takes the backend's ``validates_inputs`` (off unless the backend says otherwise: third-party
    ops seldom check their arguments the way a spec's ``invalid`` entries expect)."""


@dataclass(frozen=True)
class Backend:
    """An implementation under test; see the module docstring for the calling convention."""

    name: str
    device: str
    array_kind: Literal["numpy", "torch"]
    contracts: Mapping[str, Implementation | Callable[..., Mapping[str, Any]]]
    info: Mapping[str, str] = field(default_factory=dict)
    validates_inputs: bool = False
    """The default for contracts whose ``Implementation`` leaves ``validates_inputs`` unset (bare callables
    included): off, so a contract's invalid-input row is *not-implemented* unless the backend promises the spec's
    argument errors.  qconform's own ``fast`` and ``reference`` backends set it."""

    def implementation(self, contract: str) -> Implementation | None:
        """The contract's ``Implementation`` (a bare callable wrapped), its ``validates_inputs`` resolved."""
        impl = self.contracts.get(contract)
        if impl is None:
            return None
        if not isinstance(impl, Implementation):
            impl = Implementation(impl)
        if impl.validates_inputs is None:
            impl = replace(impl, validates_inputs=self.validates_inputs)
        return impl

    def unsupported_reason(self, contract: str, params: Mapping[str, Any]) -> str | None:
        impl = self.implementation(contract)
        if impl is None:
            return f"backend {self.name!r} does not implement {contract}"
        return impl.supports(params)

    def call(
        self, contract: str, inputs: Mapping[str, np.ndarray], dtypes: Mapping[str, str], params: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        """Run one case: NumPy carriers in, NumPy arrays out (conversions done here)."""
        impl = self.implementation(contract)
        if impl is None:
            raise BackendError(f"backend {self.name!r} does not implement {contract}")
        if self.array_kind == "torch":
            from conformance.backends import torch_arrays

            args = {n: torch_arrays.to_tensor(a, dtypes[n], self.device) for n, a in inputs.items()}
            result = impl.fn(**args, **params)
            return {n: torch_arrays.to_numpy(v) for n, v in dict(result).items()}
        result = impl.fn(**{n: np.array(a) for n, a in inputs.items()}, **params)
        return {n: numpy_output(v) for n, v in dict(result).items()}


_SUB_BYTE_MASK = {"float4": 0x0F, "float6": 0x3F}


def numpy_output(value: Any) -> np.ndarray:
    """An output of a NumPy backend as a carrier: an ml_dtypes float array (``float8_*``, ``float6_*``,
    ``float4_*``, ``float8_e8m0fnu``) becomes its ``uint8`` codes (sub-byte formats masked to their width), an
    ml_dtypes ``bfloat16`` array its ``uint16`` bits; anything else is ``np.asarray(value)``."""
    array = np.asarray(value)
    name = array.dtype.name
    if name == "bfloat16" and array.dtype.itemsize == 2:
        return array.view(np.uint16)
    if array.dtype.itemsize == 1 and name.startswith(("float8", "float6", "float4")):
        codes = array.view(np.uint8)
        mask = _SUB_BYTE_MASK.get(name.split("_")[0])
        return codes if mask is None else codes & np.uint8(mask)
    return array


def available_backends() -> dict[str, str]:
    """Registered backend names and their entry-point values."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_backend(name: str) -> Backend:
    """A backend by entry-point name, ``name:option`` (the entry point called with the option, e.g.
    ``onnxruntime:CUDAExecutionProvider``), or from ``module:attr``."""
    head, _, option = name.partition(":")
    registered = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == head]
    if option and registered:  # NAME:OPTION, e.g. onnxruntime:CUDAExecutionProvider
        factory = registered[0].load()
        try:
            backend = factory(option)
        except TypeError as exc:
            raise BackendError(f"backend {head!r} takes no option (got {name!r}): {exc}") from exc
        if not isinstance(backend, Backend):
            raise BackendError(f"{name!r} gave {type(backend).__name__}, expected a conformance.backends.Backend")
        return backend
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise BackendError(f"cannot load backend {name!r}: {exc}") from exc
        except Exception as exc:  # the module's own code failed on import
            raise BackendError(f"cannot load backend {name!r}: importing {module_name} raised "
                               f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    else:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            raise BackendError(
                f"unknown backend {name!r}; registered: {sorted(available_backends())}, or use module:attr"
            )
        try:
            obj = found[0].load()
        except Exception as exc:
            raise BackendError(f"cannot load backend {name!r} ({found[0].value}): {type(exc).__name__}: {exc}") from exc
    try:
        backend = obj if isinstance(obj, Backend) else obj()
    except BackendError as exc:  # the factory's own word: it names what is missing
        raise BackendError(f"cannot load backend {name!r}: {exc}") from exc
    except Exception as exc:
        raise BackendError(f"cannot load backend {name!r}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(backend, Backend):
        raise BackendError(f"{name!r} gave {type(backend).__name__}, expected a conformance.backends.Backend")
    return backend
