"""ONNX QuantizeLinear with a given scale and zero point, in torch ops (contract ``quant.qdq``).

Source: onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``onnx/defs/quantization/defs.cc``
(``QuantizeLinear_ver25_doc``), ``docs/Operators.md`` (Cast float8 tables),
``docs/docsgen/source/technical/float4.md``; ``specs/quant/qdq.yaml``.

``x`` ``[R, C]`` (float32, bfloat16 or float16) widens to float32 exactly; ``y_scale`` is float32
``[SR, SC]``, broadcast-aligned (``[1, 1]`` per tensor, ``[R, 1]`` / ``[1, C]`` per axis, ONNX's
blocked shape), repeated over ``x``.  ``q = x / y_scale`` (one IEEE float32 division: CPU and CUDA
torch divide tensors correctly rounded) or ``x * reciprocal(y_scale)``; integer outputs round half to
even (``torch.round``), add the zero point in int64 and clamp; float8 and FP4 outputs go through
:func:`fast.cast.fp8` / :func:`fast.cast.fp4` on the float32 quotient.  Runs on any device torch does.
"""

from __future__ import annotations

import torch

from fast.cast import fp4 as _cast_fp4
from fast.cast import fp8 as _cast_fp8

__all__ = ["FLOAT8_TYPES", "INTEGER_RANGES", "QUANT_TYPES", "check_choice", "expand", "qdq", "signed_values"]

INTEGER_RANGES: dict[str, tuple[int, int, int]] = {
    "uint8": (8, 0, 255),
    "int8": (8, -128, 127),
    "uint16": (16, 0, 65535),
    "int16": (16, -32768, 32767),
    "uint4": (4, 0, 15),
    "int4": (4, -8, 7),
}
FLOAT8_TYPES = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
QUANT_TYPES = (*INTEGER_RANGES, *FLOAT8_TYPES, "float4_e2m1fn")
GRANULARITIES = ("per_tensor", "per_axis", "blocked")
DIVISIONS = ("true_divide", "reciprocal_multiply")
NAN_POLICIES = ("zero_point", "minimum")
_WIDE = ("uint16", "int16")
_INT_LIMIT = 2.0**40
_UINT16 = getattr(torch, "uint16", None)


def check_choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    """``ValueError`` unless ``value`` is one of ``allowed`` (of the same type: ``1`` is not ``True``)."""
    if not any(type(value) is type(choice) and value == choice for choice in allowed):
        raise ValueError(f"Got {name}={value!r}, but {name} must be one of {list(allowed)}")


def check_layout(granularity: str, axis: object, block_size: object) -> None:
    check_choice("granularity", granularity, GRANULARITIES)
    if isinstance(axis, bool) or axis not in (0, 1):
        raise ValueError(f"Got axis={axis!r}, but axis must be 0 or 1 for a 2-D x (ONNX's -2, -1 normalized)")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"Got block_size={block_size!r}, but block_size must be a positive integer")
    if granularity != "blocked" and block_size != 1:
        raise ValueError(f"Got block_size={block_size} with granularity={granularity!r}; only 'blocked' reads it")


def scale_shape(shape: tuple[int, ...], granularity: str, axis: int, block_size: int) -> tuple[int, int]:
    rows, cols = shape
    if granularity == "per_tensor":
        return (1, 1)
    if granularity == "per_axis":
        return (rows, 1) if axis == 0 else (1, cols)
    return (-(-rows // block_size), cols) if axis == 0 else (rows, -(-cols // block_size))


def expand(
    name: str, values: torch.Tensor, shape: tuple[int, ...], granularity: str, axis: int, block_size: int
) -> torch.Tensor:
    """``values`` (``[SR, SC]``) repeated over ``shape``; ``ValueError`` naming ``name`` for a wrong shape."""
    expected = scale_shape(shape, granularity, axis, block_size)
    if tuple(values.shape) != expected:
        raise ValueError(
            f"Got {name}.shape={tuple(values.shape)}, but granularity={granularity!r} (axis={axis}, block_size="
            f"{block_size}) on x.shape={tuple(shape)} needs {expected}"
        )
    if granularity != "blocked":
        return values.expand(shape)
    return values.repeat_interleave(block_size, dim=axis)[: shape[0], : shape[1]]


def code_ints(codes: torch.Tensor) -> torch.Tensor:
    """uint8 or uint16 codes as int64 (uint16 read through its int16 view)."""
    if _UINT16 is not None and codes.dtype == _UINT16:
        return codes.view(torch.int16).to(torch.int64) & 0xFFFF
    return codes.to(torch.int64)


def signed_values(codes: torch.Tensor, dtype: str) -> torch.Tensor:
    """int64 values of two's complement codes of an integer type."""
    bits, low, _ = INTEGER_RANGES[dtype]
    values = code_ints(codes)
    return values - (1 << bits) * (values >> (bits - 1)) if low < 0 else values


def _check_tensor(name: str, value: object, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor:
    allowed = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor of {allowed}")
    if value.dtype not in dtypes:
        raise TypeError(f"Got {name}.dtype={str(value.dtype).removeprefix('torch.')}, but {name} must be {allowed}")
    return value


def _zero_point(
    y_zero_point: torch.Tensor | None, y_zero_point16: torch.Tensor | None, output_dtype: str
) -> tuple[str, torch.Tensor | None]:
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
    codes = _check_tensor(wanted, value, (_UINT16,) if output_dtype in _WIDE else (torch.uint8,))  # type: ignore[arg-type]
    bits = INTEGER_RANGES[output_dtype][0]
    bad = torch.nonzero(code_ints(codes) >> bits)
    if bad.numel():
        where = ", ".join(str(int(i)) for i in bad[0])
        raise ValueError(f"Got {wanted}[{where}] beyond {bits} bits, but {wanted} must hold {bits}-bit codes")
    return wanted, codes


def quotient(x: torch.Tensor, scale: torch.Tensor, division: str) -> torch.Tensor:
    """``x / scale`` in float32: one IEEE division, or ``x * reciprocal(scale)``."""
    if division == "true_divide":
        return x / scale
    return x * torch.reciprocal(scale)


def qdq(
    x: torch.Tensor,
    y_scale: torch.Tensor,
    y_zero_point: torch.Tensor | None = None,
    y_zero_point16: torch.Tensor | None = None,
    *,
    output_dtype: str,
    saturate: bool = True,
    granularity: str = "per_tensor",
    axis: int = 1,
    block_size: int = 1,
    division: str = "true_divide",
    nan: str = "zero_point",
) -> dict[str, torch.Tensor]:
    """Quantize ``x`` with ``y_scale`` and a zero point as ONNX QuantizeLinear (opset 25).

    Contract
    --------
    ``quant.qdq``: ``q = x / y_scale`` in float32 (``division``), then ``y = clamp(round_half_even(q) +
    zero_point)`` for integer outputs (NaN -> the zero point, or the minimum with ``nan="minimum"``) or
    ``y = cast(q)`` (float8 with ``saturate``; FP4 E2M1, NaN -> 6).

    Source
    ------
    onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e ``QuantizeLinear_ver25_doc``; ``specs/quant/qdq.yaml``.

    Encoding
    --------
    ``x`` float32/bfloat16/float16 ``[R, C]``; ``y_scale`` float32 ``[SR, SC]`` (module docstring);
    ``y_zero_point`` uint8 codes or ``y_zero_point16`` uint16 codes (two's complement).  Returns ``y``
    (uint8 codes) or ``y16`` (uint16 codes for int16 / uint16), on ``x``'s device.

    Edge cases
    ----------
    ±Inf saturate (integers, float8 with ``saturate``); quotients beyond the int range saturate; -0.0
    keeps its sign for float8 and FP4 (not FNUZ).

    Raises ``ValueError`` and ``TypeError`` as the reference: unknown params, ``saturate=False`` outside
    float8, wrong scale or zero-point shapes, a missing or extra zero point, an x that is not a 2-D float
    tensor.
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
    x = _check_tensor("x", x, (torch.float32, torch.bfloat16, torch.float16))
    if x.dim() != 2:
        raise ValueError(f"Got x.shape={tuple(x.shape)}, but x must be 2-D [R, C]")
    shape = tuple(x.shape)
    scale = _check_tensor("y_scale", y_scale, (torch.float32,)).to(x.device)
    scale = expand("y_scale", scale, shape, granularity, axis, block_size)
    name, zero_point = _zero_point(y_zero_point, y_zero_point16, output_dtype)
    q = quotient(x.to(torch.float32), scale, division).contiguous()
    if output_dtype in FLOAT8_TYPES:
        overflow = "saturate" if saturate else "nonsaturating"
        return {"y": _cast_fp8(q, format=output_dtype, overflow=overflow)["codes"]}
    if output_dtype == "float4_e2m1fn":
        return {"y": _cast_fp4(q, format=output_dtype, nan="max")["codes"]}
    assert zero_point is not None
    bits, low, high = INTEGER_RANGES[output_dtype]
    zp = expand(name, signed_values(zero_point.to(x.device), output_dtype), shape, granularity, axis, block_size)
    is_nan = torch.isnan(q)
    wide = torch.where(is_nan, torch.zeros_like(q), q).to(torch.float64).clamp(-_INT_LIMIT, _INT_LIMIT)
    values = (torch.round(wide).to(torch.int64) + zp).clamp(low, high)
    if nan == "minimum":
        values = torch.where(is_nan, torch.full_like(values, low), values)
    codes = values & ((1 << bits) - 1)
    if output_dtype in _WIDE:
        signed16 = torch.where(codes >= 1 << 15, codes - (1 << 16), codes).to(torch.int16)
        return {"y16": signed16.view(_UINT16)}  # type: ignore[arg-type]
    return {"y": codes.to(torch.uint8)}
