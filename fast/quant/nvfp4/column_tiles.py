"""NVFP4 tile bodies of the columnwise operand and of both operands at once: the 16-point Hadamard transform,
the transposed codes and scales, the tile amax, and :func:`quantize_tile` (both operands of one tile)."""

from __future__ import annotations

from fast._triton import (
    device,
    float32_bits,
    tl,
)
from fast.quant.nvfp4.hadamard import hadamard_16_columns, hadamard_16_sums
from fast.quant.nvfp4.rounding import e2m1_pairs, e2m1_stochastic
from fast.quant.nvfp4.tiles import (
    abs_max,
    block_scale,
    global_scales,
    max2,
    quantize_block_tile,
    sanitized_magnitude,
    whole_tile,
)


@device
def _quantize_columns(
    # the tile of x (after the Hadamard transform with RHT) and where it sits
    values,
    row0,
    col0,
    M,
    K,
    scale_stride,
    # per-tensor scale parameters (unused for ROW_AMAX) and pointers of the columnwise operand
    p0,
    p1,
    amax_ptr,
    random_ptr,
    data_ptr,
    scales_ptr,
    tensor_scale_ptr,
    # tile shape and variant
    BM: tl.constexpr,
    BK: tl.constexpr,
    EVEN: tl.constexpr,
    ALIGNED: tl.constexpr,
    TILE_2D: tl.constexpr,
    ROW_AMAX: tl.constexpr,
    ROUNDING: tl.constexpr,
    RANDOM_BITS: tl.constexpr,
    RULE: tl.constexpr,
    ZERO_ENC: tl.constexpr,
    SANITIZE: tl.constexpr,
    STORE_EVICTION: tl.constexpr,
):
    """Scales, codes and packed bytes of the columnwise operand ``x.T`` from one ``[BM, BK]`` tile of ``x``.

    Everything is computed in ``x``'s orientation: a block is 16 rows of one column, a byte a pair of rows; only
    the packed bytes and the block scales are transposed, by the stores (``[K, M / 2]``, and ``[K, M / 16]`` with
    rows ``scale_stride`` bytes apart).  Round to nearest is :func:`_store_columns`'s (:func:`e2m1_pairs`).
    """
    r = tl.arange(0, BM)
    c = tl.arange(0, BK)
    col_ok = (col0 + c) < K
    col_base = col0.to(tl.int64)
    if ROW_AMAX:
        amax = tl.load(amax_ptr + col0 + c, mask=col_ok, other=0).to(tl.float32, bitcast=True)
        tensor_scale, col_p0, col_p1 = global_scales(amax, RULE)
        # A vector mask and a scalar condition are combined as vectors: the interpreter rejects the mix.
        tl.store(tensor_scale_ptr + col0 + c, tensor_scale, mask=col_ok & ((c * 0 + row0) == 0))
        p0 = col_p0[None, :]
        p1 = col_p1[None, :]

    # Block amax (16 rows of a column), block scale, encode scale.
    blocks = abs_max(tl.reshape(values, [BM // 16, 16, BK]), 1, RULE, SANITIZE)
    if TILE_2D:
        tiles = abs_max(tl.reshape(blocks, [BM // 16, BK // 16, 16]), 2, RULE, SANITIZE)
        tile_code, tile_encode = block_scale(tiles, p0, p1, RULE, ZERO_ENC)
        code = tl.reshape(tl.broadcast_to(tile_code[:, :, None], [BM // 16, BK // 16, 16]), [BM // 16, BK])
        encode = tl.reshape(tl.broadcast_to(tile_encode[:, :, None], [BM // 16, BK // 16, 16]), [BM // 16, BK])
    else:
        code, encode = block_scale(blocks, p0, p1, RULE, ZERO_ENC)

    # Elements.
    scaled = tl.reshape(tl.reshape(values, [BM // 16, 16, BK]) * encode[:, None, :], [BM, BK])
    q = scaled  # round to nearest: by _store_columns
    if ROUNDING != 0:
        e_pointers = random_ptr + col_base * M + (c[None, :] * M + (row0 + r)[:, None])
        if EVEN:
            random = tl.load(e_pointers)
        else:
            random = tl.load(e_pointers, mask=col_ok[None, :] & ((row0 + r) < M)[:, None], other=0)
        q = e2m1_stochastic(scaled, random.to(tl.int32), RANDOM_BITS)
    _store_columns(
        q, code, row0, col0, M, K, scale_stride, data_ptr, scales_ptr, BM, BK, EVEN, ALIGNED, 1 if ROUNDING == 0 else 0,
        STORE_EVICTION,
    )  # fmt: skip


@device
def _row_pairs(words, BM: tl.constexpr, N: tl.constexpr):
    """Rows ``2i`` and ``2i + 1`` of int32 ``words [BM, N]``, each ``[BM / 2, N]``: integer sums over an axis of 2 pick
    them out (no split, which would need a layout with the pair in one thread; the sums keep the tile's, and x + 0 is
    x)."""
    pairs = tl.reshape(words, [BM // 2, 2, N])
    first = (tl.arange(0, 2) == 0)[None, :, None]
    return tl.sum(tl.where(first, pairs, 0), axis=1), tl.sum(tl.where(first, 0, pairs), axis=1)


@device
def _store_columns(
    q,
    code,
    row0,
    col0,
    M,
    K,
    scale_stride,
    data_ptr,
    scales_ptr,
    BM: tl.constexpr,
    BK: tl.constexpr,
    EVEN: tl.constexpr,
    ALIGNED: tl.constexpr,
    FORM: tl.constexpr,
    STORE_EVICTION: tl.constexpr,
):
    """Store the columnwise operand of one ``[BM, BK]`` tile of ``x``: E2M1 codes of ``q [BM, BK]`` as bytes of row
    pairs into ``[K, M / 2]``, E4M3 codes ``[BM / 16, BK]`` into ``[K, M / 16]`` with rows ``scale_stride`` bytes apart
    (``M / 16``, which whole tiles make a multiple of ``BM / 16``, or TE's padded ``round_up(M / 16, 4)``, equal to it
    then).  ``q`` by ``FORM``: 0, the codes (in the low 4 bits, zeros from bit 4 to 17: stochastic rounding); 1, the
    scaled float32 values, rounded to nearest here by :func:`e2m1_pairs`; 2, the rowwise bytes ``[BM, BK / 2]`` of the
    same codes (16 x 16 tiles: ``x.T``'s codes are ``x``'s), whose nibbles pair anew, so that the shared codes come from
    :func:`e2m1_pairs` rather than from the 8 float32 instructions an element of :func:`_e2m1_rne_raw` (fewer
    instructions, the same bytes).  ``EVEN``: the tile is whole (no masks), else
    masks in blocks and bytes, as :func:`quantize_block_tile`'s; ``ALIGNED``: so is every tile of the operand."""
    c = tl.arange(0, BK)
    g = tl.arange(0, BM // 16)
    j = tl.arange(0, BM // 2)
    col_ok = (col0 + c) < K
    col_base = col0.to(tl.int64)
    # Whole tiles: strides and offsets are multiples of the tile, which Triton's stores need to be vectors.
    s_stride = tl.multiple_of(scale_stride, BM // 16) if ALIGNED else scale_stride
    s_row = tl.multiple_of(row0 // 16, BM // 16)
    s_pointers = scales_ptr + col_base * s_stride + (c[None, :] * s_stride + (s_row + g)[:, None])
    if EVEN:
        tl.store(s_pointers, code.to(tl.uint8), eviction_policy=STORE_EVICTION)
    else:
        tl.store(
            s_pointers,
            code.to(tl.uint8),
            mask=col_ok[None, :] & ((row0 // 16 + g) < M // 16)[:, None],
            eviction_policy=STORE_EVICTION,
        )
    if FORM == 1:
        low, high = _row_pairs(q.to(tl.int32, bitcast=True), BM, BK)
        packed = e2m1_pairs(low.to(tl.float32, bitcast=True), high.to(tl.float32, bitcast=True))
    elif FORM == 2:
        # Byte j of a row holds columns 2j and 2j + 1: column 2j's byte is the two rows' low nibbles, 2j + 1's their
        # high ones.
        top, bottom = _row_pairs(q.to(tl.int32), BM, BK // 2)
        even = (top & 15) | ((bottom & 15) << 4)
        odd = (top >> 4) | (bottom & 0xF0)
        packed = tl.reshape(tl.join(even, odd), [BM // 2, BK]).to(tl.uint8)
    else:
        # Rows 2i and 2i + 1 make byte i: a sum over an axis of 2 (no split, which would need the pair in one thread).
        shift = (tl.arange(0, 2) * 4)[None, :, None]
        packed = tl.sum(tl.reshape(q, [BM // 2, 2, BK]) << shift, axis=1).to(tl.uint8)
    # M is a multiple of 16: a row of the codes starts on 8 bytes.
    d_stride = tl.multiple_of(M // 2, BM // 2 if ALIGNED else 8)
    d_row = tl.multiple_of(row0 // 2, BM // 2)
    d_pointers = data_ptr + col_base * d_stride + (c[None, :] * d_stride + (d_row + j)[:, None])
    if EVEN:
        tl.store(d_pointers, packed, eviction_policy=STORE_EVICTION)
    else:
        tl.store(
            d_pointers,
            packed,
            mask=col_ok[None, :] & ((row0 // 2 + j) < M // 2)[:, None],
            eviction_policy=STORE_EVICTION,
        )


# %% Compute kernels


@device
def amax_tile(
    x_ptr,
    amax_ptr,
    columnwise_amax_ptr,
    M,
    K,
    tile,
    running,
    running_t,
    INPUT: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLUMNWISE: tl.constexpr,
    ROW_AMAX: tl.constexpr,
    RHT: tl.constexpr,
    RULE: tl.constexpr,
    BM: tl.constexpr,
    BK: tl.constexpr,
    EVEN: tl.constexpr,
    SANITIZE: tl.constexpr,
    EVICTION: tl.constexpr,
):
    """One tile of the amax pass: atomics per row / column (row-scaled), else the running maxima."""
    tiles_k = tl.cdiv(K, BK)
    r = tl.arange(0, BM)
    c = tl.arange(0, BK)
    row0 = (tile // tiles_k) * BM
    col0 = (tile % tiles_k) * BK
    row_ok = (row0 + r) < M
    col_ok = (col0 + c) < K
    if COLUMNWISE:  # the columnwise kernel's tiles and layout (the Hadamard transform runs along the columns)
        values = _column_values(x_ptr, tile, M, K, INPUT, ROWWISE, RHT, BM, BK, EVEN, EVICTION)
    else:
        pointers = x_ptr + row0.to(tl.int64) * K + (r[:, None] * K + (col0 + c)[None, :])
        if EVEN:
            raw = tl.load(pointers, eviction_policy=EVICTION)
        else:
            raw = tl.load(pointers, mask=row_ok[:, None] & col_ok[None, :], other=0, eviction_policy=EVICTION)
        values = float32_bits(raw, INPUT)[1].to(tl.float32, bitcast=True)
    if ROW_AMAX:
        if ROWWISE:
            row_amax = abs_max(values, 1, RULE, SANITIZE).to(tl.int32, bitcast=True)
            tl.atomic_max(amax_ptr + row0 + r, row_amax, mask=row_ok)
        if COLUMNWISE:
            col_amax = abs_max(values, 0, RULE, SANITIZE).to(tl.int32, bitcast=True)
            tl.atomic_max(columnwise_amax_ptr + col0 + c, col_amax, mask=col_ok)
    else:
        # Elementwise running maxima, reduced once after the last tile (no reduction per tile).
        running = max2(running, sanitized_magnitude(values, RULE, SANITIZE), RULE)
        if COLUMNWISE and RHT:
            running_t = max2(running_t, sanitized_magnitude(hadamard_16_sums(values, BM, BK), RULE, SANITIZE), RULE)
    return running, running_t


@device
def _column_tile(
    x_ptr,
    tile,
    M,
    K,
    BM: tl.constexpr,
    BK: tl.constexpr,
    EVEN: tl.constexpr,
    EVICTION: tl.constexpr,
    WHOLE_BLOCKS: tl.constexpr,
):
    """The raw elements of tile ``tile`` of ``x`` (``[BM, BK]``, row-major tiles) as a view whose register axes hold
    rows of a columnwise block; nothing is read for a negative ``tile``.

    Triton gives a load's threads to its contiguous axis first and then to the other axes in index order, leaving the
    last ones in registers.  ``WHOLE_BLOCKS`` false: ``[2, BM / 16, 4, 2, BK]``, row ``16 g + 4 q + 2 b + a`` at ``[b,
    g, q, a]``; 16 bytes of a row a thread, then ``b`` and ``g`` to threads: a thread holds 8 of a block's 16 rows (rows
    2i and 2i + 1, one columnwise byte, together), its neighbour the other 8, and half of a rowwise block.  True: ``[BK
    / 4, BM / 16, 2, 4, 2, 4]``, row ``16 g + 8 b + 2 q + a`` and column ``4 c + d`` at ``[c, g, b, q, a, d]``; 8 bytes
    of a row a thread, then ``c`` and ``g`` to threads: a thread holds all 16 rows of its 4 columns' blocks, so the
    Hadamard butterflies and the columnwise block maxima stay in the thread (no shuffles), while a rowwise block spans 4
    threads.  The columnwise operand and every variant with RHT are faster with 16 rows a thread; both operands without
    RHT are slower so (more registers: the rowwise block scales computed by 4 threads each), so they keep 8 rows.
    (Other Triton versions may order the axes otherwise: slower, not wrong.)  The permute and reshape of
    :func:`_column_values` move no data.
    """
    tiles_k = tl.cdiv(K, BK)
    row0 = (tl.maximum(tile, 0) // tiles_k) * BM
    col0 = (tl.maximum(tile, 0) % tiles_k) * BK
    if WHOLE_BLOCKS:
        c = tl.arange(0, BK // 4)[:, None, None, None, None, None]
        g = tl.arange(0, BM // 16)[None, :, None, None, None, None]
        b = tl.arange(0, 2)[None, None, :, None, None, None]
        q = tl.arange(0, 4)[None, None, None, :, None, None]
        a = tl.arange(0, 2)[None, None, None, None, :, None]
        rows = 16 * g + 8 * b + 2 * q + a
        cols = col0 + 4 * c + tl.arange(0, 4)[None, None, None, None, None, :]
    else:
        b = tl.arange(0, 2)[:, None, None, None, None]
        g = tl.arange(0, BM // 16)[None, :, None, None, None]
        q = tl.arange(0, 4)[None, None, :, None, None]
        a = tl.arange(0, 2)[None, None, None, :, None]
        rows = 16 * g + 4 * q + 2 * b + a
        cols = col0 + tl.arange(0, BK)[None, None, None, None, :]
    pointers = x_ptr + row0.to(tl.int64) * K + (rows * K + cols)
    # A vector mask, not a scalar condition: the interpreter rejects the mix.
    mask = (rows * 0 + tile) >= 0
    if not EVEN:  # M is a multiple of 16: a mask per group of 16 rows (fewer predicates than one per row)
        mask = mask & ((row0 // 16 + g) < M // 16) & (cols < K)
    return tl.load(pointers, mask=mask, other=0, eviction_policy=EVICTION)


@device
def _column_values(
    x_ptr,
    tile,
    M,
    K,
    INPUT: tl.constexpr,
    ROWWISE: tl.constexpr,
    RHT: tl.constexpr,
    BM: tl.constexpr,
    BK: tl.constexpr,
    EVEN: tl.constexpr,
    EVICTION: tl.constexpr,
):
    """float32 ``[BM, BK]`` of tile ``tile`` of ``x`` as the tile kernels (quantize and amax passes) read it: through
    :func:`_column_tile`'s view with a columnwise block's 16 rows in one thread for the columnwise operand alone and
    with RHT, else 8."""
    WHOLE_BLOCKS: tl.constexpr = RHT or not ROWWISE
    raw = _column_tile(x_ptr, tile, M, K, BM, BK, EVEN, EVICTION, WHOLE_BLOCKS)
    values = float32_bits(raw, INPUT)[1].to(tl.float32, bitcast=True)
    # A constexpr-conditional expression: Triton compiles only the chosen permute (a `return` inside `if` does not
    # stop it from compiling the code after the `if`).
    values = tl.permute(values, (1, 2, 3, 4, 0, 5)) if WHOLE_BLOCKS else tl.permute(values, (1, 2, 0, 3, 4))
    return tl.reshape(values, [BM, BK])


@device
def quantize_tile(
    # the input, the tile (row-major order of x's [BM, BK] tiles) and x's dims
    x_ptr,
    tile,
    M,
    K,
    # per-tensor scale parameters (global_scales) of each operand, unused for ROW_AMAX
    p0,
    p1,
    t_p0,
    t_p1,
    # rowwise and columnwise pointers
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
    # bytes between the rows of each operand's scales: K / 16 and M / 16, or TE's padded round_up(., 4)
    scale_stride,
    columnwise_scale_stride,
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
    STORE_EVICTION: tl.constexpr,
):
    """Both operands (or the columnwise one) of tile ``tile`` of ``x [M, K]``: the quantize kernel's tile body,
    also run by ``fast.group``'s grouped kernel on each member's tiles (pointers at the member, its padded
    scale strides, its ``p0, p1``).  ``ROWWISE`` needs ``COLUMNWISE`` here (the rowwise operand alone is
    :func:`rowwise_tile`'s).  ``SAME_AMAX``: both operands have the same tensor amax (a computed one without
    RHT; given ones may differ), so 16 x 16 tiles share their codes.

    ``EVEN``: every tile of ``x`` is whole.  Else, where the body is small (16-bit input, round to nearest, tensor
    amax, no RHT), the tiles that are whole (all but the last row and column of tiles) run without masks: a separate
    copy of the body, since masks chosen by branches inside it held both variants' values at once (many more
    registers).  The other variants need many registers already and were slower with the copy, so their ragged
    operands keep masks on every tile.

    ``STORE_EVICTION``: the L2 eviction hint of the data and scale stores, :func:`store_eviction`'s (``fast.group``'s
    grouped kernel too, for its whole buffer).  The same hint on the MX, FP8 blockwise and FP8 current-scaling kernels
    was slower; they store without one."""
    whole = EVEN
    if not EVEN and INPUT != 0 and ROUNDING == 0 and not ROW_AMAX and not RHT:
        tiles_k = tl.cdiv(K, BK)
        whole = whole_tile((tile // tiles_k) * BM, (tile % tiles_k) * BK, M, K, BM, BK)
    if whole:
        _operands_tile(
            x_ptr,
            tile,
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
            scale_stride,
            columnwise_scale_stride,
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
            True,
            EVEN,
            SANITIZE,
            SAME_AMAX,
            STORE_EVICTION,
        )
    else:
        _operands_tile(
            x_ptr,
            tile,
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
            scale_stride,
            columnwise_scale_stride,
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
            False,
            False,
            SANITIZE,
            SAME_AMAX,
            STORE_EVICTION,
        )


@device
def _operands_tile(
    # the input, the tile (row-major order of x's [BM, BK] tiles) and x's dims
    x_ptr,
    tile,
    M,
    K,
    # per-tensor scale parameters (global_scales) of each operand, unused for ROW_AMAX
    p0,
    p1,
    t_p0,
    t_p1,
    # rowwise and columnwise pointers
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
    # bytes between the rows of each operand's scales: K / 16 and M / 16, or TE's padded round_up(., 4)
    scale_stride,
    columnwise_scale_stride,
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
    ALIGNED: tl.constexpr,
    SANITIZE: tl.constexpr,
    SAME_AMAX: tl.constexpr,
    STORE_EVICTION: tl.constexpr,
):
    """:func:`quantize_tile`'s body: ``EVEN``, the tile is whole (no masks); ``ALIGNED``, every tile is (strides are
    multiples of the tile)."""
    SHARED: tl.constexpr = SAME_AMAX and ROWWISE and TILE_2D and not RHT and ROUNDING == 0
    tiles_k = tl.cdiv(K, BK)
    row0 = (tile // tiles_k) * BM
    col0 = (tile % tiles_k) * BK
    values = _column_values(x_ptr, tile, M, K, INPUT, ROWWISE, RHT, BM, BK, EVEN, "evict_first")
    if ROWWISE:
        packed, tile_code = quantize_block_tile(
            values,
            row0,
            col0,
            M,
            K,
            scale_stride,
            p0,
            p1,
            amax_ptr,
            random_ptr,
            data_ptr,
            scales_ptr,
            tensor_scale_ptr,
            BM,
            BK,
            EVEN,
            TILE_2D,
            ROW_AMAX,
            ROUNDING,
            RANDOM_BITS,
            RULE,
            ZERO_ENC,
            SANITIZE,
            STORE_EVICTION,
        )
    if COLUMNWISE and SHARED:
        # 16 x 16 tiles, no RHT, round to nearest: x.T has the same tile scales and codes as x (transposed).
        code = tl.reshape(tl.broadcast_to(tile_code[:, :, None], [BM // 16, BK // 16, 16]), [BM // 16, BK])
        _store_columns(
            packed,
            code,
            row0,
            col0,
            M,
            K,
            columnwise_scale_stride,
            columnwise_data_ptr,
            columnwise_scales_ptr,
            BM,
            BK,
            EVEN,
            ALIGNED,
            2,
            STORE_EVICTION,
        )
    elif COLUMNWISE:
        t_values = values
        if RHT:
            t_values = hadamard_16_columns(values, BM, BK)
        _quantize_columns(
            t_values,
            row0,
            col0,
            M,
            K,
            columnwise_scale_stride,
            t_p0,
            t_p1,
            columnwise_amax_ptr,
            columnwise_random_ptr,
            columnwise_data_ptr,
            columnwise_scales_ptr,
            columnwise_tensor_scale_ptr,
            BM,
            BK,
            EVEN,
            ALIGNED,
            TILE_2D,
            ROW_AMAX,
            ROUNDING,
            COLUMNWISE_RANDOM_BITS,
            RULE,
            ZERO_ENC,
            SANITIZE,
            STORE_EVICTION,
        )
