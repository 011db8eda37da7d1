"""The four NVFP4 Triton kernels (plain functions, bound by ``fast._triton.jit`` at launch): the tile amax pass,
the flat per-tensor amax pass, the quantize pass of one or both operands, and the flat rowwise pass."""

from __future__ import annotations

from fast._triton import (
    tl,
)
from fast.quant.nvfp4.column_tiles import amax_tile, quantize_tile
from fast.quant.nvfp4.rounding import bfloat16_rne
from fast.quant.nvfp4.tiles import abs_max, amax_chunk, operand_scales, rowwise_tile


def nvfp4_amax_kernel(
    # pointers
    x_ptr,
    amax_ptr,
    columnwise_amax_ptr,
    # sizes: the matrix, and how many of its last tiles to leave in L2 for the quantize pass
    M,
    K,
    kept_tiles,
    # variant
    INPUT: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLUMNWISE: tl.constexpr,
    ROW_AMAX: tl.constexpr,
    RHT: tl.constexpr,
    RULE: tl.constexpr,
    # tiling
    BM: tl.constexpr,
    BK: tl.constexpr,
    EVEN: tl.constexpr,
    SANITIZE: tl.constexpr,
):
    tiles = tl.cdiv(M, BM) * tl.cdiv(K, BK)
    first_kept = tiles - kept_tiles
    running = tl.zeros([BM, BK], tl.float32)
    running_t = tl.zeros([BM, BK], tl.float32)
    # Streamed tiles are marked evict-first; the last `kept_tiles` (which the quantize pass reads first)
    # evict-last, so that they are still in L2 when it comes.
    for tile in range(tl.program_id(0), first_kept, tl.num_programs(0)):
        running, running_t = amax_tile(
            x_ptr,
            amax_ptr,
            columnwise_amax_ptr,
            M,
            K,
            tile,
            running,
            running_t,
            INPUT,
            ROWWISE,
            COLUMNWISE,
            ROW_AMAX,
            RHT,
            RULE,
            BM,
            BK,
            EVEN,
            SANITIZE,
            "evict_first",
        )
    for tile in range(first_kept + tl.program_id(0), tiles, tl.num_programs(0)):
        running, running_t = amax_tile(
            x_ptr,
            amax_ptr,
            columnwise_amax_ptr,
            M,
            K,
            tile,
            running,
            running_t,
            INPUT,
            ROWWISE,
            COLUMNWISE,
            ROW_AMAX,
            RHT,
            RULE,
            BM,
            BK,
            EVEN,
            SANITIZE,
            "evict_last",
        )
    if not ROW_AMAX:
        amax = abs_max(abs_max(running, 0, RULE, SANITIZE), 0, RULE, SANITIZE).to(tl.int32, bitcast=True)
        if ROWWISE:
            tl.atomic_max(amax_ptr, amax)
        if COLUMNWISE:
            if RHT:  # the transformed operand's amax, rounded once (see hadamard_16_sums)
                amax = bfloat16_rne(abs_max(abs_max(running_t, 0, RULE, SANITIZE), 0, RULE, SANITIZE))
                amax = amax.to(tl.int32, bitcast=True)
            tl.atomic_max(columnwise_amax_ptr, amax)


def nvfp4_quantize_kernel(
    # pointers: input, random bits, rowwise outputs, columnwise outputs
    x_ptr,
    random_ptr,
    columnwise_random_ptr,
    data_ptr,
    scales_ptr,
    amax_ptr,
    tensor_scale_ptr,
    columnwise_data_ptr,
    columnwise_scales_ptr,
    columnwise_amax_ptr,
    columnwise_tensor_scale_ptr,
    # where each operand's per-tensor amax bits are read (operand_scales), and how many there are
    amax_source_ptr,
    columnwise_amax_source_ptr,
    n_sources,
    # sizes
    M,
    K,
    # variant
    INPUT: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLUMNWISE: tl.constexpr,
    TILE_2D: tl.constexpr,
    ROW_AMAX: tl.constexpr,
    RHT: tl.constexpr,
    ROUNDING: tl.constexpr,
    RANDOM_BITS: tl.constexpr,
    COLUMNWISE_RANDOM_BITS: tl.constexpr,
    RULE: tl.constexpr,
    ZERO_ENC: tl.constexpr,
    # tiling
    BM: tl.constexpr,
    BK: tl.constexpr,
    EVEN: tl.constexpr,
    SANITIZE: tl.constexpr,
    SAME_AMAX: tl.constexpr,
    STAGES: tl.constexpr,
    SOURCES: tl.constexpr,
    STORE_EVICTION: tl.constexpr,
):
    tiles = tl.cdiv(M, BM) * tl.cdiv(K, BK)
    p0 = tl.full([], 0.0, tl.float32)
    p1 = tl.full([], 0.0, tl.float32)
    t_p0 = tl.full([], 0.0, tl.float32)
    t_p1 = tl.full([], 0.0, tl.float32)
    if not ROW_AMAX:
        if ROWWISE:
            p0, p1 = operand_scales(amax_source_ptr, n_sources, amax_ptr, tensor_scale_ptr, RULE, SOURCES)
        if COLUMNWISE:
            t_p0, t_p1 = operand_scales(
                columnwise_amax_source_ptr, n_sources, columnwise_amax_ptr, columnwise_tensor_scale_ptr, RULE, SOURCES
            )
    # Persistent programs walk the tiles backwards: the amax pass read the last ones last (still in L2).  STAGES > 1:
    # the tile loads of later steps are issued ahead (Launch.stages).
    for step in tl.range(tl.program_id(0), tiles, tl.num_programs(0), num_stages=STAGES):
        quantize_tile(
            x_ptr,
            tiles - 1 - step,
            M,
            K,
            p0,
            p1,
            t_p0,
            t_p1,
            random_ptr,
            data_ptr,
            scales_ptr,
            amax_ptr,
            tensor_scale_ptr,
            columnwise_random_ptr,
            columnwise_data_ptr,
            columnwise_scales_ptr,
            columnwise_amax_ptr,
            columnwise_tensor_scale_ptr,
            K // 16,
            M // 16,
            INPUT,
            ROWWISE,
            COLUMNWISE,
            TILE_2D,
            ROW_AMAX,
            RHT,
            ROUNDING,
            RANDOM_BITS,
            COLUMNWISE_RANDOM_BITS,
            RULE,
            ZERO_ENC,
            BM,
            BK,
            EVEN,
            SANITIZE,
            SAME_AMAX,
            STORE_EVICTION,
        )


def nvfp4_tensor_amax_kernel(
    # pointers: the input as words (two elements each), one int32 amax per program
    words_ptr,
    partial_ptr,
    # sizes: the input's words, and how many of the last ones to leave in L2 for the quantize pass
    n_words,
    kept_words,
    # variant
    INPUT: tl.constexpr,
    RULE: tl.constexpr,
    # tiling
    CHUNK: tl.constexpr,
    EVEN: tl.constexpr,
    SANITIZE: tl.constexpr,
):
    """Per-tensor amax without the Hadamard transform: x and x.T share it, so x is read as a flat array.

    Persistent programs keep elementwise running maxima of ``CHUNK`` words (``max.f32`` ignores NaN as
    TE's ``fmaxf``; torchao's rules propagate it), reduce them once and store the float32 bits at
    ``partial_ptr[program]``, which the quantize pass reduces (:func:`operand_scales`): no zeroed buffer for
    ``atomic_max``, so no fill kernel before this one (a launch and a gap saved per call).
    """
    chunks = tl.cdiv(n_words, CHUNK)
    first_kept = chunks - kept_words // CHUNK
    running = tl.zeros([CHUNK], tl.float32)
    for chunk in range(tl.program_id(0), first_kept, tl.num_programs(0)):
        running = amax_chunk(words_ptr, n_words, chunk, running, INPUT, RULE, CHUNK, EVEN, SANITIZE, "evict_first")
    for chunk in range(first_kept + tl.program_id(0), chunks, tl.num_programs(0)):
        running = amax_chunk(words_ptr, n_words, chunk, running, INPUT, RULE, CHUNK, EVEN, SANITIZE, "evict_last")
    tl.store(partial_ptr + tl.program_id(0), abs_max(running, 0, RULE, SANITIZE).to(tl.int32, bitcast=True))


def nvfp4_rowwise_kernel(
    # pointers: the input and the random bits as words (two elements each), the outputs
    words_ptr,
    random_ptr,
    data_ptr,
    scales_ptr,
    amax_ptr,
    tensor_scale_ptr,
    # where the per-tensor amax bits are read (operand_scales), and how many there are
    amax_source_ptr,
    n_sources,
    # sizes
    M,
    K,
    # variant
    INPUT: tl.constexpr,
    TILE_2D: tl.constexpr,
    ROW_AMAX: tl.constexpr,
    ROUNDING: tl.constexpr,
    RANDOM_BITS: tl.constexpr,
    RULE: tl.constexpr,
    ZERO_ENC: tl.constexpr,
    # tiling
    BR: tl.constexpr,
    NB: tl.constexpr,
    V: tl.constexpr,
    EVEN: tl.constexpr,
    SANITIZE: tl.constexpr,
    SOURCES: tl.constexpr,
    STORE_EVICTION: tl.constexpr,
):
    """The rowwise operand alone: persistent programs over tiles of ``BR`` rows by ``NB`` blocks of 16
    (:func:`rowwise_tile`), visited in reverse: the amax pass read the last ones last (still in L2)."""
    tiles = tl.cdiv(M, BR) * tl.cdiv(K // 16, NB)
    p0 = tl.full([], 0.0, tl.float32)
    p1 = tl.full([], 0.0, tl.float32)
    if not ROW_AMAX:
        p0, p1 = operand_scales(amax_source_ptr, n_sources, amax_ptr, tensor_scale_ptr, RULE, SOURCES)
    for step in range(tl.program_id(0), tiles, tl.num_programs(0)):
        rowwise_tile(
            words_ptr,
            random_ptr,
            tiles - 1 - step,
            M,
            K,
            p0,
            p1,
            data_ptr,
            scales_ptr,
            amax_ptr,
            tensor_scale_ptr,
            K // 16,
            INPUT,
            TILE_2D,
            ROW_AMAX,
            ROUNDING,
            RANDOM_BITS,
            RULE,
            ZERO_ENC,
            BR,
            NB,
            V,
            EVEN,
            SANITIZE,
            STORE_EVICTION,
        )
