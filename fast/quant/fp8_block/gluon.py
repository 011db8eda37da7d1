"""FP8 1x128 blockwise scaling, both copies, as a Gluon kernel: the CUDA path for whole 128x128 tiles.

Contract
--------
``quant.fp8_block`` with ``block="1x128"`` and ``usage="both"``, exactly as :mod:`fast.quant.fp8_block`
(its module docstring gives the contract and the layouts; this kernel writes the same bytes): per 1x128 block
of a row and per 128x1 block of a column, ``amax = max|x|`` with NaN ignored, ``fast.quant.fp8.scale_from_amax``,
``scale_inv = 1 / scale`` and ``satfinite_rne(fl32(x * scale))``; the columnwise codes stored transposed.  The
scale rule, the reciprocal, the input widening and the FP8 conversion are ``fast.quant.fp8``'s and
``fast._triton``'s device functions, bound by ``fast._triton.gluon_jit``: one definition of each for both kernels.

Why Gluon
---------
Gluon (``triton.experimental.gluon``, Triton 3.5 and later) is Triton with explicit register layouts.  A
program holds a ``[128, 128]`` tile of ``x`` as ``[32, 4, 128]`` (row ``4 q + j`` at ``[q, j]``) in a blocked
layout where each thread owns 4 consecutive rows of 8 consecutive columns (``size_per_thread [1, 4, 8]``,
threads ``[8, 1, 4]``, 8 warps ``[2, 1, 4]``; a thread holds 2 such pieces, 64 rows apart).  The rowwise
codes of a thread's row piece are 8 contiguous bytes of ``data``; the columnwise codes of its 4 rows of a
column are one 4-byte word of ``columnwise_data`` (the same registers seen in the order ``[1, 2, 0]``, a
register renumbering), so the transposed copy is stored straight from registers, 8 threads of a warp writing
one 32-byte sector.  The Triton kernel (``fast.quant.fp8_block``) cannot ask for this layout: its
``tl.trans`` goes through shared memory, one byte per element.

Every output is bit-equal to the Triton kernel's on random data and on NaN, Inf, zero and all-NaN blocks, huge and
tiny values; the kernel is faster than it on whole tiles, with 2 programs of 8 warps per SM (other warp counts,
thread layouts and register caps were slower or spilled; ``docs/performance.md``).

Ragged shapes (``M`` or ``K`` not a multiple of 128), every other block and usage, and Triton builds without Gluon
take the Triton kernel; :mod:`fast.quant.fp8_block` imports this module only for a CUDA launch.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from triton.experimental.gluon import language as gl

from fast._triton import LaunchCache, device, float32_bits, gluon_jit, gluon_sm90_ptx, tl
from fast.quant.fp8 import FORMAT_META, INPUT_IDS, fp8_code, reciprocal, scale_from_amax
from fast.quant.fp8_block.kernels import RUNTIME_ARGS
from fast.quant.fp8_block.shapes import TILE

__all__ = ["quantize_both"]

NUM_WARPS = 8


@device
def _maximum(a, b):
    """The reductions' combine, ``max.f32``: a NaN operand loses (``tl.max``'s, bound for Gluon by
    ``fast._triton.gluon_jit``, whereas ``gl.max`` is bound for the interpreter in a process that set it)."""
    return tl.maximum(a, b)


def _fp8_block_both_kernel(
    # pointers
    x_ptr,
    data_ptr,
    scale_inv_ptr,
    columnwise_ptr,
    columnwise_scale_inv_ptr,
    # sizes: x viewed as [M, K] (multiples of 128); row strides of the two scale layouts
    M,
    K,
    SCALE_STRIDE,
    COLUMNWISE_SCALE_STRIDE,
    # scale rule
    epsilon,
    value_for_inf,
    FP8_MAX: gl.constexpr,
    POW2: gl.constexpr,
    # format (fast.quant.fp8.FORMAT_META) and input width
    MANTISSA_BITS: gl.constexpr,
    BIAS: gl.constexpr,
    MAX_CODE: gl.constexpr,
    MAX_BITS: gl.constexpr,
    MAGIC: gl.constexpr,
    INPUT: gl.constexpr,
):
    # [32, 4, 128]: 4 consecutive rows x 8 columns a thread; ``rows_first`` numbers the same registers rows first.
    layout: gl.constexpr = gl.BlockedLayout([1, 4, 8], [8, 1, 4], [2, 1, 4], [2, 1, 0])
    rows_first: gl.constexpr = gl.BlockedLayout([1, 4, 8], [8, 1, 4], [2, 1, 4], [1, 2, 0])
    k_tiles = K // 128
    row0 = (gl.program_id(0) // k_tiles) * 128
    col0 = (gl.program_id(0) % k_tiles) * 128
    quad = gl.arange(0, 32, layout=gl.SliceLayout(1, gl.SliceLayout(2, layout)))
    within = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, layout)))
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, gl.SliceLayout(1, layout)))
    rows = gl.expand_dims(quad, 1) * 4 + gl.expand_dims(within, 0)  # [32, 4]: the tile's rows
    offsets = gl.expand_dims(rows, 2) * K + gl.expand_dims(gl.expand_dims(cols, 0), 1)
    tile = row0.to(gl.int64) * K + col0
    _, bits = float32_bits(gl.load(x_ptr + tile + offsets), INPUT)
    value = bits.to(gl.float32, bitcast=True)
    magnitude = gl.abs(value)
    # rowwise 1x128 blocks (max.f32 ignores NaN; the maximum with 0 takes an all-NaN block's NaN to 0)
    row_scale = scale_from_amax(
        gl.maximum(gl.reduce(magnitude, 2, _maximum), 0.0), epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2
    )
    row_code = fp8_code(value * gl.expand_dims(row_scale, 2), MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, 2)
    gl.store(data_ptr + tile + offsets, row_code)
    gl.store(scale_inv_ptr + (col0 // 128) * SCALE_STRIDE + row0 + rows, reciprocal(row_scale, POW2))
    # columnwise 128x1 blocks, stored transposed: a thread's 4 rows of a column are one word of columnwise_data
    col_amax = gl.maximum(gl.reduce(gl.reduce(magnitude, 1, _maximum), 0, _maximum), 0.0)
    col_scale = scale_from_amax(col_amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
    gl.store(
        columnwise_scale_inv_ptr + (row0 // 128) * COLUMNWISE_SCALE_STRIDE + col0 + cols, reciprocal(col_scale, POW2)
    )
    scaled = gl.convert_layout(value * gl.expand_dims(gl.expand_dims(col_scale, 0), 1), rows_first)
    c_quad = gl.arange(0, 32, layout=gl.SliceLayout(1, gl.SliceLayout(2, rows_first)))
    c_within = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, rows_first)))
    c_cols = gl.arange(0, 128, layout=gl.SliceLayout(0, gl.SliceLayout(1, rows_first)))
    c_rows = gl.expand_dims(gl.expand_dims(c_quad, 1) * 4 + gl.expand_dims(c_within, 0), 2)
    c_offsets = gl.expand_dims(gl.expand_dims(c_cols, 0), 1) * M + c_rows
    column_code = fp8_code(scaled, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, 2)
    gl.store(columnwise_ptr + (col0.to(gl.int64) * M + row0) + c_offsets, column_code)


LAUNCHES = LaunchCache(_fp8_block_both_kernel, RUNTIME_ARGS)
"""Compiled launches, keyed as ``fast.quant.fp8_block``'s (the same runtime arguments)."""


def _constexprs(format: str, power_2_scale: bool, dtype: torch.dtype) -> dict[str, Any]:
    return {**FORMAT_META[format], "POW2": power_2_scale, "INPUT": INPUT_IDS[dtype]}


def quantize_both(x2: torch.Tensor, args: tuple[Any, ...], key: Hashable, rule: dict[str, Any]) -> None:
    """Launch the kernel on ``x2 [M, K]`` (CUDA, multiples of 128, hardware FP8 conversion) with the runtime
    ``args`` of ``fast.quant.fp8_block``'s kernel (the input, the four outputs, ``M``, ``K``, the two scale
    strides, ``epsilon`` and ``value_for_inf``) and its ``rule`` (format, power-of-two scales)."""
    if LAUNCHES.launch(key, args):
        return
    m, k = x2.shape
    meta = _constexprs(rule["format"], rule["power_2_scale"], x2.dtype)
    grid = (m // TILE) * (k // TILE)
    compiled = gluon_jit(_fp8_block_both_kernel)[(grid,)](*args, **meta, num_warps=NUM_WARPS)
    LAUNCHES.store(key, compiled, grid, meta)


def sm90_ptx(dtype: str, format: str, power_2_scale: bool) -> str:
    """The kernel's PTX for sm_90 with ``dtype`` input, compiled without a GPU (the CPU tests read it)."""
    x_type = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16"}[dtype]
    types = {
        "x_ptr": x_type, "data_ptr": "*u8", "scale_inv_ptr": "*fp32", "columnwise_ptr": "*u8",
        "columnwise_scale_inv_ptr": "*fp32", "epsilon": "fp32", "value_for_inf": "fp32",
    }  # fmt: skip
    constexprs = _constexprs(format, power_2_scale, getattr(torch, dtype))
    return gluon_sm90_ptx(_fp8_block_both_kernel, types, constexprs, num_warps=NUM_WARPS, enable_fp_fusion=True)
