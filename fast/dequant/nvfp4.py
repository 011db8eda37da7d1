"""NVFP4 dequantization (contract ``dequant.nvfp4``): a Triton kernel for CUDA, torch ops elsewhere.

Contract (``specs/dequant/nvfp4.yaml``; the reference is ``reference/dequant/nvfp4.py``): element
``(m, k)`` is the E2M1 code in nibble ``k % 2`` of ``data[m, k // 2]`` (low nibble first) times the
E4M3 block scale ``scales[m, k // 16]`` times the tensor scale, rounded once to float32 per product
in the source's order, then to ``out_dtype``:

- ``te`` (TransformerEngine ``dequantize_fp4_kernel``): ``q * fl32(fl32(sf * amax) * fl32(1/2688))``;
- ``torchao`` (``NVFP4Tensor.dequantize``): ``q * fl32(tensor_scale * sf)``.

The kernel reads each byte once, decodes both codes and the scale from their bit fields (no table,
no narrow-float cast), and writes one row-major tile of the result.  The torch path does the same
arithmetic with tensor ops.  ``QCONFORM_FAST_PATH`` picks the path per call, as in ``fast/cast.py``.
The contract's result is float32 holding ``out_dtype`` values (the engine compares float32);
:func:`dequantize` returns ``out_dtype`` itself, which is what a caller (and the benchmark) wants.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any, NamedTuple

import torch

from fast._checks import check_choice
from fast._triton import device, jit, selected_path, tl, triton

__all__ = ["AMAX_SCOPES", "OUT_DTYPES", "SCALE_RULES", "dequantize", "nvfp4"]

SCALE_RULES: tuple[str, ...] = ("te", "torchao")
AMAX_SCOPES: tuple[str, ...] = ("tensor", "row")
OUT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
_TORCH_OUT: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_OUT_IDS: dict[str, int] = {"float32": 0, "bfloat16": 1, "float16": 2}
_INV_2688 = float(struct.unpack("<f", struct.pack("<f", 1.0 / 2688.0))[0])
"""TE's ``factor_inv = 1.0f / (6.0f * 448.0f)``."""


class _Launch(NamedTuple):
    """Tile rows, tile blocks (of 16 columns) and warps of a launch."""

    rows: int
    blocks: int
    num_warps: int


_LAUNCH = _Launch(rows=8, blocks=32, num_warps=4)
"""Tiles of 8 rows x 32 blocks of 16 (512 columns), 4 warps: a thread decodes one block (8 data bytes,
one scale, 16 outputs) of each of the tile's rows."""


# %% Device functions


@device
def _e2m1_decode(code):
    """float32 value of E2M1 codes (int32 0..15): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (8 is -0).

    The code's magnitude bits go to the float32 exponent and mantissa (bits 22-24) and its sign to bit 31,
    which gives the value times ``2**-126`` (a float32 subnormal for codes 1 and 9); the product with
    ``2**126`` is exact.  The sign travels as a bit: Triton versions that negate as ``0 - x`` lose -0.
    """
    bits = ((code & 7) << 22) | ((code & 8) << 28)
    return bits.to(tl.float32, bitcast=True) * 8.507059173023462e37


@device
def _e4m3_decode(code):
    """float32 value of E4M3 codes (int32 0..255): sign, subnormals ``m * 2**-9``, 0x7F / 0xFF NaN."""
    exponent = (code >> 3) & 15
    mantissa = code & 7
    normal = (((exponent + 120) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
    magnitude = tl.where(exponent == 0, mantissa.to(tl.float32) * 0.001953125, normal)
    value = (magnitude.to(tl.int32, bitcast=True) | ((code & 0x80) << 24)).to(tl.float32, bitcast=True)
    nan = tl.full(code.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)
    return tl.where((code & 0x7F) == 0x7F, nan, value)


@device
def _round_to_out(values, OUT: tl.constexpr):
    """float32 values rounded to nearest even in the output dtype (OUT 0 float32, 1 bfloat16, 2 float16), as float32.

    bfloat16 by bit arithmetic (NaN stays NaN); float16 through the hardware conversion (round to nearest
    even, overflow to ±Inf).
    """
    if OUT == 0:
        return values
    if OUT == 2:
        return values.to(tl.float16).to(tl.float32)
    bits = values.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    quiet = (bits | 0x400000) & -65536
    return tl.where((bits & 0x7FFFFFFF) > 0x7F800000, quiet, rounded).to(tl.float32, bitcast=True)


# %% Compute kernel


def _nvfp4_dequantize_kernel(
    # pointers
    data_ptr,
    scales_ptr,
    scale_ptr,
    out_ptr,
    # sizes
    M,
    K,
    # variant
    RULE: tl.constexpr,
    ROW_SCALE: tl.constexpr,
    OUT: tl.constexpr,
    NATIVE: tl.constexpr,
    # tiling
    BR: tl.constexpr,
    NB: tl.constexpr,
    EVEN: tl.constexpr,
):
    """One ``[BR, NB * 16]`` tile of the output, as ``[2, BR, NB, 8]``: a block's first and second 8 values.

    Triton lays the last axis out within a thread and the threads along the blocks (the first axis
    repeats), so each thread decodes whole blocks: two 4-byte loads of data, one scale, two 16-byte
    stores of bfloat16 (four of float32) per row.
    """
    KB = K // 16
    row0 = tl.program_id(0) * BR
    blk0 = tl.program_id(1) * NB
    h = tl.arange(0, 2)[:, None, None, None]
    r = tl.arange(0, BR)
    b = tl.arange(0, NB)
    row_ok = (row0 + r) < M
    ok = row_ok[:, None] & ((blk0 + b) < KB)[None, :]
    row_base = row0.to(tl.int64)
    blocks = (blk0 + b)[None, None, :, None]
    d_offsets = 4 * h + r[None, :, None, None] * (K // 2) + 8 * blocks + tl.arange(0, 4)[None, None, None, :]
    s_pointers = scales_ptr + row_base * KB + (r[:, None] * KB + (blk0 + b)[None, :])
    if EVEN:
        raw = tl.load(data_ptr + row_base * (K // 2) + d_offsets)
        sf = tl.load(s_pointers)
    else:
        raw = tl.load(data_ptr + row_base * (K // 2) + d_offsets, mask=ok[None, :, :, None])
        sf = tl.load(s_pointers, mask=ok)
    raw = raw.to(tl.int32)
    codes = tl.reshape(tl.join(raw & 15, raw >> 4), [2, BR, NB, 8])
    block_scale = _e4m3_decode(sf.to(tl.int32))
    tensor = tl.load(scale_ptr + row0 + r, mask=row_ok, other=0.0)[:, None] if ROW_SCALE else tl.load(scale_ptr)
    # TE: (sf * amax) * fl32(1/2688), left to right; torchao: tensor_scale * sf.
    scale = (block_scale * tensor) * 0.00037202381645329297 if RULE == 0 else tensor * block_scale
    values = _e2m1_decode(codes) * scale[None, :, :, None]
    o_offsets = 8 * h + r[None, :, None, None] * K + 16 * blocks + tl.arange(0, 8)[None, None, None, :]
    out_pointers = out_ptr + row_base * K + o_offsets
    result = _round_to_out(values, OUT)
    if NATIVE and OUT == 1:
        result = result.to(tl.bfloat16)  # exact: rounded by bits above (Triton 3.9's interpreter truncates)
    elif NATIVE and OUT == 2:
        result = result.to(tl.float16)
    if EVEN:
        tl.store(out_pointers, result)
    else:
        tl.store(out_pointers, result, mask=ok[None, :, :, None])


# %% Launcher and torch path


def _triton_dequantize(
    data: torch.Tensor,
    scales: torch.Tensor,
    scale: torch.Tensor,
    rule: str,
    row: bool,
    out_dtype: str,
    native: bool,
    launch: _Launch | None = None,
) -> torch.Tensor:
    """The kernel on checked, contiguous arguments; ``launch`` overrides the tiling (the benchmarks' sweeps)."""
    kernel = jit(_nvfp4_dequantize_kernel)
    launch = launch or _LAUNCH
    rows, cols = data.shape[0], 2 * data.shape[1]
    dtype = _TORCH_OUT[out_dtype] if native else torch.float32
    out = torch.empty((rows, cols), dtype=dtype, device=data.device)
    options: dict[str, Any] = {"enable_fp_fusion": False} if data.device.type == "cuda" else {}
    with _interpreter_errstate(data):
        kernel[(triton.cdiv(rows, launch.rows), triton.cdiv(cols // 16, launch.blocks))](
            data,
            scales,
            scale,
            out,
            rows,
            cols,
            RULE=SCALE_RULES.index(rule),
            ROW_SCALE=row,
            OUT=_OUT_IDS[out_dtype],
            NATIVE=native,
            BR=launch.rows,
            NB=launch.blocks,
            EVEN=rows % launch.rows == 0 and (cols // 16) % launch.blocks == 0,
            num_warps=launch.num_warps,
            **options,
        )
    return out


def _interpreter_errstate(t: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
    """Triton's interpreter runs the kernel in NumPy, which warns on every Inf and NaN it computes."""
    if t.device.type == "cuda":
        return contextlib.nullcontext()
    import numpy as np

    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def _torch_e4m3(codes: torch.Tensor) -> torch.Tensor:
    c = codes.to(torch.int32)
    exponent, mantissa = (c >> 3) & 15, c & 7
    normal = (((exponent + 120) << 23) | (mantissa << 20)).view(torch.float32)
    value = torch.where(exponent == 0, mantissa.to(torch.float32) * 2.0**-9, normal)
    value = torch.where((c & 0x80) != 0, -value, value)
    return torch.where((c & 0x7F) == 0x7F, torch.full_like(value, float("nan")), value)


def _torch_e2m1(codes: torch.Tensor) -> torch.Tensor:
    table = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=codes.device)
    value = table[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -value, value)


def _torch_dequantize(
    data: torch.Tensor, scales: torch.Tensor, scale: torch.Tensor, rule: str, out_dtype: str, native: bool
) -> torch.Tensor:
    rows, cols = data.shape[0], 2 * data.shape[1]
    codes = torch.stack([data & 15, data >> 4], dim=-1).reshape(rows, cols)
    block_scale = _torch_e4m3(scales)
    per_row = scale.reshape(-1, 1)
    te = rule == "te"
    factor = (block_scale * per_row) * torch.full_like(block_scale, _INV_2688) if te else per_row * block_scale
    values = (_torch_e2m1(codes).reshape(rows, cols // 16, 16) * factor[:, :, None]).reshape(rows, cols)
    rounded = values.to(_TORCH_OUT[out_dtype])
    return rounded if native else rounded.to(torch.float32)


# %% Argument checks


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_uint8(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor of dtype uint8")
    if value.dtype != torch.uint8:
        raise TypeError(f"Got {name}.dtype={_dtype_name(value.dtype)}, but {name} must be uint8")
    return value


def _checked(
    data: object, scales: object, amax: object, tensor_scale: object, scale_rule: str, amax_scope: str, out_dtype: str
) -> torch.Tensor:
    """Check every argument as the reference does; return the tensor scale input (amax or tensor_scale)."""
    check_choice("scale_rule", scale_rule, SCALE_RULES)
    check_choice("amax_scope", amax_scope, AMAX_SCOPES)
    check_choice("out_dtype", out_dtype, OUT_DTYPES)
    if scale_rule == "torchao" and amax_scope != "tensor":
        raise ValueError("Got scale_rule='torchao' and amax_scope='row', but torchao has one per-tensor scale")
    data_t = _check_uint8("data", data)
    scales_t = _check_uint8("scales", scales)
    if data_t.dim() != 2 or data_t.numel() == 0 or data_t.shape[1] % 8:
        raise ValueError(
            f"Got data.shape={tuple(data_t.shape)}, but data must be a non-empty 2-D [M, K/2] array with K a "
            "multiple of 16"
        )
    rows, cols = data_t.shape[0], 2 * data_t.shape[1]
    if tuple(scales_t.shape) != (rows, cols // 16):
        shape = (rows, cols // 16)
        raise ValueError(
            f"Got scales.shape={tuple(scales_t.shape)}, but data.shape={tuple(data_t.shape)} needs {shape}"
        )
    needed, unwanted = ("amax", "tensor_scale") if scale_rule == "te" else ("tensor_scale", "amax")
    scale_input, other = (amax, tensor_scale) if scale_rule == "te" else (tensor_scale, amax)
    if other is not None:
        raise ValueError(f"Got {unwanted} with scale_rule={scale_rule!r}, but that rule takes {needed} only")
    if scale_input is None:
        raise ValueError(f"Got scale_rule={scale_rule!r} and no {needed}, but that rule needs {needed}")
    if not isinstance(scale_input, torch.Tensor):
        raise TypeError(f"Got {needed} of type {type(scale_input).__name__}, but {needed} must be a torch.Tensor")
    if scale_input.dtype != torch.float32:
        raise TypeError(f"Got {needed}.dtype={_dtype_name(scale_input.dtype)}, but {needed} must be float32")
    expected = (rows,) if amax_scope == "row" else (1,)
    if tuple(scale_input.shape) != expected:
        raise ValueError(
            f"Got {needed}.shape={tuple(scale_input.shape)}, but amax_scope={amax_scope!r} needs {expected}"
        )
    return scale_input


# %% Public functions


def dequantize(
    data: torch.Tensor,
    scales: torch.Tensor,
    amax: torch.Tensor | None = None,
    tensor_scale: torch.Tensor | None = None,
    *,
    scale_rule: str = "te",
    amax_scope: str = "tensor",
    out_dtype: str = "float32",
) -> torch.Tensor:
    """:func:`nvfp4`'s values as an ``out_dtype`` tensor (float32, bfloat16 or float16) of shape ``[M, K]``."""
    scale = _checked(data, scales, amax, tensor_scale, scale_rule, amax_scope, out_dtype)
    data, scales, scale = data.contiguous(), scales.contiguous(), scale.contiguous()
    if selected_path(data.device) == "triton":
        return _triton_dequantize(data, scales, scale, scale_rule, amax_scope == "row", out_dtype, native=True)
    return _torch_dequantize(data, scales, scale, scale_rule, out_dtype, native=True)


def nvfp4(
    data: torch.Tensor,
    scales: torch.Tensor,
    amax: torch.Tensor | None = None,
    tensor_scale: torch.Tensor | None = None,
    *,
    scale_rule: str = "te",
    amax_scope: str = "tensor",
    out_dtype: str = "float32",
) -> dict[str, torch.Tensor]:
    """Dequantize NVFP4 data (one operand) to ``out_dtype`` values, returned as float32.

    Contract
    --------
    ``dequant.nvfp4``: ``x[m, k] = out(fl32(q * s))`` with ``q`` the E2M1 code in nibble ``k % 2`` of
    ``data[m, k // 2]`` and ``s = fl32(fl32(sf * amax) * fl32(1/2688))`` (``te``; ``amax[0]`` or, for
    ``amax_scope="row"``, ``amax[m]``) or ``fl32(tensor_scale * sf)`` (``torchao``), ``sf`` the E4M3
    value of ``scales[m, k // 16]``.

    Source
    ------
    TransformerEngine@d0067d0 ``common/cast/nvfp4/dequantize_nvfp4.cuh``; torchao
    ``NVFP4Tensor.dequantize``; ``specs/dequant/nvfp4.yaml``.

    Encoding
    --------
    ``data`` uint8 ``[M, K/2]`` (low nibble first), ``scales`` uint8 E4M3 ``[M, K/16]``, ``amax``
    float32 ``[1]`` / ``[M]`` (``te``) or ``tensor_scale`` float32 ``[1]`` (``torchao``).  ``x``:
    float32 ``[M, K]`` holding ``out_dtype`` values, on ``data``'s device.

    Edge cases
    ----------
    NaN scale codes (0x7F / 0xFF) or a NaN amax give NaN; code 0x8 gives -0 times the scale.

    Raises as the reference: ``TypeError`` for tensors of other dtypes, ``ValueError`` for unknown
    parameters, a missing or superfluous scale input and shapes that do not fit.
    """
    scale = _checked(data, scales, amax, tensor_scale, scale_rule, amax_scope, out_dtype)
    data, scales, scale = data.contiguous(), scales.contiguous(), scale.contiguous()
    if selected_path(data.device) == "triton":
        x = _triton_dequantize(data, scales, scale, scale_rule, amax_scope == "row", out_dtype, native=False)
    else:
        x = _torch_dequantize(data, scales, scale, scale_rule, out_dtype, native=False)
    return {"x": x}
