"""NVFP4 quantization of the columnwise operand alone as a Gluon kernel: the CUDA path for whole 128x64 tiles.

Contract
--------
``quant.nvfp4`` with ``usage="columnwise"`` under TE's scale rule, exactly as :mod:`fast.quant.nvfp4` (its module
docstring gives the contract and the layouts; this kernel writes the same bytes): per 16 rows of a column of
``x [M, K]`` (a 1x16 block of ``x.T``), the E4M3 block scale of the block's amax under the operand's tensor scales,
and the E2M1 codes of ``fl32(v * enc)`` rounded to nearest even, packed low nibble first into ``columnwise_data
[K, M/2]``, the scales into ``columnwise_scales [K, M/16]``.  The tensor scales (``global_scales``), the block
amax and scale (``abs_max``, ``block_scale``) and the E2M1 rounding (``e2m1_pairs``) are
:mod:`fast.quant.nvfp4`'s device functions, bound by ``fast._triton.gluon_jit``: one definition of each for both
kernels.  The amax comes as there: the largest of the ``n_sources`` int32 bit patterns at ``source_ptr`` (the
flat amax pass's per-program maxima, or the given amax); program 0 writes the operand's amax and tensor scale.

Why Gluon
---------
Gluon (``triton.experimental.gluon``, Triton 3.5 and later) is Triton with explicit register layouts.  The Triton
kernel's columnwise tile leaves each thread the 16 rows of a block of 4 columns, loaded as whole 128-byte lines of ``x``
(lanes 16 along the columns, 2 along the blocks), but it cannot choose how the transposed codes and scales leave: its
stores make far more L2 write requests than the rowwise kernel's (``docs/performance.md``).  Here the same load layout
feeds two explicit store layouts, reached by ``gl.convert_layout`` (through shared memory): 16 contiguous code bytes a
thread, 4 lanes a column's 64 bytes of a tile, and 4 scale bytes a thread, 2 lanes a column's 8.  Each program is
persistent (3 per SM) and loads its next tile into registers before it quantizes the current one; tiles are walked in
reverse, as the Triton kernels do, so the tiles the amax pass kept in L2 come first.

Every output is bit-equal to the Triton kernel's, and the kernel is faster than it on the shapes it covers
(``docs/performance.md``).  The ``torchao_cuda`` rule (two divisions a block) was slower here, so the torchao rules
keep the Triton kernel.

Scope: 16-bit input (bfloat16, float16), round to nearest, the per-tensor amax, TE's scale rule (either zero-scale
rule), 1x16 blocks, no RHT, ``M`` a multiple of 128 and ``K`` of 64, a computed or given amax
(``fast.quant.nvfp4.launch``'s ``_gluon_columnwise``).  Stochastic rounding here (uint8 bits loaded 16 bytes a column a
thread) was bit-equal but slower than the Triton kernel.  Everything else, and Triton builds without Gluon, take the
Triton kernel; :mod:`fast.quant.nvfp4` imports this module only for a CUDA launch.
"""

from __future__ import annotations

import torch
from triton.experimental.gluon import language as gl

from fast._triton import device, float32_bits, gluon_jit, gluon_sm90_ptx, tl
from fast.quant.nvfp4.rounding import e2m1_pairs
from fast.quant.nvfp4.tiles import abs_max, block_scale, global_scales

__all__ = ["COLS", "ROWS", "quantize_columnwise", "sm90_ptx"]

ROWS = 128
"""Tile rows (8 blocks of 16: a tile gives each column of ``x`` 64 bytes of codes and 8 scales)."""
COLS = 64
"""Tile columns (16 lanes of 4)."""
NUM_WARPS = 4
PROGRAMS_PER_SM = 3
"""Persistent programs per SM (the kernel fits the register cap of 3 programs of 4 warps)."""


@device
def _maximum(a, b):
    """The combine of the reduction of the int32 amax bit patterns, ``max`` (``tl.maximum``, bound for Gluon by
    ``fast._triton.gluon_jit``)."""
    return tl.maximum(a, b)


def _nvfp4_columnwise_kernel(
    # pointers: the input, the amax bit patterns, the four outputs
    x_ptr,
    source_ptr,
    n_sources,
    columnwise_data_ptr,
    columnwise_scales_ptr,
    columnwise_amax_ptr,
    columnwise_tensor_scale_ptr,
    # x viewed as [M, K]: M a multiple of 128, K of 64
    M,
    K,
    INPUT: gl.constexpr,  # 1 bfloat16, 2 float16 (fast.quant.nvfp4.INPUT_DTYPES)
    ZERO_ENC: gl.constexpr,
    SOURCES: gl.constexpr,  # a power of two, at least n_sources and 128
    STORE_EVICTION: gl.constexpr,  # fast.quant.nvfp4.store_eviction
):
    # [8 (block), 16 (row), 64 (column)]: a thread the 16 rows of a block of 4 columns; lanes 16 along the columns
    # and 2 along the blocks (whole 128-byte lines of x); ``rows_first`` numbers the same registers rows first.
    loaded: gl.constexpr = gl.BlockedLayout([1, 16, 4], [2, 1, 16], [4, 1, 1], [2, 1, 0])
    rows_first: gl.constexpr = gl.BlockedLayout([1, 16, 4], [2, 1, 16], [4, 1, 1], [1, 2, 0])
    # the codes as [8 (block), 8 (byte), 64 (column)], then as [4 (block pair), 16 (byte), 64]: 16 contiguous bytes
    # of a column a thread, 4 lanes a column's 64
    pairs_layout: gl.constexpr = gl.BlockedLayout([2, 8, 2], [4, 1, 8], [1, 1, 4], [1, 0, 2])
    code_layout: gl.constexpr = gl.BlockedLayout([1, 16, 2], [4, 1, 8], [1, 1, 4], [1, 0, 2])
    # the scales as [8 (block), 64 (column)]: 4 contiguous bytes of a column a thread, 2 lanes a column's 8
    scale_layout: gl.constexpr = gl.BlockedLayout([4, 1], [2, 16], [1, 4], [0, 1])
    sources_layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])

    i = gl.arange(0, SOURCES, layout=sources_layout)
    # the largest bit pattern, as int32 (a given negative amax is kept: the masked lanes hold the least int32)
    amax_bits = gl.reduce(gl.load(source_ptr + i, mask=i < n_sources, other=-(2**31)), 0, _maximum)
    tensor_scale, p0, p1 = global_scales(amax_bits.to(gl.float32, bitcast=True), 0)
    gl.store(columnwise_tensor_scale_ptr, tensor_scale, mask=gl.program_id(0) == 0)
    gl.store(columnwise_amax_ptr, amax_bits, mask=gl.program_id(0) == 0)

    block = gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, loaded)))
    row = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, loaded)))
    col = gl.arange(0, 64, layout=gl.SliceLayout(0, gl.SliceLayout(1, loaded)))
    rows = gl.expand_dims(gl.expand_dims(block, 1) * 16 + gl.expand_dims(row, 0), 2)
    offsets = rows * K + gl.expand_dims(gl.expand_dims(col, 0), 1)
    half_m = gl.multiple_of(M // 2, 16)
    pair = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, code_layout)))
    byte = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, code_layout)))
    code_col = gl.arange(0, 64, layout=gl.SliceLayout(0, gl.SliceLayout(1, code_layout)))
    code_offsets = gl.expand_dims(gl.expand_dims(code_col, 0), 1) * half_m + gl.expand_dims(
        gl.expand_dims(pair, 1) * 16 + gl.expand_dims(byte, 0), 2
    )
    sixteenth_m = gl.multiple_of(M // 16, 8)
    scale_block = gl.arange(0, 8, layout=gl.SliceLayout(1, scale_layout))
    scale_col = gl.arange(0, 64, layout=gl.SliceLayout(0, scale_layout))
    scale_offsets = gl.expand_dims(scale_col, 0) * sixteenth_m + gl.expand_dims(scale_block, 1)

    k_tiles = K // 64
    tiles = (M // 128) * k_tiles
    programs = gl.num_programs(0)
    tile = tiles - 1 - gl.program_id(0)  # every program has one: the grid is at most the tiles
    raw = gl.load(
        x_ptr + ((tile // k_tiles).to(gl.int64) * (128 * K) + (tile % k_tiles) * 64) + offsets,
        eviction_policy="evict_first",
    )
    for step in range(gl.program_id(0), tiles, programs):
        tile = tiles - 1 - step
        ahead = tile - programs  # the program's next tile, loaded before this one is quantized
        following = gl.load(
            x_ptr + ((ahead // k_tiles).to(gl.int64) * (128 * K) + (ahead % k_tiles) * 64) + offsets,
            mask=(offsets * 0 + ahead) >= 0,
            other=0.0,
            eviction_policy="evict_first",
        )
        row0 = (tile // k_tiles) * 128
        col0 = (tile % k_tiles) * 64
        _, bits = float32_bits(raw, INPUT)
        values = gl.convert_layout(bits.to(gl.float32, bitcast=True), rows_first)
        block_amax = abs_max(values, 1, 0, False)  # [8, 64]
        code, encode = block_scale(block_amax, p0, p1, 0, ZERO_ENC)
        gl.store(
            columnwise_scales_ptr + (col0.to(gl.int64) * sixteenth_m + row0 // 16) + scale_offsets,
            gl.convert_layout(code.to(gl.uint8), scale_layout),
            eviction_policy=STORE_EVICTION,
        )
        low, high = gl.split(gl.permute(gl.reshape(values * gl.expand_dims(encode, 1), [8, 8, 2, 64]), [0, 1, 3, 2]))
        packed = gl.convert_layout(e2m1_pairs(low, high), pairs_layout)
        gl.store(
            columnwise_data_ptr + (col0.to(gl.int64) * half_m + row0 // 2) + code_offsets,
            gl.convert_layout(gl.reshape(packed, [4, 16, 64]), code_layout),
            eviction_policy=STORE_EVICTION,
        )
        raw = following


def quantize_columnwise(
    x: torch.Tensor,
    out: dict[str, torch.Tensor],
    source: torch.Tensor,
    n_sources: int,
    constexprs: dict[str, object],
) -> None:
    """The quantize pass of the columnwise operand of ``x [M, K]`` (CUDA, bfloat16 or float16, ``M`` a multiple of
    128 and ``K`` of 64) into ``out``'s ``columnwise_*`` buffers (``fast.quant.nvfp4.launch``'s ``_outputs``), from the
    ``n_sources`` int32 amax bit patterns at ``source``; ``constexprs``: the kernel's ``INPUT``, ``ZERO_ENC`` and
    ``STORE_EVICTION``."""
    m, k = x.shape
    tiles = (m // ROWS) * (k // COLS)
    programs = min(tiles, PROGRAMS_PER_SM * torch.cuda.get_device_properties(x.device).multi_processor_count)
    gluon_jit(_nvfp4_columnwise_kernel)[(programs,)](
        x,
        source,
        n_sources,
        out["columnwise_data"],
        out["columnwise_scales"],
        out["columnwise_amax"],
        out["columnwise_tensor_scale"],
        m,
        k,
        **constexprs,
        SOURCES=max(128, 1 << (n_sources - 1).bit_length()),
        num_warps=NUM_WARPS,
        maxnreg=65536 // (PROGRAMS_PER_SM * NUM_WARPS * 32) // 8 * 8,
        enable_fp_fusion=False,  # a product is rounded before it is used, as in fast.quant.nvfp4
    )


def sm90_ptx(zero_enc: bool, store_eviction: str) -> str:
    """The kernel's PTX for sm_90 with bfloat16 input, specialized as a launch on whole tiles is (pointers
    16-byte aligned, ``M`` and ``K`` multiples of 16), compiled without a GPU (the CPU tests read it)."""
    pointers = {
        "x_ptr": "*bf16", "source_ptr": "*i32", "columnwise_data_ptr": "*u8", "columnwise_scales_ptr": "*u8",
        "columnwise_amax_ptr": "*i32", "columnwise_tensor_scale_ptr": "*fp32",
    }  # fmt: skip
    constexprs = {"INPUT": 1, "ZERO_ENC": zero_enc, "SOURCES": 1024, "STORE_EVICTION": store_eviction}
    return gluon_sm90_ptx(
        _nvfp4_columnwise_kernel, pointers, constexprs, [*pointers, "M", "K"],
        num_warps=NUM_WARPS, maxnreg=168, enable_fp_fusion=False,
    )  # fmt: skip
