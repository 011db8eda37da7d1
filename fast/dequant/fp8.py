"""Dequantization of TransformerEngine's FP8 recipes (contracts ``dequant.fp8_tensor``, ``dequant.fp8_block``):
Triton kernels for CUDA and torch paths for the rest.

Every element is ``round_out(fl32(decode(code) * scale_inv))``: the code's float32 value is built from its
bit fields with integer operations (subnormal codes as an exact float32 product), multiplied once in
float32 by its block's ``scale_inv``, and rounded once to nearest even to ``out_dtype`` (bfloat16 with
integer operations, float16 through the hardware conversion).  Outputs are float32 holding values of
``out_dtype``, as the specs ask.  The blockwise kernel walks the output ``[M, K]`` in tiles and reads
the rowwise codes, or the transposed columnwise codes, with the scale of each element's block from
TE's GEMM-ready layouts (``fast/quant/fp8_block/``); padding is never read.

Specs: ``specs/dequant/fp8_tensor.yaml``, ``specs/dequant/fp8_block.yaml``.  Paths are chosen by
``QCONFORM_FAST_PATH`` as in ``fast/cast.py``.  This module imports without Triton.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fast._checks import check_choice
from fast._triton import device, jit, selected_path, tl, triton
from fast.decode import fp8 as decode_fp8
from fast.quant.fp8 import FP8_FORMATS, dtype_name, quiet_interpreter
from fast.quant.fp8_block.shapes import BLOCKS, TILE, scale_shapes

__all__ = ["OPERANDS", "OUT_DTYPES", "fp8_block", "fp8_tensor"]

OUT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
OPERANDS: tuple[str, ...] = ("rowwise", "columnwise")
_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_OUT_IDS = {"float32": 0, "bfloat16": 1, "float16": 2}
_FORMAT_META: dict[str, dict[str, Any]] = {
    "float8_e4m3fn": {"MANTISSA_BITS": 3, "BIAS": 7, "IEEE": False, "UNIT": 2.0**-9},
    "float8_e5m2": {"MANTISSA_BITS": 2, "BIAS": 15, "IEEE": True, "UNIT": 2.0**-16},
}


# %% Device functions and kernels


@device
def _dequantized(
    code,
    scale_inv,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    UNIT: tl.constexpr,
    OUT: tl.constexpr,
):
    """``round_out(fl32(decode(code) * scale_inv))`` as float32 (OUT 0 float32, 1 bfloat16, 2 float16)."""
    magnitude = code & 0x7F
    exponent = magnitude >> MANTISSA_BITS
    mantissa = magnitude & ((1 << MANTISSA_BITS) - 1)
    normal = ((exponent + (127 - BIAS)) << 23) | (mantissa << (23 - MANTISSA_BITS))
    tiny = (mantissa.to(tl.float32) * UNIT).to(tl.int32, bitcast=True)  # exact: the unit is a normal power of two
    bits = tl.where(exponent == 0, tiny, normal)
    if IEEE:  # E5M2: the top exponent is Inf (mantissa 0) or NaN
        bits = tl.where(exponent == 31, tl.where(mantissa == 0, 0x7F800000, 0x7FC00000), bits)
    else:  # E4M3FN: only the all-ones magnitude is NaN
        bits = tl.where(magnitude == 0x7F, 0x7FC00000, bits)
    value = (bits | ((code >> 7) << 31)).to(tl.float32, bitcast=True) * scale_inv
    if OUT == 1:  # bfloat16: round the float32 bits at bit 16, ties to even; NaN stays NaN
        wide = value.to(tl.int32, bitcast=True)
        rounded = (wide + (0x7FFF + ((wide >> 16) & 1))) & -65536
        value = tl.where(value == value, rounded, 0x7FC00000).to(tl.float32, bitcast=True)
    elif OUT == 2:
        value = value.to(tl.float16).to(tl.float32)
    return value


def _dequant_tensor_kernel(
    data_ptr,
    scale_inv_ptr,
    x_ptr,
    n_elements,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    UNIT: tl.constexpr,
    OUT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    code = tl.load(data_ptr + offsets, mask=mask, other=0).to(tl.int32)
    value = _dequantized(code, tl.load(scale_inv_ptr), MANTISSA_BITS, BIAS, IEEE, UNIT, OUT)
    tl.store(x_ptr + offsets, value, mask=mask)


def _dequant_block_kernel(
    data_ptr,
    scale_inv_ptr,
    x_ptr,
    M,
    K,
    SCALE_STRIDE,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    UNIT: tl.constexpr,
    OUT: tl.constexpr,
    TWO_D: tl.constexpr,
    COLUMNWISE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    k_tiles = tl.cdiv(K, BLOCK_K)
    rows = (tl.program_id(0) // k_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tl.program_id(0) % k_tiles) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    if COLUMNWISE:  # codes stored [K, M]
        code = tl.load(data_ptr + cols.to(tl.int64)[None, :] * M + rows[:, None], mask=mask, other=0)
    else:
        code = tl.load(data_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], mask=mask, other=0)
    # Where the scale of element (m, k) lives in the layout of this recipe and copy.
    if TWO_D and COLUMNWISE:
        where = (cols[None, :] // 128) * SCALE_STRIDE + rows[:, None] // 128
    elif TWO_D:
        where = (rows[:, None] // 128) * SCALE_STRIDE + cols[None, :] // 128
    elif COLUMNWISE:
        where = (rows[:, None] // 128) * SCALE_STRIDE + cols[None, :]
    else:
        where = (cols[None, :] // 128) * SCALE_STRIDE + rows[:, None]
    scale_inv = tl.load(scale_inv_ptr + where, mask=mask, other=1.0)
    value = _dequantized(code.to(tl.int32), scale_inv, MANTISSA_BITS, BIAS, IEEE, UNIT, OUT)
    tl.store(x_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], value, mask=mask)


_BLOCK = 4096
_TILE_M, _TILE_K = 32, 128


# %% Torch path and checks


def _torch_dequantized(codes: torch.Tensor, scale_inv: torch.Tensor, format: str, out_dtype: str) -> torch.Tensor:
    values = decode_fp8(codes, format=format)["values"] * scale_inv
    return values.to(_TORCH_DTYPES[out_dtype]).float()


def _check(data: object, scale_inv: object, format: object, out_dtype: object) -> None:
    check_choice("format", format, FP8_FORMATS)
    check_choice("out_dtype", out_dtype, OUT_DTYPES)
    for name, value, dtype in (("data", data, torch.uint8), ("scale_inv", scale_inv, torch.float32)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor")
        if value.dtype != dtype:
            raise TypeError(f"Got {name}.dtype={dtype_name(value.dtype)}, but {name} must be {dtype_name(dtype)}")
    assert isinstance(data, torch.Tensor) and isinstance(scale_inv, torch.Tensor)
    if scale_inv.device != data.device:
        raise ValueError(f"Got data on {data.device} and scale_inv on {scale_inv.device}, but they must share a device")


# %% Public functions


def fp8_tensor(
    data: torch.Tensor, scale_inv: torch.Tensor, *, format: str, out_dtype: str = "float32"
) -> dict[str, torch.Tensor]:
    """Dequantize per-tensor scaled FP8 codes: ``x = round_out(fl32(decode(data) * scale_inv[0]))``.

    Contract
    --------
    ``dequant.fp8_tensor``, elementwise (module docstring).

    Source
    ------
    TE ``common/cast/fp8/dequantize_fp8.cuh``; ``specs/dequant/fp8_tensor.yaml``; the NumPy reference is
    ``reference.dequant.fp8.fp8_tensor``.

    Encoding
    --------
    ``data``: uint8 FP8 codes of any shape; ``scale_inv``: float32 ``[1]`` on the same device.  ``x``:
    float32 of ``data``'s shape holding ``out_dtype`` values.

    Edge cases
    ----------
    NaN codes, a NaN scale and 0 * Inf give NaN; E5M2 Inf codes give ±Inf; overflow of ``out_dtype``
    gives ±Inf; -0 codes keep their sign.

    Raises ``TypeError`` unless ``data`` is a uint8 and ``scale_inv`` a float32 tensor; ``ValueError`` for
    an unknown ``format``, ``out_dtype`` or path, a ``scale_inv`` not of shape ``[1]`` or on another device.
    """
    _check(data, scale_inv, format, out_dtype)
    if tuple(scale_inv.shape) != (1,):
        raise ValueError(f"Got scale_inv.shape={tuple(scale_inv.shape)}, but scale_inv must have shape [1]")
    if selected_path(data.device) == "torch":
        return {"x": _torch_dequantized(data, scale_inv, format, out_dtype)}
    flat = data.contiguous().reshape(-1)
    x = torch.empty(data.shape, dtype=torch.float32, device=data.device)
    if flat.numel():
        with quiet_interpreter(data.device):
            jit(_dequant_tensor_kernel)[(triton.cdiv(flat.numel(), _BLOCK),)](
                flat, scale_inv, x, flat.numel(), **_FORMAT_META[format], OUT=_OUT_IDS[out_dtype], BLOCK=_BLOCK
            )
    return {"x": x}


def fp8_block(
    data: torch.Tensor,
    scale_inv: torch.Tensor,
    *,
    format: str,
    block: str = "1x128",
    operand: str = "rowwise",
    out_dtype: str = "float32",
) -> dict[str, torch.Tensor]:
    """Dequantize blockwise scaled FP8 codes in TE's GEMM-ready layouts.

    Contract
    --------
    ``dequant.fp8_block``: with ``x`` viewed as ``[M, K]``, ``x[m, k] = round_out(fl32(decode(q) * s))``;
    ``operand="rowwise"``: ``q = data[m, k]``, ``s = scale_inv[k // 128, m]`` (1x128) or ``scale_inv[m //
    128, k // 128]`` (128x128); ``"columnwise"``: ``q = data[k, m]``, ``s = scale_inv[m // 128, k]``
    (1x128) or ``scale_inv[k // 128, m // 128]`` (128x128).

    Source
    ------
    TE ``Float8BlockwiseQTensorStorage._dequantize_vectorwise``; ``specs/dequant/fp8_block.yaml``; the
    NumPy reference is ``reference.dequant.fp8.fp8_block``.

    Encoding
    --------
    ``data``: uint8, ``[*rest, K]`` (rowwise) or ``[K, *rest]`` (columnwise), rank >= 1; ``scale_inv``:
    float32 of the layout's shape.  ``x``: float32 ``[*rest, K]`` holding ``out_dtype`` values.

    Edge cases
    ----------
    As :func:`fp8_tensor`, per block; padding entries of ``scale_inv`` are never read.

    Raises ``TypeError`` unless ``data`` is uint8 and ``scale_inv`` float32; ``ValueError`` for an unknown
    ``format``, ``block``, ``operand``, ``out_dtype`` or path, a 0-d ``data``, and a ``scale_inv`` whose
    shape is not the layout's.
    """
    _check(data, scale_inv, format, out_dtype)
    check_choice("block", block, BLOCKS)
    check_choice("operand", operand, OPERANDS)
    if data.dim() == 0:
        raise ValueError(f"Got data.shape={tuple(data.shape)}, but data must have at least one dimension")
    shape = tuple(data.shape) if operand == "rowwise" else (*data.shape[1:], data.shape[0])
    k = shape[-1]
    m = math.prod(shape[:-1])
    expected = scale_shapes(block, m, k)[0 if operand == "rowwise" else 1]
    if tuple(scale_inv.shape) != expected:
        raise ValueError(
            f"Got scale_inv.shape={tuple(scale_inv.shape)}, but {operand} {block} scales of "
            f"data.shape={tuple(data.shape)} must have shape {list(expected)}"
        )
    codes = data.contiguous()
    if selected_path(data.device) == "torch":
        matrix = codes.reshape(m, k) if operand == "rowwise" else codes.reshape(k, m).t()
        rows = torch.arange(m, device=data.device)[:, None]
        cols = torch.arange(k, device=data.device)[None, :]
        if block == "1x128":
            s = scale_inv[cols // TILE, rows] if operand == "rowwise" else scale_inv[rows // TILE, cols]
        else:
            s = scale_inv[rows // TILE, cols // TILE] if operand == "rowwise" else scale_inv[cols // TILE, rows // TILE]
        return {"x": _torch_dequantized(matrix.contiguous(), s, format, out_dtype).reshape(shape)}
    x = torch.empty(shape, dtype=torch.float32, device=data.device)
    if m and k:
        with quiet_interpreter(data.device):
            jit(_dequant_block_kernel)[(triton.cdiv(m, _TILE_M) * triton.cdiv(k, _TILE_K),)](
                codes,
                scale_inv.contiguous(),
                x,
                m,
                k,
                scale_inv.shape[-1],
                **_FORMAT_META[format],
                OUT=_OUT_IDS[out_dtype],
                TWO_D=block == "128x128",
                COLUMNWISE=operand == "columnwise",
                BLOCK_M=_TILE_M,
                BLOCK_K=_TILE_K,
            )
    return {"x": x}
