"""The FP8 blockwise Triton kernel (a plain function, bound by ``fast._triton.jit`` at launch)."""

from __future__ import annotations

from fast._triton import tl
from fast.quant.fp8_block.tiles import quantize_tile

RUNTIME_ARGS = 11
"""The kernel's leading runtime arguments (pointers, sizes, epsilon and value_for_inf); the rest are constexpr."""


def fp8_block_kernel(
    # pointers
    x_ptr,
    data_ptr,
    scale_inv_ptr,
    columnwise_ptr,
    columnwise_scale_inv_ptr,
    # sizes: x viewed as [M, K]; row strides of the two scale layouts
    M,
    K,
    SCALE_STRIDE,
    COLUMNWISE_SCALE_STRIDE,
    # scale rule
    epsilon,
    value_for_inf,
    FP8_MAX: tl.constexpr,
    POW2: tl.constexpr,
    # format and rounding core
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_BITS: tl.constexpr,
    MAGIC: tl.constexpr,
    CORE: tl.constexpr,
    # recipe, outputs and input width
    TWO_D: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLWISE: tl.constexpr,
    INPUT: tl.constexpr,
    # tiling: programs of BLOCK_M rows (128 where column blocks or 128x128 tiles are cast) by BLOCK_K columns
    # (128 where rowwise blocks or 128x128 tiles are cast); EVEN: every tile lies inside x (no masks)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr,
):
    k_tiles = tl.maximum(tl.cdiv(K, BLOCK_K), 1)
    quantize_tile(
        x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, tl.program_id(0) // k_tiles,
        tl.program_id(0) % k_tiles, M, K, SCALE_STRIDE, COLUMNWISE_SCALE_STRIDE, epsilon, value_for_inf, FP8_MAX,
        POW2, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE, TWO_D, ROWWISE, COLWISE, INPUT, BLOCK_M, BLOCK_K,
        EVEN,
    )  # fmt: skip
