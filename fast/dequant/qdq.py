"""ONNX DequantizeLinear with a given scale and zero point, in torch ops (contract ``dequant.qdq``).

Source: onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``onnx/defs/doc_strings.cc``
(``kDoc_DequantizeLinear_ver24``) and ``onnx/defs/quantization/defs.cc``; ``specs/dequant/qdq.yaml``.

Integer codes: ``d = x - zero_point`` in int64, then float32 (exact).  float8 / FP4 codes:
:func:`fast.decode.fp8` / :func:`fast.decode.fp4`.  ``precision="output"`` rounds ``d`` and ``x_scale`` to
``output_dtype`` and multiplies in that dtype (torch float16 / bfloat16 multiplies compute in float32 and
round once, and the float32 product of two such values is exact, so this is one rounding);
``"float32"`` multiplies in float32 and rounds the product to ``output_dtype``.  ``y`` is float32 holding
values of ``output_dtype``.
"""

from __future__ import annotations

import torch

from fast.decode import fp4 as _decode_fp4
from fast.decode import fp8 as _decode_fp8
from fast.quant.qdq import (
    FLOAT8_TYPES,
    INTEGER_RANGES,
    QUANT_TYPES,
    check_choice,
    check_layout,
    code_ints,
    expand,
    signed_values,
)

__all__ = ["qdq"]

OUTPUT_DTYPES = ("float32", "float16", "bfloat16")
PRECISIONS = ("output", "float32")
_WIDE = ("uint16", "int16")
_TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_UINT16 = getattr(torch, "uint16", None)


def _tensor(name: str, value: object, dtype: torch.dtype | None) -> torch.Tensor:
    want = str(dtype).removeprefix("torch.")
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor of {want}")
    if value.dtype != dtype:
        raise TypeError(f"Got {name}.dtype={str(value.dtype).removeprefix('torch.')}, but {name} must be {want}")
    return value


def _check_width(name: str, codes: torch.Tensor, bits: int) -> None:
    bad = torch.nonzero(code_ints(codes) >> bits)
    if bad.numel():
        index = tuple(int(i) for i in bad[0])
        value = int(code_ints(codes)[index])
        where = ", ".join(str(i) for i in index)
        raise ValueError(f"Got {name}[{where}]={value}, but {name} must hold {bits}-bit codes 0..{(1 << bits) - 1}")


def qdq(
    x_scale: torch.Tensor,
    x: torch.Tensor | None = None,
    x16: torch.Tensor | None = None,
    x_zero_point: torch.Tensor | None = None,
    x_zero_point16: torch.Tensor | None = None,
    *,
    input_dtype: str,
    output_dtype: str = "float32",
    granularity: str = "per_tensor",
    axis: int = 1,
    block_size: int = 1,
    precision: str = "output",
) -> dict[str, torch.Tensor]:
    """Dequantize codes as ONNX DequantizeLinear (opset 25): ``y = (x - x_zero_point) * x_scale``.

    Contract
    --------
    ``dequant.qdq`` (module docstring): integer codes minus the zero point, or float8 / FP4 values, times
    the broadcast-aligned ``x_scale``, rounded to ``output_dtype`` per ``precision``.

    Source
    ------
    onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``kDoc_DequantizeLinear_ver24``;
    ``specs/dequant/qdq.yaml``.

    Encoding
    --------
    ``x`` uint8 / ``x16`` uint16 codes ``[R, C]``; ``x_scale`` float32 ``[SR, SC]``; ``x_zero_point`` /
    ``x_zero_point16`` codes of the scale's shape (integer types only).  ``y`` float32 on ``x``'s device.

    Edge cases
    ----------
    NaN codes or scales and 0 * Inf give NaN; E5M2 Inf codes give ±Inf.

    Raises ``ValueError`` / ``TypeError`` as the reference.
    """
    check_choice("input_dtype", input_dtype, QUANT_TYPES)
    check_choice("output_dtype", output_dtype, OUTPUT_DTYPES)
    check_choice("precision", precision, PRECISIONS)
    check_layout(granularity, axis, block_size)
    wide = input_dtype in _WIDE
    name, value, other = ("x16", x16, x) if wide else ("x", x, x16)
    if other is not None:
        raise ValueError(f"Got {'x' if wide else 'x16'} with input_dtype={input_dtype!r}, but it takes {name}")
    if value is None:
        raise ValueError(f"Got no {name}, but input_dtype={input_dtype!r} needs it")
    codes = _tensor(name, value, _UINT16 if wide else torch.uint8)
    if codes.dim() != 2:
        raise ValueError(f"Got {name}.shape={tuple(codes.shape)}, but {name} must be 2-D [R, C]")
    shape = tuple(codes.shape)
    scale = expand("x_scale", _tensor("x_scale", x_scale, torch.float32).to(codes.device), shape, granularity, axis,
                   block_size)  # fmt: skip
    zp_name, zp, zp_other = (
        ("x_zero_point16", x_zero_point16, x_zero_point) if wide else ("x_zero_point", x_zero_point, x_zero_point16)
    )
    if input_dtype in INTEGER_RANGES:
        bits = INTEGER_RANGES[input_dtype][0]
        _check_width(name, codes, bits)
        if zp_other is not None:
            raise ValueError(f"Got the other zero point with input_dtype={input_dtype!r}, but it takes {zp_name}")
        if zp is None:
            raise ValueError(f"Got no {zp_name}, but input_dtype={input_dtype!r} needs one")
        zp_codes = _tensor(zp_name, zp, _UINT16 if wide else torch.uint8).to(codes.device)
        _check_width(zp_name, zp_codes, bits)
        zero = expand(zp_name, signed_values(zp_codes, input_dtype), shape, granularity, axis, block_size)
        d = (signed_values(codes, input_dtype) - zero).to(torch.float32)
    else:
        for other_name, given in (("x_zero_point", x_zero_point), ("x_zero_point16", x_zero_point16)):
            if given is not None:
                raise ValueError(
                    f"Got {other_name} with input_dtype={input_dtype!r}, but float inputs take no zero point (ONNX's 0)"
                )
        decode = _decode_fp8 if input_dtype in FLOAT8_TYPES else _decode_fp4
        d = decode(codes.contiguous(), format=input_dtype)["values"]
    out = _TORCH[output_dtype]
    product = d.to(out) * scale.to(out) if precision == "output" else (d * scale).to(out)
    return {"y": product.to(torch.float32)}
