"""Deliberately wrong backends: proof that the engine catches real bugs.

Each one is the reference with one plausible kernel bug planted in it, or a backend that
misbehaves as a process (crashes, hangs).  ``tests/meta`` asserts that a ``smoke`` run
flags every one of them with a shrunk counterexample; anyone can check an installation
the same way::

    qconform run --backend conformance.plugins.planted:ties_away --spec cast.fp8 --profile smoke
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import reference.cast
import reference.decode
import reference.glu
from conformance.backends import Backend, Implementation
from reference.formats import get_format

__all__ = [
    "blocks_swapped",
    "crashes",
    "hangs",
    "nan_sign_dropped",
    "nearest_not_stochastic",
    "negative_zero_flushed",
    "no_saturation",
    "ties_away",
    "wrong_dtype",
]


def _rne_only(params: Mapping[str, Any]) -> str | None:
    return None if params["rounding"] == "rne" else "planted bugs are round-to-nearest-even only"


def _cast_backend(name: str, cast: Callable[..., dict[str, np.ndarray]]) -> Backend:
    return Backend(
        name=name,
        device="cpu",
        array_kind="numpy",
        contracts={"cast.fp8": Implementation(cast, _rne_only)},
        validates_inputs=True,
    )


def _ties_away(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
    """Round half away from zero: where x is exactly halfway, step the magnitude up one code."""
    codes = reference.cast.fp8(x, format=format, overflow=overflow, rounding=rounding)["codes"]
    fmt = get_format(format)
    mags = fmt.finite_magnitudes
    midpoints = (mags[:-1] + mags[1:]) / 2
    wide = np.abs(x.astype(np.float64))
    bump = np.isin(wide, midpoints) & (np.abs(fmt.decode_table[codes]) < wide)
    return {"codes": np.where(bump, codes + 1, codes).astype(np.uint8)}


def ties_away() -> Backend:
    return _cast_backend("planted-ties-away", _ties_away)


def no_saturation() -> Backend:
    """Ignores ``overflow``: always non-saturating."""

    def cast(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        return reference.cast.fp8(x, format=format, overflow="nonsaturating", rounding=rounding)

    return _cast_backend("planted-no-saturation", cast)


def nan_sign_dropped() -> Backend:
    """Every NaN becomes the positive NaN code."""

    def cast(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        codes = reference.cast.fp8(x, format=format, overflow=overflow, rounding=rounding)["codes"]
        return {"codes": np.where(np.isnan(x), np.uint8(0x7F), codes)}

    return _cast_backend("planted-nan-sign-dropped", cast)


def negative_zero_flushed() -> Backend:
    """-0.0 (and anything rounding to it) comes out as +0."""

    def cast(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        codes = reference.cast.fp8(x, format=format, overflow=overflow, rounding=rounding)["codes"]
        return {"codes": np.where(codes == 0x80, np.uint8(0), codes)}

    return _cast_backend("planted-negative-zero-flushed", cast)


def wrong_dtype() -> Backend:
    """Right values, wrong container: int32 codes instead of uint8."""

    def cast(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        return {
            "codes": reference.cast.fp8(x, format=format, overflow=overflow, rounding=rounding)["codes"].astype(
                np.int32
            )
        }

    return _cast_backend("planted-wrong-dtype", cast)


def blocks_swapped() -> Backend:
    """GLU interleave that puts the V block before the W block."""

    def interleave(w: np.ndarray, *, block_size: int) -> dict[str, Any]:
        out = reference.glu.interleave(w, block_size=block_size)["out"]
        if out.ndim == 0 or out.shape[0] == 0:
            return {"out": out}
        pairs = out.reshape(out.shape[0] // (2 * block_size), 2, block_size, *out.shape[1:])
        return {"out": pairs[:, ::-1].reshape(out.shape)}

    return Backend(
        name="planted-blocks-swapped",
        device="cpu",
        array_kind="numpy",
        contracts={"glu.interleave": interleave},
        validates_inputs=True,
    )


def crashes() -> Backend:
    """Kills its own process on any negative input (as a segfaulting kernel would)."""

    def cast(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        if np.any(np.signbit(x)):
            os._exit(139)
        return reference.cast.fp8(x, format=format, overflow=overflow, rounding=rounding)

    return _cast_backend("planted-crashes", cast)


def hangs() -> Backend:
    """Never returns on inputs holding NaN (as a deadlocked kernel would)."""

    def cast(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        if np.any(np.isnan(x)):
            time.sleep(3600)
        return reference.cast.fp8(x, format=format, overflow=overflow, rounding=rounding)

    def decode(codes: np.ndarray, *, format: str) -> Mapping[str, np.ndarray]:
        return reference.decode.fp8(codes, format=format)

    return Backend(
        name="planted-hangs",
        device="cpu",
        array_kind="numpy",
        contracts={"cast.fp8": cast, "decode.fp8": decode},
        validates_inputs=True,
    )


def nearest_not_stochastic() -> Backend:
    """ "Stochastic" rounding that always rounds to nearest: every draw is a neighbour, but biased."""

    def draw(x: np.ndarray, *, format: str, overflow: str, draws: int) -> dict[str, np.ndarray]:
        nearest = reference.cast.fp8(x, format=format, overflow=overflow)["codes"]
        return {"codes": np.broadcast_to(nearest, (draws, *nearest.shape)).copy()}

    return Backend(
        name="planted-nearest",
        device="cpu",
        array_kind="numpy",
        contracts={"stochastic.fp8": draw},
        validates_inputs=True,
    )
