"""MX tile bodies: one tile's block codes and scales (:func:`quantize_tile`), their stores at compact or swizzled
offsets, and the copy of staged rowwise scale bytes (:func:`unstage_tiles`), shared with ``fast.group``."""

from __future__ import annotations

from fast._triton import device, fp8_code, tl
from fast.layout import swizzled_offset
from fast.quant.mx.rounding import (
    block_amax,
    e2m1_pairs,
    e2m1_words,
    half_maxima,
    mx_code,
    mx_reciprocal,
    mx_scale_byte,
    reciprocal_pairs,
)


@device
def _block_codes(
    value,
    scale,
    ZERO_BITS: tl.constexpr,
    FP8: tl.constexpr,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_VALUE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SUBNORMAL_ADDEND: tl.constexpr,
    EDGES: tl.constexpr,
    PACK: tl.constexpr,
    INPUT: tl.constexpr,
):
    """Codes of float32 ``value`` (``[BM, NB, 32]``) under the (broadcast) scale bytes ``scale``: ``[BM, NB, 32]``
    int32 codes, or with PACK (FP4) ``[BM, NB, 16]`` uint8 bytes of packed pairs, element ``2i`` in the low nibble.

    FP8 (1 E4M3FN, 2 E5M2): :func:`fast._triton.fp8_code` of the scaled values -- the hardware conversion when
    compiled; a NaN element is scaled to the canonical (positive) NaN by the multiply and gives ``0x7F``.  FP4 of
    float16 inputs: :func:`e2m1_pairs` (bfloat16 FP4 tiles take :func:`_quantize_bf16_fp4_tile`); FP6 and FP4 of
    float32 inputs: :func:`mx_code`, where NaN gives +max.  The torchao edges: every NaN sits in a block of scale
    255, whose codes are 0 (the codes of +0: such elements are zeroed before the cast, as the two nibbles of a
    columnwise FP4 byte have different scales).
    """
    reciprocal = mx_reciprocal(scale, ZERO_BITS)
    if PACK and INPUT != 0:
        reciprocal = reciprocal * 0.03125  # exact (float32 subnormals included): e2m1_pairs takes v / 32
    scaled = value * reciprocal
    if EDGES != 0:
        scaled = tl.where(scale == 255, 0.0, scaled)
    if PACK:
        BM: tl.constexpr = value.shape[0]
        NB: tl.constexpr = value.shape[1]
        low, high = tl.split(tl.reshape(scaled, [BM, NB, 16, 2]))
        if INPUT != 0:
            codes = e2m1_pairs(low, high)
        else:
            low_code = mx_code(low, MANTISSA_BITS, BIAS, MAX_CODE, MAX_VALUE, SIGN_SHIFT, SIGN_MASK, SUBNORMAL_ADDEND)
            high_code = mx_code(high, MANTISSA_BITS, BIAS, MAX_CODE, MAX_VALUE, SIGN_SHIFT, SIGN_MASK, SUBNORMAL_ADDEND)
            codes = (low_code | (high_code << 4)).to(tl.uint8)
    elif FP8:
        codes = fp8_code(scaled, FP8 == 2)
    else:
        codes = mx_code(scaled, MANTISSA_BITS, BIAS, MAX_CODE, MAX_VALUE, SIGN_SHIFT, SIGN_MASK, SUBNORMAL_ADDEND)
    return codes


@device
def _store_data(codes, data_ptr, row, tile_k, row_stride, rows, cols, PACK: tl.constexpr, EVEN: tl.constexpr):
    """Store the codes ``[BM, NB, 32]`` (int32 or uint8; with PACK the bytes ``[BM, NB, 16]`` of packed pairs) of rows
    ``row [BM]`` and the ``NB * 32`` columns of K-tile ``tile_k`` as a 2-D tile; ``EVEN``: the tile lies inside the
    matrix."""
    BM: tl.constexpr = codes.shape[0]
    NB: tl.constexpr = codes.shape[1]
    row_base = row.to(tl.int64)[:, None] * row_stride
    row_ok = row[:, None] < rows
    if PACK:
        # 4 bytes per thread, as the codes are laid out (Triton would otherwise regroup them through shared memory)
        pair = tl.max_contiguous(tile_k * (NB * 16) + tl.arange(0, NB * 16), 4)
        packed = tl.reshape(codes, [BM, NB * 16])
        if EVEN:
            tl.store(data_ptr + row_base + pair[None, :], packed)
        else:
            tl.store(data_ptr + row_base + pair[None, :], packed, mask=row_ok & (pair[None, :] < cols // 2))
    else:
        flat = tile_k * (NB * 32) + tl.arange(0, NB * 32)
        codes = tl.reshape(codes, [BM, NB * 32]).to(tl.uint8)
        if EVEN:
            tl.store(data_ptr + row_base + flat[None, :], codes)
        else:
            tl.store(data_ptr + row_base + flat[None, :], codes, mask=row_ok & (flat[None, :] < cols))


@device
def _store_row_scales(
    scale, scale_ptr, row, tile_k, stride, rows, cols, SWIZZLED: tl.constexpr, STAGED: tl.constexpr, EVEN: tl.constexpr
):
    """Rowwise scale bytes ``[BM, NB]`` of rows ``row`` and K-tile ``tile_k``: compact row-major, swizzled
    (``stride`` = tiles across), or ``STAGED``: the tile's ``BM * NB`` bytes contiguous, tiles in the grid's order
    (``stride`` = K-tiles), for :func:`unstage_row_scales`."""
    BM: tl.constexpr = scale.shape[0]
    NB: tl.constexpr = scale.shape[1]
    blocks = tile_k * NB + tl.arange(0, NB)
    mask = (row[:, None] < rows) & (blocks[None, :] < cols // 32)
    if STAGED:
        tile = (row[:, None] // BM) * stride + tile_k
        offsets = tile * (BM * NB) + (row[:, None] % BM) * NB + tl.arange(0, NB)[None, :]
    elif SWIZZLED:
        offsets = swizzled_offset(row[:, None], blocks[None, :], stride)
    else:
        offsets = row[:, None] * stride + blocks[None, :]
    if EVEN:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8))
    else:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8), mask=mask)


@device
def _store_col_scales(scale, scale_ptr, col, block, stride, cols, SWIZZLED: tl.constexpr, EVEN: tl.constexpr):
    """Columnwise scale bytes ``[NB, 32]`` of columns ``col`` for rows ``32 * block`` to ``32 * block + 31``: compact
    ``[M / 32, K]``, or swizzled as the transpose ``[K, M / 32]`` (``stride`` = its tiles across)."""
    offsets = swizzled_offset(col, block, stride) if SWIZZLED else block * stride + col
    if EVEN:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8))
    else:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8), mask=col < cols)


@device
def _quantize_bf16_fp4_tile(
    x_ptr,
    row_data_ptr,
    row_scale_ptr,
    col_data_ptr,
    col_scale_ptr,
    rows,
    cols,
    data_stride,
    row_scale_stride,
    col_scale_stride,
    row,
    col,
    tile_m,
    tile_k,
    EMAX: tl.constexpr,
    EVEN_ADD: tl.constexpr,
    RULE: tl.constexpr,
    EDGES: tl.constexpr,
    RCEIL_OPERAND: tl.constexpr,
    RCEIL_DIVIDE: tl.constexpr,
    ZERO_BITS: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLUMNWISE: tl.constexpr,
    TWO_D: tl.constexpr,
    SWIZZLED: tl.constexpr,
    STAGED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr,
):
    """The kernel's tile ``(tile_m, tile_k)`` (rows ``row``, columns ``col`` as ``[NB, 32]``) for FP4 of bfloat16
    ``x``: read as int32 words of element pairs (``[BLOCK_M, NB, 16]``, element ``2i`` in the low half, the nibble
    order of the packed codes), block maxima by :func:`half_maxima`, codes by :func:`e2m1_words` -- two elements
    per instruction throughout, no float32 values.  A columnwise word holds two columns: two scale bytes, their
    reciprocals in its two halves."""
    NB: tl.constexpr = BLOCK_K // 32
    pair = tile_k * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    word_ptrs = x_ptr.to(tl.pointer_type(tl.int32)) + row.to(tl.int64)[:, None] * (cols // 2) + pair[None, :]
    in_range = (row[:, None] < rows) & (pair[None, :] < cols // 2)
    loaded = tl.load(word_ptrs) if EVEN else tl.load(word_ptrs, mask=in_range, other=0)
    words = tl.reshape(loaded, [BLOCK_M, NB, 16])
    if TWO_D:  # one 32x32 tile per block of NB (BLOCK_M == 32)
        low, high = half_maxima(words, 3, EDGES)
        scale = mx_scale_byte(tl.maximum(low, high), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
        if EDGES != 0:  # blocks of scale 255 get codes 0
            words = tl.where(scale[None, :, None] == 255, 0, words)
        codes = e2m1_words(words, reciprocal_pairs(scale, scale, ZERO_BITS)[None, :, None])
        if ROWWISE:
            _store_data(codes, row_data_ptr, row, tile_k, data_stride, rows, cols, True, EVEN)
            row_scale = tl.broadcast_to(scale[None, :], [BLOCK_M, NB])
            _store_row_scales(
                row_scale, row_scale_ptr, row, tile_k, row_scale_stride, rows, cols, SWIZZLED, STAGED, EVEN
            )
        if COLUMNWISE:
            _store_data(codes, col_data_ptr, row, tile_k, data_stride, rows, cols, True, EVEN)
            col_scale = tl.broadcast_to(scale[:, None], [NB, 32])
            _store_col_scales(col_scale, col_scale_ptr, col, tile_m, col_scale_stride, cols, SWIZZLED, EVEN)
    else:
        if ROWWISE:  # 1x32 blocks: both halves of the last axis
            low, high = half_maxima(words, 2, EDGES)
            row_scale = mx_scale_byte(tl.maximum(low, high), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            row_words = words
            if EDGES != 0:
                row_words = tl.where(row_scale[:, :, None] == 255, 0, words)
            codes = e2m1_words(row_words, reciprocal_pairs(row_scale, row_scale, ZERO_BITS)[:, :, None])
            _store_data(codes, row_data_ptr, row, tile_k, data_stride, rows, cols, True, EVEN)
            _store_row_scales(
                row_scale, row_scale_ptr, row, tile_k, row_scale_stride, rows, cols, SWIZZLED, STAGED, EVEN
            )
        if COLUMNWISE:  # 32x1 blocks: axis 0 (BLOCK_M == 32), two columns per word
            low, high = half_maxima(words, 0, EDGES)
            low_scale = mx_scale_byte(low, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            high_scale = mx_scale_byte(high, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            if EDGES != 0:
                words = words & (tl.where(low_scale == 255, 0, 0xFFFF) | tl.where(high_scale == 255, 0, -65536))[None]
            codes = e2m1_words(words, reciprocal_pairs(low_scale, high_scale, ZERO_BITS)[None, :, :])
            _store_data(codes, col_data_ptr, row, tile_k, data_stride, rows, cols, True, EVEN)
            scale = tl.reshape(tl.join(low_scale, high_scale), [NB, 32])
            _store_col_scales(scale, col_scale_ptr, col, tile_m, col_scale_stride, cols, SWIZZLED, EVEN)


@device
def quantize_tile(
    x_ptr,
    row_data_ptr,
    row_scale_ptr,
    col_data_ptr,
    col_scale_ptr,
    rows,
    cols,
    data_stride,
    row_scale_stride,
    col_scale_stride,
    # the tile: rows BLOCK_M * tile_m .., columns BLOCK_K * tile_k ..
    tile_m,
    tile_k,
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
    STAGED: tl.constexpr,
    INPUT: tl.constexpr,
    # tiling: BLOCK_M rows (32 with columnwise or 2d blocks) by BLOCK_K columns (NB blocks of 32);
    # EVEN: every tile lies inside the matrix (no masks)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr,
):
    """Every output of tile ``(tile_m, tile_k)`` of ``x [rows, cols]`` (the kernel's arguments): the kernel's tile
    body, also run by ``fast.group``'s grouped kernel on each member's tiles (pointers at the member, its strides).

    The tile is read as a 2-D ``[BLOCK_M, BLOCK_K]`` block (Triton then lays it out with a warp across whole rows:
    coalesced, and few lanes along a column) and viewed as ``[BLOCK_M, NB, 32]``: the last axis is one rowwise
    block, axis 0 runs down a columnwise block.
    """
    NB: tl.constexpr = BLOCK_K // 32
    row = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    col = tile_k * BLOCK_K + tl.arange(0, NB)[:, None] * 32 + tl.arange(0, 32)[None, :]
    if STAGED:
        row_scale_stride = tl.cdiv(cols, BLOCK_K)
    if PACK and INPUT == 1:  # FP4 of bfloat16: words of element pairs
        _quantize_bf16_fp4_tile(
            x_ptr,
            row_data_ptr,
            row_scale_ptr,
            col_data_ptr,
            col_scale_ptr,
            rows,
            cols,
            data_stride,
            row_scale_stride,
            col_scale_stride,
            row,
            col,
            tile_m,
            tile_k,
            EMAX,
            EVEN_ADD,
            RULE,
            EDGES,
            RCEIL_OPERAND,
            RCEIL_DIVIDE,
            ZERO_BITS,
            ROWWISE,
            COLUMNWISE,
            TWO_D,
            SWIZZLED,
            STAGED,
            BLOCK_M,
            BLOCK_K,
            EVEN,
        )
    else:
        flat = tile_k * BLOCK_K + tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + row.to(tl.int64)[:, None] * cols + flat[None, :]
        in_range = (row[:, None] < rows) & (flat[None, :] < cols)
        raw = tl.reshape(tl.load(x_ptrs) if EVEN else tl.load(x_ptrs, mask=in_range, other=0.0), [BLOCK_M, NB, 32])
        if INPUT == 1:  # bfloat16: a 16-bit shift, exact (the interpreter's .to(tl.float32) flushes subnormals)
            value = (raw.to(tl.uint16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
        else:
            value = raw.to(tl.float32)  # exact
        if TWO_D:  # one 32x32 tile per block of NB (BLOCK_M == 32)
            scale = mx_scale_byte(block_amax(value, 3, EDGES), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            codes = _block_codes(
                value,
                scale[None, :, None],
                ZERO_BITS,
                FP8,
                MANTISSA_BITS,
                BIAS,
                MAX_CODE,
                MAX_VALUE,
                SIGN_SHIFT,
                SIGN_MASK,
                SUBNORMAL_ADDEND,
                EDGES,
                PACK,
                INPUT,
            )
            if ROWWISE:
                _store_data(codes, row_data_ptr, row, tile_k, data_stride, rows, cols, PACK, EVEN)
                row_scale = tl.broadcast_to(scale[None, :], [BLOCK_M, NB])
                _store_row_scales(
                    row_scale, row_scale_ptr, row, tile_k, row_scale_stride, rows, cols, SWIZZLED, STAGED, EVEN
                )
            if COLUMNWISE:
                _store_data(codes, col_data_ptr, row, tile_k, data_stride, rows, cols, PACK, EVEN)
                col_scale = tl.broadcast_to(scale[:, None], [NB, 32])
                _store_col_scales(col_scale, col_scale_ptr, col, tile_m, col_scale_stride, cols, SWIZZLED, EVEN)
        else:
            if ROWWISE:  # 1x32 blocks: the last axis
                amax = block_amax(value, 2, EDGES)
                scale = mx_scale_byte(amax, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
                codes = _block_codes(
                    value,
                    scale[:, :, None],
                    ZERO_BITS,
                    FP8,
                    MANTISSA_BITS,
                    BIAS,
                    MAX_CODE,
                    MAX_VALUE,
                    SIGN_SHIFT,
                    SIGN_MASK,
                    SUBNORMAL_ADDEND,
                    EDGES,
                    PACK,
                    INPUT,
                )
                _store_data(codes, row_data_ptr, row, tile_k, data_stride, rows, cols, PACK, EVEN)
                _store_row_scales(
                    scale, row_scale_ptr, row, tile_k, row_scale_stride, rows, cols, SWIZZLED, STAGED, EVEN
                )
            if COLUMNWISE:  # 32x1 blocks: axis 0 (BLOCK_M == 32)
                amax = block_amax(value, 0, EDGES)
                scale = mx_scale_byte(amax, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
                codes = _block_codes(
                    value,
                    scale[None, :, :],
                    ZERO_BITS,
                    FP8,
                    MANTISSA_BITS,
                    BIAS,
                    MAX_CODE,
                    MAX_VALUE,
                    SIGN_SHIFT,
                    SIGN_MASK,
                    SUBNORMAL_ADDEND,
                    EDGES,
                    PACK,
                    INPUT,
                )
                _store_data(codes, col_data_ptr, row, tile_k, data_stride, rows, cols, PACK, EVEN)
                _store_col_scales(scale, col_scale_ptr, col, tile_m, col_scale_stride, cols, SWIZZLED, EVEN)


@device
def unstage_tiles(
    staged_ptr,
    scale_ptr,
    rows,
    words,
    stride,
    program,
    BLOCK_M: tl.constexpr,
    PER_TILE: tl.constexpr,
    TILES: tl.constexpr,
):
    """Copy rowwise scales, as int32 words of 4 scale bytes, from a staging buffer (:func:`_store_row_scales` with
    ``STAGED``: tile after tile in the grid's order, each tile's ``BLOCK_M`` rows of ``PER_TILE`` words) into the
    compact matrix (``rows`` rows of ``words`` words, ``stride`` apart).  ``program`` moves ``TILES`` consecutive
    tiles of a band of ``BLOCK_M`` rows: one contiguous load, a permutation through shared memory, rows of ``TILES
    * PER_TILE`` contiguous words stored.  Also run by ``fast.group``'s grouped copy on each member."""
    tiles_k = tl.cdiv(words, PER_TILE)
    chunks = tl.cdiv(tiles_k, TILES)
    band = program // chunks
    tile = (program - band * chunks) * TILES + tl.arange(0, TILES)[:, None, None]
    local = tl.arange(0, BLOCK_M)[None, :, None]
    part = tl.arange(0, PER_TILE)[None, None, :]
    word = tile * PER_TILE + part
    inside = (band * BLOCK_M + local < rows) & (word < words)
    staged = tl.load(staged_ptr + ((band * tiles_k + tile) * BLOCK_M + local) * PER_TILE + part, mask=inside)
    row = band * BLOCK_M + tl.arange(0, BLOCK_M)[:, None, None]
    word = tl.permute(word, (1, 0, 2))
    tl.store(
        scale_ptr + row * stride + word,
        tl.permute(staged, (1, 0, 2)),
        mask=(row < rows) & (word < words),
    )
