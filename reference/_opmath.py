"""Reduced-precision float arithmetic as torch performs it (private: no ``__all__``, no contract here).

torch computes an elementwise op on float16 or bfloat16 tensors in float32 ("opmath") and rounds
the float32 result once to the tensor's dtype, on the CPU and on CUDA alike; an op on float32
tensors is IEEE single precision.  So every such op is ``to_dtype(float32_op(a, b), dtype)``:
NumPy's float32 arithmetic is IEEE single precision (correctly rounded ``+ - * /``), and
:func:`to_dtype` rounds to nearest even.  Values of every dtype travel as float32 arrays holding
the exact value (the engine's bfloat16 carrier).

:func:`bfloat16_from_float64` rounds a float64 value to bfloat16 in one step (no float32 on the
way), for results whose exact value is known in float64 or has been rounded to odd there.
"""

from __future__ import annotations

import numpy as np

ARITHMETIC_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")

_BF16_LIMIT = 2.0**128
"""Magnitudes rounding to this or beyond overflow bfloat16 (its largest finite value is (2 - 2**-7) * 2**127)."""


def to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to nearest even in ``dtype``, returned as float32 (overflow gives ±Inf).

    bfloat16 rounds the float32 bit pattern at bit 16, ties to even (a carry out of the mantissa
    moves into the exponent, up to Inf); NaN stays NaN (quieted, sign and top payload bits kept).
    float16 uses NumPy's own float32 -> float16 conversion, which rounds to nearest even.
    """
    values = np.asarray(values, dtype=np.float32)
    if dtype == "float32":
        return values
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    quiet_nan = (bits.astype(np.uint32) | 0x0040_0000) & 0xFFFF0000
    return np.where(np.isnan(values), quiet_nan, rounded).view(np.float32)


def is_dtype_value(values: np.ndarray, dtype: str) -> np.ndarray:
    """Which float32 values are exactly values of ``dtype`` (NaN counts as one)."""
    values = np.asarray(values, dtype=np.float32)
    same = to_dtype(values, dtype).view(np.uint32) == values.view(np.uint32)
    return same | np.isnan(values)


def bfloat16_from_float64(values: np.ndarray) -> np.ndarray:
    """float64 values rounded once to bfloat16 (nearest, ties to even), returned as float32.

    With ``values = m * 2**e`` (``0.5 <= |m| < 1``) the bfloat16 quantum is ``2**(e - 8)`` for
    normal results and ``2**-133`` for subnormal ones; scaling by the quantum is exact in float64,
    ``np.rint`` rounds half to even, and a result of ``2**128`` or more overflows to ±Inf.  Zeros
    keep their sign; NaN stays NaN.
    """
    values = np.asarray(values, dtype=np.float64)
    _, exponent = np.frexp(values)
    quantum = np.maximum(exponent - 8, -133)
    with np.errstate(invalid="ignore"):
        rounded = np.ldexp(np.rint(np.ldexp(values, -quantum)), quantum)
        rounded = np.where(np.abs(rounded) >= _BF16_LIMIT, np.copysign(np.inf, values), rounded)
    return rounded.astype(np.float32)
