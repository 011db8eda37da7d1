"""The MX Triton kernels (plain functions, bound by ``fast._triton.jit`` at launch): the quantize kernel and the
kernel that copies staged rowwise scale bytes to their places."""

from __future__ import annotations

from fast._triton import tl, wait_for_primary
from fast.quant.mx.tiles import quantize_tile, unstage_tiles

# %% Compute kernel


def mx_kernel(
    # pointers
    x_ptr,
    row_data_ptr,
    row_scale_ptr,
    col_data_ptr,
    col_scale_ptr,
    # sizes
    rows,
    cols,
    data_stride,
    row_scale_stride,
    col_scale_stride,
    # element format (FP8: 0 FP6/FP4, 1 E4M3FN, 2 E5M2)
    FP8: tl.constexpr,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_VALUE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SUBNORMAL_ADDEND: tl.constexpr,
    PACK: tl.constexpr,
    # scale rule and edges
    EMAX: tl.constexpr,
    EVEN_ADD: tl.constexpr,
    RULE: tl.constexpr,
    EDGES: tl.constexpr,
    RCEIL_OPERAND: tl.constexpr,
    RCEIL_DIVIDE: tl.constexpr,
    ZERO_BITS: tl.constexpr,
    # what to write
    ROWWISE: tl.constexpr,
    COLUMNWISE: tl.constexpr,
    TWO_D: tl.constexpr,
    SWIZZLED: tl.constexpr,
    STAGED: tl.constexpr,  # rowwise scales to a staging buffer at row_scale_ptr (_store_row_scales)
    INPUT: tl.constexpr,
    # tiling: BLOCK_M rows (32 with columnwise or 2d blocks) by BLOCK_K columns (NB blocks of 32);
    # EVEN: every tile lies inside the matrix (no masks)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr,
):
    # A 1-D grid, K-tiles first: consecutive programs take consecutive K-tiles of the same rows, so the tiles in
    # flight cover whole rows (DRAM pages) rather than a column stripe of every row.
    tiles_k = tl.cdiv(cols, BLOCK_K)
    tile_m = tl.program_id(0) // tiles_k
    tile_k = tl.program_id(0) - tile_m * tiles_k
    quantize_tile(
        x_ptr, row_data_ptr, row_scale_ptr, col_data_ptr, col_scale_ptr, rows, cols, data_stride, row_scale_stride,
        col_scale_stride, tile_m, tile_k, FP8, MANTISSA_BITS, BIAS, MAX_CODE, MAX_VALUE, SIGN_SHIFT, SIGN_MASK,
        SUBNORMAL_ADDEND, PACK, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE, ZERO_BITS, ROWWISE,
        COLUMNWISE, TWO_D, SWIZZLED, STAGED, INPUT, BLOCK_M, BLOCK_K, EVEN,
    )  # fmt: skip


def unstage_row_scales(
    staged_ptr,
    scale_ptr,
    rows,
    words,
    stride,
    BLOCK_M: tl.constexpr,
    PER_TILE: tl.constexpr,
    TILES: tl.constexpr,
    WAIT: tl.constexpr,
):
    """The copy kernel of staged rowwise scales (:func:`unstage_tiles`); ``WAIT``: launched as a programmatic
    dependent of the quantize kernel, wait for it first."""
    if WAIT:
        wait_for_primary()
    unstage_tiles(staged_ptr, scale_ptr, rows, words, stride, tl.program_id(0), BLOCK_M, PER_TILE, TILES)
