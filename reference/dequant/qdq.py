"""ONNX DequantizeLinear with a given scale and zero point (contract ``dequant.qdq``).

Source: onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``onnx/defs/doc_strings.cc``
(``kDoc_DequantizeLinear_ver24``: ``y = (x - x_zero_point) * x_scale``; "The output type also determines
the precision of the multiplication operation") and ``onnx/defs/quantization/defs.cc`` (DequantizeLinear
25: types, ``axis``, ``block_size``, ``output_dtype``); ``specs/dequant/qdq.yaml``.

Layout as :mod:`reference.quant.qdq` (``x_scale`` and the zero point broadcast-aligned ``[SR, SC]``).
Integer ``x``: ``d = x - zero_point`` exactly (an integer of at most 17 bits, exact in float32).  Float
``x`` (float8, FP4): ``d`` is the code's exact value (:mod:`reference.decode`), no zero point.

- ``precision="output"``: ``y = round_out(round_out(d) * round_out(x_scale))``; both factors have at
  most 24 significant bits in float32 and at most 11 in float16 / bfloat16, so the float32 product of
  the rounded factors is exact for float16 / bfloat16 and the one rounding is to ``output_dtype``.
- ``precision="float32"``: ``y = round_out(float32(d * x_scale))`` (ONNX's reference evaluator): two
  roundings for float16 / bfloat16 outputs.
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice, check_codes
from reference._opmath import to_dtype
from reference.decode import fp4 as _decode_fp4
from reference.decode import fp8 as _decode_fp8
from reference.quant.qdq import FLOAT8_TYPES, INTEGER_RANGES, QUANT_TYPES, check_layout, expand_scale, integer_values

__all__ = ["OUTPUT_DTYPES", "PRECISIONS", "qdq"]

OUTPUT_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
PRECISIONS: tuple[str, ...] = ("output", "float32")
_WIDE = ("uint16", "int16")


def _codes(
    x: np.ndarray | None, x16: np.ndarray | None, input_dtype: str
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The code input that ``input_dtype`` takes (``x`` or ``x16``), checked."""
    wide = input_dtype in _WIDE
    name, value, other = ("x16", x16, x) if wide else ("x", x, x16)
    if other is not None:
        raise ValueError(f"Got {'x' if wide else 'x16'} with input_dtype={input_dtype!r}, but it takes {name}")
    if value is None:
        raise ValueError(f"Got no {name}, but input_dtype={input_dtype!r} needs it")
    array = check_array(name, value, (np.uint16,) if wide else (np.uint8,))
    if array.ndim != 2:
        raise ValueError(f"Got {name}.shape={array.shape}, but {name} must be 2-D [R, C]")
    bits = INTEGER_RANGES[input_dtype][0] if input_dtype in INTEGER_RANGES else (4 if "float4" in input_dtype else 8)
    check_codes(name, array, bits)
    return array, x, x16


def qdq(
    x_scale: np.ndarray,
    x: np.ndarray | None = None,
    x16: np.ndarray | None = None,
    x_zero_point: np.ndarray | None = None,
    x_zero_point16: np.ndarray | None = None,
    *,
    input_dtype: str,
    output_dtype: str = "float32",
    granularity: str = "per_tensor",
    axis: int = 1,
    block_size: int = 1,
    precision: str = "output",
) -> dict[str, np.ndarray]:
    """Dequantize codes with a scale and zero point as ONNX DequantizeLinear (opset 25) defines it.

    Contract
    --------
    ``dequant.qdq``: ``y = (x - x_zero_point) * x_scale`` (integers) or ``decode(x) * x_scale`` (float8,
    FP4), rounded to ``output_dtype`` as ``precision`` says (module docstring).

    Source
    ------
    onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``kDoc_DequantizeLinear_ver24``;
    ``specs/dequant/qdq.yaml``.

    Encoding
    --------
    ``x``: uint8 codes ``[R, C]`` (two's complement for signed types, 4-bit in the low nibble; float8 /
    FP4 codes), ``x16``: uint16 codes for int16 / uint16.  ``x_scale`` float32 ``[SR, SC]``; the zero
    point (``x_zero_point`` uint8 / ``x_zero_point16`` uint16 codes) for integer types only.  ``y``:
    float32 holding values of ``output_dtype``.

    Edge cases
    ----------
    NaN codes and NaN scales give NaN, 0 * Inf gives NaN, Inf codes (E5M2) give ±Inf; a product beyond
    float16's range gives ±Inf.

    Raises ``ValueError`` for unknown params, codes beyond the type's width, a scale or zero point of the
    wrong shape, a missing or extra code input or zero point; ``TypeError`` for carriers of other dtypes.
    """
    check_choice("input_dtype", input_dtype, QUANT_TYPES)
    check_choice("output_dtype", output_dtype, OUTPUT_DTYPES)
    check_choice("precision", precision, PRECISIONS)
    check_layout(granularity, axis, block_size)
    codes, _, _ = _codes(x, x16, input_dtype)
    shape = codes.shape
    scale = expand_scale(
        "x_scale", check_array("x_scale", x_scale, (np.float32,)), shape, granularity, axis, block_size
    )
    wide = input_dtype in _WIDE
    zp_name, zp, other = (
        ("x_zero_point16", x_zero_point16, x_zero_point) if wide else ("x_zero_point", x_zero_point, x_zero_point16)
    )
    if input_dtype in INTEGER_RANGES:
        if other is not None:
            raise ValueError(f"Got the other zero point with input_dtype={input_dtype!r}, but it takes {zp_name}")
        if zp is None:
            raise ValueError(f"Got no {zp_name}, but input_dtype={input_dtype!r} needs one")
        zp_codes = check_array(zp_name, zp, (np.uint16,) if wide else (np.uint8,))
        check_codes(zp_name, zp_codes, INTEGER_RANGES[input_dtype][0])
        zero = expand_scale(zp_name, integer_values(zp_codes, input_dtype), shape, granularity, axis, block_size)
        d = (integer_values(codes, input_dtype) - zero).astype(np.float32)
    else:
        for name, value in (("x_zero_point", x_zero_point), ("x_zero_point16", x_zero_point16)):
            if value is not None:
                raise ValueError(
                    f"Got {name} with input_dtype={input_dtype!r}, but float inputs take no zero point (ONNX's 0)"
                )
        decode = _decode_fp8 if input_dtype in FLOAT8_TYPES else _decode_fp4
        d = decode(codes, format=input_dtype)["values"]
    with np.errstate(invalid="ignore", over="ignore"):
        if precision == "output":
            product = to_dtype(d, output_dtype) * to_dtype(np.ascontiguousarray(scale), output_dtype)
        else:
            product = d * scale
        return {"y": to_dtype(product.astype(np.float32), output_dtype)}
