"""ONNX QuantizeLinear with a given scale and zero point (contract ``quant.qdq``).

Source: onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``onnx/defs/quantization/defs.cc``
(``QuantizeLinear_ver25_doc``: ``y = saturate((x / y_scale) + y_zero_point)``, the quotient rounded to
nearest even, the saturation ranges, the three granularities, ``block_size``, ``output_dtype``,
``saturate``); ``docs/Operators.md`` (Cast: the float8 tables) and
``docs/docsgen/source/technical/float4.md`` (E2M1: RNE, overflow and ±Inf -> ±6, NaN -> 6).

Layout
------
``x`` is 2-D ``[R, C]``.  ``y_scale`` and the zero point are carried *broadcast-aligned*, 2-D
``[SR, SC]``: ``[1, 1]`` per tensor (ONNX: a scalar), ``[R, 1]`` / ``[1, C]`` per axis 0 / 1 (ONNX: a
1-D tensor of length ``D_axis``), and ONNX's own blocked shape, ``ceil(D_axis / block_size)`` along
``axis``.  Element ``(i, j)`` of ``x`` uses scale ``(i // b0, j // b1)`` with ``b = block_size`` along
``axis`` and 1 elsewhere (``[1, 1]`` and per-axis shapes broadcast).

Arithmetic
----------
``y_scale`` is float32, so the division is a float32 one (ONNX: "the type of ``y_scale`` determines the
precision of the division"); ``x`` (float32, float16, or bfloat16 carried as float32) widens to float32
exactly.  ``division="true_divide"`` is one IEEE division; ``"reciprocal_multiply"`` is
``x * float32(1 / y_scale)``, two roundings.

- Integer outputs: ``y = clip(rint(q) + zero_point, qmin, qmax)`` in exact integers (±Inf saturate;
  a quotient beyond any int range saturates too).  A NaN quotient gives the zero point
  (``nan="zero_point"``) or ``qmin`` (``nan="minimum"``).  Codes are two's complement bits.
- float8: :func:`reference.cast.fp8` of ``q``, ``overflow="saturate"`` for ``saturate=True`` else
  ``"nonsaturating"`` (the ONNX tables are cast.fp8's policies).
- FP4 E2M1: :func:`reference.cast.fp4` of ``q`` with ``nan="max"`` (float4.md: NaN -> 6).
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice, check_codes
from reference.cast import fp4 as _cast_fp4
from reference.cast import fp8 as _cast_fp8

__all__ = [
    "DIVISIONS",
    "FLOAT8_TYPES",
    "GRANULARITIES",
    "INTEGER_RANGES",
    "QUANT_TYPES",
    "expand_scale",
    "integer_values",
    "qdq",
    "scale_shape",
]

INTEGER_RANGES: dict[str, tuple[int, int, int]] = {
    "uint8": (8, 0, 255),
    "int8": (8, -128, 127),
    "uint16": (16, 0, 65535),
    "int16": (16, -32768, 32767),
    "uint4": (4, 0, 15),
    "int4": (4, -8, 7),
}
"""Bits, minimum and maximum of each integer type (QuantizeLinear_ver25_doc's saturation list)."""
FLOAT8_TYPES: tuple[str, ...] = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
QUANT_TYPES: tuple[str, ...] = (*INTEGER_RANGES, *FLOAT8_TYPES, "float4_e2m1fn")
GRANULARITIES: tuple[str, ...] = ("per_tensor", "per_axis", "blocked")
DIVISIONS: tuple[str, ...] = ("true_divide", "reciprocal_multiply")
NAN_POLICIES: tuple[str, ...] = ("zero_point", "minimum")
_WIDE = ("uint16", "int16")
_INT_LIMIT = 2.0**40  # beyond every range, exact in float64 and int64


def scale_shape(shape: tuple[int, ...], granularity: str, axis: int, block_size: int) -> tuple[int, int]:
    """The broadcast-aligned ``[SR, SC]`` shape of the scale for an ``x`` of ``shape`` (module docstring)."""
    rows, cols = shape
    if granularity == "per_tensor":
        return (1, 1)
    if granularity == "per_axis":
        return (rows, 1) if axis == 0 else (1, cols)
    return (-(-rows // block_size), cols) if axis == 0 else (rows, -(-cols // block_size))


def check_layout(granularity: str, axis: object, block_size: object) -> None:
    """``ValueError`` for an unknown granularity, an axis other than 0 / 1 or a block size below 1."""
    check_choice("granularity", granularity, GRANULARITIES)
    if isinstance(axis, bool) or axis not in (0, 1):
        raise ValueError(f"Got axis={axis!r}, but axis must be 0 or 1 for a 2-D x (ONNX's -2, -1 normalized)")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"Got block_size={block_size!r}, but block_size must be a positive integer")
    if granularity != "blocked" and block_size != 1:
        raise ValueError(f"Got block_size={block_size} with granularity={granularity!r}; only 'blocked' reads it")


def expand_scale(name: str, values: np.ndarray, shape: tuple[int, ...], granularity: str, axis: int, block_size: int):
    """``values`` (``[SR, SC]``) repeated over ``shape``; ``ValueError`` naming ``name`` for a wrong shape."""
    expected = scale_shape(shape, granularity, axis, block_size)
    if values.shape != expected:
        raise ValueError(
            f"Got {name}.shape={values.shape}, but granularity={granularity!r} (axis={axis}, block_size="
            f"{block_size}) on x.shape={shape} needs {expected}"
        )
    if granularity != "blocked":
        return np.broadcast_to(values, shape)
    return np.repeat(values, block_size, axis=axis)[: shape[0], : shape[1]]


def integer_values(codes: np.ndarray, dtype: str) -> np.ndarray:
    """The int64 values of two's complement ``codes`` (uint8 or uint16) of an integer type."""
    bits, low, _ = INTEGER_RANGES[dtype]
    values = codes.astype(np.int64)
    return values - (1 << bits) * (values >> (bits - 1)) if low < 0 else values


def _x_float32(x: object) -> np.ndarray:
    array = check_array("x", x, (np.float32, np.float16))
    if array.ndim != 2:
        raise ValueError(f"Got x.shape={array.shape}, but x must be 2-D [R, C]")
    return array.astype(np.float32)


def _zero_point(
    y_zero_point: np.ndarray | None, y_zero_point16: np.ndarray | None, output_dtype: str
) -> tuple[str, np.ndarray | None]:
    """The zero-point input that ``output_dtype`` takes, by name, checked; the other must be absent."""
    wanted = "y_zero_point16" if output_dtype in _WIDE else "y_zero_point" if output_dtype in INTEGER_RANGES else None
    for name, value in (("y_zero_point", y_zero_point), ("y_zero_point16", y_zero_point16)):
        if value is not None and name != wanted:
            raise ValueError(
                f"Got {name} with output_dtype={output_dtype!r}, but "
                + (f"that output type takes {wanted}" if wanted else "float outputs take no zero point (ONNX's 0)")
            )
    if wanted is None:
        return "", None
    value = y_zero_point16 if wanted == "y_zero_point16" else y_zero_point
    if value is None:
        raise ValueError(f"Got no {wanted}, but output_dtype={output_dtype!r} needs one (its zero point)")
    array = check_array(wanted, value, (np.uint16,) if output_dtype in _WIDE else (np.uint8,))
    check_codes(wanted, array, INTEGER_RANGES[output_dtype][0])
    return wanted, array


def quotient(x: np.ndarray, scale: np.ndarray, division: str) -> np.ndarray:
    """``x / scale`` in float32: one IEEE division, or ``x * float32(1 / scale)``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if division == "true_divide":
            return (x / scale).astype(np.float32)
        return (x * (np.float32(1.0) / scale).astype(np.float32)).astype(np.float32)


def qdq(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    y_zero_point16: np.ndarray | None = None,
    *,
    output_dtype: str,
    saturate: bool = True,
    granularity: str = "per_tensor",
    axis: int = 1,
    block_size: int = 1,
    division: str = "true_divide",
    nan: str = "zero_point",
) -> dict[str, np.ndarray]:
    """Quantize ``x`` with ``y_scale`` and a zero point as ONNX QuantizeLinear (opset 25) defines it.

    Contract
    --------
    ``quant.qdq``: ``q = x / y_scale`` in float32 (``division``), then ``y = saturate(rint(q) +
    zero_point)`` (integer outputs, half to even) or ``y = cast(q)`` (float8 with ``saturate``, FP4
    E2M1); the module docstring gives the layout and each step.

    Source
    ------
    onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``onnx/defs/quantization/defs.cc``
    ``QuantizeLinear_ver25_doc``; ``docs/Operators.md`` (Cast, float8 tables); ``float4.md``;
    ``specs/quant/qdq.yaml``.

    Encoding
    --------
    ``x``: float32 or float16 ``[R, C]`` (bfloat16 values as float32).  ``y_scale``: float32 ``[SR, SC]``.
    ``y_zero_point``: uint8 codes (int8/uint8/int4/uint4, two's complement, 4-bit in the low nibble);
    ``y_zero_point16``: uint16 codes (int16/uint16).  Output ``y`` (uint8 codes) or ``y16`` (uint16
    codes, 16-bit outputs), the shape of ``x``.

    Edge cases
    ----------
    ±Inf quotients saturate (integers; float8 with ``saturate``); a NaN quotient gives the zero point or
    the minimum (``nan``, integers), NaN (float8) or 6 (FP4); a zero ``y_scale`` gives ±Inf or NaN
    quotients; ``-0.0`` stays ``-0.0`` for float8 and FP4 (0x80 / 0x8; FNUZ 0x00).

    Raises ``ValueError`` for unknown params, ``saturate=False`` outside float8, a scale or zero point of
    the wrong shape, a missing or extra zero point, zero-point codes out of range and a non-2-D ``x``;
    ``TypeError`` for an ``x`` that is not float32/float16 or inputs of other dtypes.
    """
    check_choice("output_dtype", output_dtype, QUANT_TYPES)
    check_choice("saturate", saturate, (True, False))
    check_choice("division", division, DIVISIONS)
    check_choice("nan", nan, NAN_POLICIES)
    check_layout(granularity, axis, block_size)
    if not saturate and output_dtype not in FLOAT8_TYPES:
        raise ValueError(
            f"Got saturate=False with output_dtype={output_dtype!r}, but saturate applies to float8 outputs only"
        )
    if nan != "zero_point" and output_dtype not in INTEGER_RANGES:
        raise ValueError(f"Got nan={nan!r} with output_dtype={output_dtype!r}, but nan applies to integer outputs")
    x32 = _x_float32(x)
    scale = check_array("y_scale", y_scale, (np.float32,))
    scale = expand_scale("y_scale", scale, x32.shape, granularity, axis, block_size)
    name, zero_point = _zero_point(y_zero_point, y_zero_point16, output_dtype)
    q = quotient(x32, scale, division)
    if output_dtype in FLOAT8_TYPES:
        overflow = "saturate" if saturate else "nonsaturating"
        return {"y": _cast_fp8(q, format=output_dtype, overflow=overflow)["codes"]}
    if output_dtype == "float4_e2m1fn":
        return {"y": _cast_fp4(q, format=output_dtype, nan="max")["codes"]}
    assert zero_point is not None
    bits, low, high = INTEGER_RANGES[output_dtype]
    zp = expand_scale(name, integer_values(zero_point, output_dtype), x32.shape, granularity, axis, block_size)
    is_nan = np.isnan(q)
    rounded = np.rint(np.clip(np.where(is_nan, 0.0, q.astype(np.float64)), -_INT_LIMIT, _INT_LIMIT))
    values = np.clip(rounded.astype(np.int64) + zp, low, high)
    if nan == "minimum":
        values = np.where(is_nan, low, values)
    codes = values & ((1 << bits) - 1)
    if output_dtype in _WIDE:
        return {"y16": codes.astype(np.uint16)}
    return {"y": codes.astype(np.uint8)}
