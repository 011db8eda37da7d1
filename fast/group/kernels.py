"""The grouped Triton kernels: every program looks its member up in a small table (element offset, dims, scale
offsets) and runs the recipe's own tile body (``fast.quant.<recipe>`` public tile names) on a tile of that member."""

from __future__ import annotations

from fast._triton import device, float32_bits, tl, wait_for_primary
from fast.quant.fp8 import fp8_code, reciprocal, scale_from_amax
from fast.quant.fp8_block.tiles import quantize_tile as block_tile
from fast.quant.mx.tiles import quantize_tile as mx_tile
from fast.quant.mx.tiles import unstage_tiles as mx_unstage_tiles
from fast.quant.nvfp4.column_tiles import quantize_tile as quantize_nvfp4_tile
from fast.quant.nvfp4.tiles import global_scales as nvfp4_global_scales
from fast.quant.nvfp4.tiles import rowwise_tile as rowwise_nvfp4_tile


def grouped_unstage_kernel(
    staged_ptr, scale_ptr, table_ptr, n_members, BLOCK_M: tl.constexpr, PER_TILE: tl.constexpr, TILES: tl.constexpr,
    WAIT: tl.constexpr, MEMBERS: tl.constexpr,
):  # fmt: skip
    # The member's staged tiles start at its first quantize program; its K / 128 words a row, stride as many.
    if WAIT:
        wait_for_primary()
    member, first = _member_of(table_ptr, 1, n_members, tl.program_id(0), MEMBERS)
    staged = staged_ptr + tl.load(table_ptr + member) * (BLOCK_M * PER_TILE)
    m = tl.load(table_ptr + 2 * MEMBERS + member).to(tl.int32)
    words = tl.load(table_ptr + 3 * MEMBERS + member).to(tl.int32) // 128
    scales = scale_ptr + tl.load(table_ptr + 4 * MEMBERS + member) // 4
    mx_unstage_tiles(staged, scales, m, words, words, tl.program_id(0) - first, BLOCK_M, PER_TILE, TILES)


def grouped_mx_kernel(
    x_ptr, row_data_ptr, row_scale_ptr, col_data_ptr, col_scale_ptr, table_ptr, n_members, FP8: tl.constexpr,
    MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr, MAX_VALUE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr, SIGN_MASK: tl.constexpr, SUBNORMAL_ADDEND: tl.constexpr, PACK: tl.constexpr,
    EMAX: tl.constexpr, EVEN_ADD: tl.constexpr, RULE: tl.constexpr, EDGES: tl.constexpr, RCEIL_OPERAND: tl.constexpr,
    RCEIL_DIVIDE: tl.constexpr, ZERO_BITS: tl.constexpr, ROWWISE: tl.constexpr, COLUMNWISE: tl.constexpr,
    TWO_D: tl.constexpr, SWIZZLED: tl.constexpr, STAGED: tl.constexpr, INPUT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr, EVEN: tl.constexpr, MEMBERS: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    # fast.quant.mx's tile body on the member's tile (table rows: 0 element offsets, 1 first tiles, 2 M, 3 K,
    # 4 and 5 scale offsets); a member's K-tiles of a row band are consecutive programs, as in mx's kernel.
    # STAGED: rowwise scales to the staging buffer at row_scale_ptr, the member's from its first tile on.
    member, first = _member_of(table_ptr, 1, n_members, tl.program_id(0), MEMBERS)
    begin, M, K = _member_dims(table_ptr, member, MEMBERS, ALIGN)
    if SWIZZLED:  # 128x4 tiles across: the rowwise matrix's, and the columnwise one's as its transpose [K, M / 32]
        row_scale_stride = (K // 32 + 3) // 4
        col_scale_stride = (M // 32 + 3) // 4
    else:  # [round_up(M, 128), round_up(K / 32, 4)] and [round_up(M / 32, 4), round_up(K, 128)]
        row_scale_stride = (K // 32 + 3) // 4 * 4
        col_scale_stride = (K + 127) // 128 * 128
    k_tiles = tl.cdiv(K, BLOCK_K)
    local = (tl.program_id(0) - first).to(tl.int32)
    if STAGED:
        row_scales = row_scale_ptr + first * (BLOCK_M * BLOCK_K // 32)
    else:
        row_scales = row_scale_ptr + tl.load(table_ptr + 4 * MEMBERS + member)
    mx_tile(
        x_ptr + begin, row_data_ptr + begin, row_scales,
        col_data_ptr + begin, col_scale_ptr + tl.load(table_ptr + 5 * MEMBERS + member), M, K, K, row_scale_stride,
        col_scale_stride, local // k_tiles, local % k_tiles, FP8, MANTISSA_BITS, BIAS, MAX_CODE, MAX_VALUE,
        SIGN_SHIFT, SIGN_MASK, SUBNORMAL_ADDEND, PACK, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE,
        ZERO_BITS, ROWWISE, COLUMNWISE, TWO_D, SWIZZLED, STAGED, INPUT, BLOCK_M, BLOCK_K, EVEN,
    )  # fmt: skip


@device
def _member_of(table_ptr, row, n_members, pid, MEMBERS: tl.constexpr):
    """The member whose programs (``table`` row ``row``, cumulative) hold program ``pid``, and its first program."""
    index = tl.arange(0, MEMBERS)
    starts = tl.load(table_ptr + row * MEMBERS + index, mask=index <= n_members, other=1 << 62)
    member = tl.sum((starts <= pid).to(tl.int32), axis=0) - 1
    return member, tl.load(table_ptr + row * MEMBERS + member)


@device
def _amax_member(table_ptr, amax_bits_ptr, chunk, member, first, next_first, begin, end, running,
                 MEMBERS: tl.constexpr, ALIGN: tl.constexpr):  # fmt: skip
    """The member of ``chunk``, stepping up from ``member`` (chunks ``first .. next_first - 1``): each step
    records the running maxima of the member left by one atomic (none for an all-zero maximum: the bits start
    at 0) and restarts them.  Offsets are carried divided by ``ALIGN`` (a hint on a loop-carried value is lost)."""
    while chunk >= next_first:
        best = tl.max(running, axis=0)
        if best > 0.0:
            tl.atomic_max(amax_bits_ptr + member, best.to(tl.int32, bitcast=True))
        running = tl.zeros_like(running)
        member += 1
        first = next_first
        next_first = tl.load(table_ptr + MEMBERS + member + 1).to(tl.int32)
        begin = tl.load(table_ptr + member) // ALIGN
        end = tl.load(table_ptr + member + 1) // ALIGN
    return member, first, next_first, begin, end, running


@device
def _amax_chunk(x_ptr, chunk, first, begin, end, running, INPUT: tl.constexpr, BLOCK: tl.constexpr,
                ALIGN: tl.constexpr, EVEN: tl.constexpr, EVICTION: tl.constexpr):  # fmt: skip
    """The running elementwise maxima of ``|x|`` (NaN ignored) after chunk ``chunk`` of the member."""
    offsets = begin * ALIGN + (chunk - first).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        raw = tl.load(x_ptr + offsets, eviction_policy=EVICTION)
    else:
        raw = tl.load(x_ptr + offsets, mask=offsets < end * ALIGN, other=0, eviction_policy=EVICTION)
    _, bits = float32_bits(raw, INPUT)
    value = bits.to(tl.float32, bitcast=True)
    return tl.maximum(running, tl.where(value == value, tl.abs(value), 0.0))


def grouped_amax_kernel(
    x_ptr, amax_bits_ptr, table_ptr, chunks, kept_chunks, INPUT: tl.constexpr, BLOCK: tl.constexpr,
    MEMBERS: tl.constexpr, ALIGN: tl.constexpr, EVEN: tl.constexpr, STREAM: tl.constexpr,
):  # fmt: skip
    # Persistent programs stride over all members' chunks of BLOCK elements (each member's own: table row 1),
    # forward, so a program's member only grows; the last kept_chunks are loaded evict-last, the rest with the
    # STREAM policy.  One atomic per program and member.
    member = tl.program_id(0) * 0
    first = tl.program_id(0) * 0
    next_first = tl.load(table_ptr + MEMBERS + 1).to(tl.int32)
    begin = tl.load(table_ptr) // ALIGN
    end = tl.load(table_ptr + 1) // ALIGN
    running = tl.zeros([BLOCK], tl.float32)
    first_kept = chunks - kept_chunks
    for chunk in range(tl.program_id(0), first_kept, tl.num_programs(0)):
        member, first, next_first, begin, end, running = _amax_member(
            table_ptr, amax_bits_ptr, chunk, member, first, next_first, begin, end, running, MEMBERS, ALIGN
        )
        running = _amax_chunk(x_ptr, chunk, first, begin, end, running, INPUT, BLOCK, ALIGN, EVEN, STREAM)
    for chunk in range(first_kept + tl.program_id(0), chunks, tl.num_programs(0)):
        member, first, next_first, begin, end, running = _amax_member(
            table_ptr, amax_bits_ptr, chunk, member, first, next_first, begin, end, running, MEMBERS, ALIGN
        )
        running = _amax_chunk(x_ptr, chunk, first, begin, end, running, INPUT, BLOCK, ALIGN, EVEN, "evict_last")
    best = tl.max(running, axis=0)
    if best > 0.0:
        tl.atomic_max(amax_bits_ptr + member, best.to(tl.int32, bitcast=True))


def grouped_cast_kernel(
    x_ptr, data_ptr, columnwise_ptr, amax_bits_ptr, amax_ptr, scale_ptr, scale_inv_ptr, table_ptr, n_members,
    epsilon, value_for_inf, FP8_MAX: tl.constexpr, MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr, MAX_BITS: tl.constexpr, MAGIC: tl.constexpr, CORE: tl.constexpr, ROWWISE: tl.constexpr,
    COLWISE: tl.constexpr, INPUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, MEMBERS: tl.constexpr,
    ALIGN: tl.constexpr,
):  # fmt: skip
    if tl.program_id(0) == 0:  # every member's amax, scale and scale_inv
        index = tl.arange(0, MEMBERS)
        valid = index < n_members
        amaxes = tl.load(amax_bits_ptr + index, mask=valid, other=0).to(tl.float32, bitcast=True)
        scales = scale_from_amax(amaxes, epsilon, value_for_inf, FP8_MAX, MAX_BITS, False)
        tl.store(amax_ptr + index, amaxes, mask=valid)
        tl.store(scale_ptr + index, scales, mask=valid)
        tl.store(scale_inv_ptr + index, reciprocal(scales, False), mask=valid)
    pid = tl.program_id(0)
    member, first = _member_of(table_ptr, 4, n_members, pid, MEMBERS)
    begin, m, k = _member_dims(table_ptr, member, MEMBERS, ALIGN)
    amax = tl.load(amax_bits_ptr + member).to(tl.float32, bitcast=True)
    scale = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, False)
    local = (pid - first).to(tl.int32)
    k_tiles = tl.cdiv(k, BLOCK_K)
    rows = (local // k_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (local % k_tiles) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < m)[:, None] & (cols < k)[None, :]
    raw = tl.load(x_ptr + begin + rows.to(tl.int64)[:, None] * k + cols[None, :], mask=mask, other=0)
    _, bits = float32_bits(raw, INPUT)
    value = bits.to(tl.float32, bitcast=True)
    code = fp8_code(value * scale, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
    if ROWWISE:
        tl.store(data_ptr + begin + rows.to(tl.int64)[:, None] * k + cols[None, :], code, mask=mask)
    if COLWISE:
        where = begin + cols.to(tl.int64)[:, None] * m + rows[None, :]
        tl.store(columnwise_ptr + where, tl.trans(code), mask=tl.trans(mask))


@device
def _member_dims(table_ptr, member, MEMBERS: tl.constexpr, ALIGN: tl.constexpr):
    """The member's element offset (int64), M and K (int32) from table rows 0, 2 and 3, each a multiple of
    ALIGN (a hint: the compiler vectorises loads and stores of rows it knows to be aligned)."""
    begin = tl.multiple_of(tl.load(table_ptr + member), ALIGN)
    m = tl.multiple_of(tl.load(table_ptr + 2 * MEMBERS + member).to(tl.int32), ALIGN)
    k = tl.multiple_of(tl.load(table_ptr + 3 * MEMBERS + member).to(tl.int32), ALIGN)
    return begin, m, k


@device
def _nvfp4_member(table_ptr, amax_bits_ptr, tile, member, first, begin, m, k, offset, columnwise_offset, p0, p1,
                  MEMBERS: tl.constexpr):  # fmt: skip
    """The member of ``tile`` and its table entries, stepping down from ``member`` (whose first tile is
    ``first``): persistent programs walk the tiles in reverse, so a program's members only decrease, and
    a tile of the same member costs one comparison.  Returns the member, its first tile, element offset
    / 256, M / 16, K / 16, scale offsets / 512 (rowwise, columnwise) and ``p0, p1`` (TE rule, from its
    amax); empty members are stepped over (no tile falls in them).  The offsets and dims come divided by
    what divides them, so that the caller's products tell the compiler their alignment (vector loads and
    stores): a ``tl.multiple_of`` hint on a loop-carried value is lost (it has no defining operation)."""
    while tile < first:
        member -= 1
        first = tl.load(table_ptr + 4 * MEMBERS + member).to(tl.int32)
        begin = tl.load(table_ptr + member) // 256
        m = tl.load(table_ptr + 2 * MEMBERS + member).to(tl.int32) // 16
        k = tl.load(table_ptr + 3 * MEMBERS + member).to(tl.int32) // 16
        offset = tl.load(table_ptr + 5 * MEMBERS + member) // 512
        columnwise_offset = tl.load(table_ptr + 6 * MEMBERS + member) // 512
        _, p0, p1 = nvfp4_global_scales(tl.load(amax_bits_ptr + member).to(tl.float32, bitcast=True), 0)
    return member, first, begin, m, k, offset, columnwise_offset, p0, p1


def grouped_nvfp4_kernel(
    x_ptr, words_ptr, data_ptr, scales_ptr, columnwise_data_ptr, columnwise_scales_ptr, amax_bits_ptr, table_ptr,
    n_members, tiles, INPUT: tl.constexpr, ROWWISE: tl.constexpr, COLUMNWISE: tl.constexpr, TILE_2D: tl.constexpr,
    BM: tl.constexpr, BK: tl.constexpr, V: tl.constexpr, EVEN: tl.constexpr, SANITIZE: tl.constexpr,
    MEMBERS: tl.constexpr, STORE_EVICTION: tl.constexpr,
):  # fmt: skip
    # fast.quant.nvfp4's tile bodies on every member's tiles (table rows: 0 element offsets, 2 M, 3 K, 4 first
    # tiles, 5 and 6 scale offsets), persistent programs walking all tiles in reverse as that module's kernels do.
    # The tile is [BM, BK] elements of both operands (or the columnwise one), or, for the rowwise operand alone,
    # BM rows by BK / 16 blocks read as words.  A member's tiles of a columnwise operand are taken M first (the tile
    # bodies number them K first): tiles that write the two ends of a transposed row's 32-byte sector run side by
    # side (members whose M / 2 bytes are no multiple of 32 start transposed rows inside a sector).
    if ROWWISE and COLUMNWISE and tl.program_id(0) == 0:  # the columnwise amax of each member is its rowwise one
        index = tl.arange(0, MEMBERS)
        valid = index < n_members
        tl.store(amax_bits_ptr + n_members + index, tl.load(amax_bits_ptr + index, mask=valid), mask=valid)
    # Before the first tile: past the last member (scalar tensors, so that the loop carries fixed types).
    member = tl.program_id(0) * 0 + n_members
    first = tl.program_id(0) * 0 + tiles
    begin = tl.full([], 0, tl.int64)
    offset = tl.full([], 0, tl.int64)
    columnwise_offset = tl.full([], 0, tl.int64)
    m = tl.full([], 0, tl.int32)
    k = tl.full([], 0, tl.int32)
    p0 = tl.full([], 0.0, tl.float32)
    p1 = tl.full([], 0.0, tl.float32)
    for step in range(tl.program_id(0), tiles, tl.num_programs(0)):
        tile = tiles - 1 - step
        member, first, begin, m, k, offset, columnwise_offset, p0, p1 = _nvfp4_member(
            table_ptr, amax_bits_ptr, tile, member, first, begin, m, k, offset, columnwise_offset, p0, p1, MEMBERS
        )
        # Member dims are multiples of 16, offsets of 256 elements and of 512 scale bytes (TE's padded shapes).
        element = begin * 256
        byte = begin * 128
        rows = m * 16
        cols = k * 16
        scales = scales_ptr + offset * 512
        # The tile bodies' SAME_AMAX: one tensor amax for both operands.
        if COLUMNWISE:
            m_tiles = tl.cdiv(rows, BM)
            quantize_nvfp4_tile(
                x_ptr + element, (tile - first) % m_tiles * tl.cdiv(cols, BK) + (tile - first) // m_tiles, rows,
                cols, p0, p1, p0, p1, amax_bits_ptr, data_ptr + byte, scales,
                amax_bits_ptr, amax_bits_ptr, amax_bits_ptr, columnwise_data_ptr + byte,
                columnwise_scales_ptr + columnwise_offset * 512, amax_bits_ptr, amax_bits_ptr,
                (cols // 16 + 3) // 4 * 4, (rows // 16 + 3) // 4 * 4, INPUT, ROWWISE, True, TILE_2D, False, False, 0,
                0, 0, 0, False, BM, BK, EVEN, SANITIZE, True, STORE_EVICTION,
            )  # fmt: skip
        else:
            rowwise_nvfp4_tile(
                words_ptr + byte, amax_bits_ptr, tile - first, rows, cols, p0, p1, data_ptr + byte, scales,
                amax_bits_ptr, amax_bits_ptr, (cols // 16 + 3) // 4 * 4, INPUT, TILE_2D, False, 0, 0, 0, False, BM,
                BK // 16, V, EVEN, SANITIZE, STORE_EVICTION,
            )  # fmt: skip


def grouped_fp8_block_kernel(
    x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, table_ptr, n_members, epsilon,
    value_for_inf, FP8_MAX: tl.constexpr, POW2: tl.constexpr, MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr, MAX_BITS: tl.constexpr, MAGIC: tl.constexpr, CORE: tl.constexpr, TWO_D: tl.constexpr,
    ROWWISE: tl.constexpr, COLWISE: tl.constexpr, INPUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr, MEMBERS: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    # fast.quant.fp8_block's tile function on the member's tile: its [M, K], offsets and scale matrices from the table.
    member, first = _member_of(table_ptr, 1, n_members, tl.program_id(0), MEMBERS)
    begin, M, K = _member_dims(table_ptr, member, MEMBERS, ALIGN)
    x_ptr += begin
    data_ptr += begin
    columnwise_ptr += begin
    scale_inv_ptr += tl.load(table_ptr + 4 * MEMBERS + member)
    columnwise_scale_inv_ptr += tl.load(table_ptr + 5 * MEMBERS + member)
    if TWO_D:  # [ceil(M / 128), round4(ceil(K / 128))] and [ceil(K / 128), round4(ceil(M / 128))]
        scale_stride = (tl.cdiv(K, 128) + 3) // 4 * 4
        columnwise_scale_stride = (tl.cdiv(M, 128) + 3) // 4 * 4
    else:  # [ceil(K / 128), round4(M)] and [ceil(M / 128), round4(K)]
        scale_stride = (M + 3) // 4 * 4
        columnwise_scale_stride = (K + 3) // 4 * 4
    k_tiles = tl.cdiv(K, BLOCK_K)
    local = (tl.program_id(0) - first).to(tl.int32)
    block_tile(
        x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, local // k_tiles, local % k_tiles,
        M, K, scale_stride, columnwise_scale_stride, epsilon, value_for_inf, FP8_MAX, POW2, MANTISSA_BITS, BIAS,
        MAX_CODE, MAX_BITS, MAGIC, CORE, TWO_D, ROWWISE, COLWISE, INPUT, BLOCK_M, BLOCK_K, EVEN,
    )  # fmt: skip
