"""Backends for the engine's own tests, loaded as ``qconform_test_backends:<name>`` (module:attr).

``backends_on_path`` in ``tests/meta/conftest.py`` puts this directory on ``sys.path`` (a spawned
worker inherits it; a ``qconform`` subprocess gets it through ``PYTHONPATH``).  Each backend is the
NumPy reference for a few small contracts, with at most one planted misbehaviour, so the tests do
not depend on every contract of the suite loading.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import reference.cast
import reference.decode
import reference.glu
import reference.int4
from conformance.backends import Backend, Implementation
from conformance.carriers import carrier_to_bits

Fn = Callable[..., Mapping[str, Any]]

CONTRACTS: dict[str, Fn] = {
    "cast.fp8": reference.cast.fp8,
    "decode.fp8": reference.decode.fp8,
    "glu.interleave": reference.glu.interleave,
    "glu.deinterleave": reference.glu.deinterleave,
    "int4.tinygemm_mm": reference.int4.tinygemm_mm,
}


def _backend(name: str, **replaced: Fn) -> Backend:
    contracts = {c: replaced.get(c.replace(".", "_"), fn) for c, fn in CONTRACTS.items()}
    return Backend(name=name, device="cpu", array_kind="numpy", contracts=contracts, info={"module": "reference"})


def reference_subset() -> Backend:
    """The reference for the contracts in ``CONTRACTS``."""
    return _backend("subset")


def other_subset() -> Backend:
    """The same, under another name: a second column of a merged matrix."""
    return _backend("other")


def negative_zero_flushed() -> Backend:
    """``cast.fp8`` turns -0 into +0."""

    def cast(x: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        codes = reference.cast.fp8(x, **params)["codes"]
        return {"codes": np.where(codes == 0x80, np.uint8(0), codes)}

    return _backend("flushes", cast_fp8=cast)


def one_ulp_off() -> Backend:
    """``int4.tinygemm_mm`` one bfloat16 ulp away from the reference (within the tolerance)."""

    def mm(a: np.ndarray, packed: np.ndarray, scales_and_zeros: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        out = reference.int4.tinygemm_mm(a, packed, scales_and_zeros, **params)["out"]
        bits = carrier_to_bits(out, "bfloat16")
        return {"out": np.where((bits & 0x7FFF) != 0, bits + np.uint16(1), bits).astype(np.uint16)}

    return _backend("ulp-off", int4_tinygemm_mm=mm)


def wrong_shape() -> Backend:
    """``glu.interleave`` returns one row too few."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        return {"out": reference.glu.interleave(w, **params)["out"][:-1]}

    return _backend("wrong-shape", glu_interleave=interleave)


def cuda_error() -> Backend:
    """``glu.interleave`` raises as a failed kernel launch does."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    return _backend("cuda-error", glu_interleave=interleave)


def crashes() -> Backend:
    """``glu.interleave`` kills its process, as a segfaulting kernel does."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        os._exit(139)

    return _backend("crashes", glu_interleave=interleave)


def hangs() -> Backend:
    """``glu.deinterleave`` never returns, as a deadlocked kernel does."""

    def deinterleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        time.sleep(3600)
        raise AssertionError("unreachable")

    return _backend("hangs", glu_deinterleave=deinterleave)


def kills_the_run() -> Backend:
    """``glu.interleave`` kills the process that runs the suite (its worker's parent): a run killed mid-way."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(137)

    return _backend("killed", glu_interleave=interleave)


def supports_raises() -> Backend:
    """``decode.fp8``'s ``supports()`` raises for ``float8_e5m2`` (the other formats are implemented)."""

    def supports(params: Mapping[str, Any]) -> str | None:
        if params["format"] == "float8_e5m2":
            raise KeyError("no table for float8_e5m2")
        return None

    backend = _backend("supports-raises")
    contracts = {**backend.contracts, "decode.fp8": Implementation(reference.decode.fp8, supports)}
    return Backend(name=backend.name, device="cpu", array_kind="numpy", contracts=contracts, info=dict(backend.info))


def hangs_late() -> Backend:
    """``glu.interleave`` never returns; ``glu.deinterleave`` (run before it) passes: a run to interrupt mid-way."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        time.sleep(3600)
        raise AssertionError("unreachable")

    return _backend("hangs-late", glu_interleave=interleave)


def glu_only() -> Backend:
    """The reference for ``glu.interleave`` alone: every other contract is not implemented."""
    return Backend(name="glu-only", device="cpu", array_kind="numpy",
                   contracts={"glu.interleave": reference.glu.interleave}, info={"module": "reference"})  # fmt: skip
