"""NVFP4 tile bodies of the rowwise operand: amaxes, the tensor and block scales, one ``[BM, BK]`` tile's E2M1 codes
(:func:`quantize_block_tile`) and the flat rowwise tile (:func:`rowwise_tile`), shared by the single kernels,
``fast.group``'s grouped kernels and the Gluon columnwise kernel."""

from __future__ import annotations

from fast._triton import (
    device,
    tl,
)
from fast.quant.nvfp4.rounding import e2m1_pairs, e2m1_stochastic, e4m3_scale, full_like, reciprocal_rn
from fast.quant.nvfp4.settings import E4M3_MAX_CONSTEXPR


@device
def _max_propagating_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@device
def abs_max(values, axis: tl.constexpr, RULE: tl.constexpr, SANITIZE: tl.constexpr):
    """``max |v|`` along ``axis``: NaN ignored and at least 0 (TE's ``fmaxf`` from 0), or NaN-propagating (torchao).

    ``SANITIZE`` (the interpreter): NaN magnitudes are zeroed first, because NumPy's ``nanmax`` (which
    the interpreter runs for ``tl.max``) mishandles signalling NaNs; on the GPU ``max.f32`` ignores every NaN.
    """
    magnitude = tl.abs(values)
    if SANITIZE:
        nan = magnitude != magnitude
        largest = tl.maximum(tl.max(tl.where(nan, 0.0, magnitude), axis=axis), 0.0)
        if RULE == 0:
            return largest
        # torchao: NaN if any (a custom combine function would run element by element in the interpreter)
        return tl.where(tl.max(nan.to(tl.int32), axis=axis) != 0, float("nan"), largest)
    if RULE == 0:
        return tl.maximum(tl.max(magnitude, axis=axis), 0.0)
    return tl.reduce(magnitude, axis, _max_propagating_nan)


@device
def _word_halves(words, INPUT: tl.constexpr):
    """float32 values of the two elements a word holds: element ``2i`` (low half) and ``2i + 1``.

    A word is an int32 (two bfloat16 or float16 elements) or an int64 (two float32 elements); bfloat16
    widens by bit shifts (Triton's interpreter flushes bfloat16 subnormals in ``.to(tl.float32)``),
    float16 by the exact conversion.
    """
    if INPUT == 0:
        lo = words.to(tl.int32)
        hi = (words >> 32).to(tl.int32)
    elif INPUT == 1:
        lo = words << 16
        hi = words & -65536  # 0xFFFF0000
    else:
        lo = (words & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32).to(tl.int32, bitcast=True)
        hi = (words >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32).to(tl.int32, bitcast=True)
    return lo.to(tl.float32, bitcast=True), hi.to(tl.float32, bitcast=True)


@device
def _random_halves(words, RANDOM_BITS: tl.constexpr):
    """The random bits of the two elements of each word: uint8 pairs in an int16, uint32 pairs in an int64."""
    if RANDOM_BITS == 8:
        both = words.to(tl.int32)
        lo, hi = both & 255, (both >> 8) & 255
    else:  # an explicit branch: the constexpr `if` prunes it, so int16 words never meet a 32-bit shift
        lo, hi = words.to(tl.int32), (words >> 32).to(tl.int32)
    return lo, hi


@device
def global_scales(amax, RULE: tl.constexpr):
    """``(tensor_scale, p0, p1)`` from the amax: TE ``(S_dec, fl32(S_enc * fl32(1/6)), S_dec)``,
    torchao ``(pts, pts, fl32(1 / pts))``."""
    if RULE == 0:
        encode = tl.minimum(tl.div_rn(full_like(amax, 2688.0), amax), 3.4028234663852886e38)
        encode = tl.where((amax == 0.0) | (encode == 0.0), 1.0, encode)
        decode = tl.div_rn(full_like(encode, 1.0), encode)
        return decode, encode * 0.1666666716337204, decode
    # torchao: amax / 2688 on the CPU, amax * fl32(1/2688) on CUDA.
    pts = tl.div_rn(amax, full_like(amax, 2688.0)) if RULE == 1 else amax * 0.00037202381645329297
    return pts, pts, tl.div_rn(full_like(pts, 1.0), pts)


@device
def block_scale(block_amax, p0, p1, RULE: tl.constexpr, ZERO_ENC: tl.constexpr):
    """``(E4M3 code, encode scale)`` of each block from its float32 amax and the operand's ``p0, p1``."""
    if RULE == 0:
        target = tl.minimum(block_amax * p0, 3.4028234663852886e38)
    else:
        scaled = tl.div_rn(block_amax, full_like(block_amax, 6.0)) if RULE == 1 else block_amax * 0.1666666716337204
        ratio = tl.div_rn(scaled, tl.broadcast_to(p0, scaled.shape))
        target = tl.where(ratio != ratio, ratio, tl.minimum(tl.maximum(ratio, 0.015625), E4M3_MAX_CONSTEXPR))
    code, scale = e4m3_scale(target)
    if RULE == 0:
        encode = tl.minimum(reciprocal_rn(scale * p1), 3.4028234663852886e38)
        if ZERO_ENC:
            encode = tl.where(scale == 0.0, 0.0, encode)
    else:
        encode = tl.div_rn(tl.broadcast_to(p1, scale.shape), scale)
    return code, encode


@device
def operand_scales(source_ptr, n_sources, amax_ptr, tensor_scale_ptr, RULE: tl.constexpr, SOURCES: tl.constexpr):
    """``(p0, p1)`` of the per-tensor amax: the largest of the ``n_sources`` int32 bit patterns at ``source_ptr``
    (``SOURCES``, a power of two, at least ``n_sources``; as int32, non-negative floats order like their bits and a
    NaN's come above Inf's, as with ``atomic_max``): a given amax, or the flat amax pass's per-program maxima.
    Program 0 writes the tensor scale, and the amax bits to ``amax_ptr``: the output's amax (a given one's copy:
    no launch of its own, which would cost about a tenth of a given-amax call), or the same bits back in place after
    an ``atomic_max`` amax pass."""
    i = tl.arange(0, SOURCES)
    bits = tl.max(tl.load(source_ptr + i, mask=i < n_sources, other=0), axis=0)
    tensor_scale, p0, p1 = global_scales(bits.to(tl.float32, bitcast=True), RULE)
    tl.store(tensor_scale_ptr, tensor_scale, mask=tl.program_id(0) == 0)
    tl.store(amax_ptr, bits, mask=tl.program_id(0) == 0)
    return p0, p1


@device
def whole_tile(row0, col0, n_rows, n_cols, BR: tl.constexpr, BC: tl.constexpr):
    """Whether the ``[BR, BC]`` tile at ``(row0, col0)`` lies inside ``[n_rows, n_cols]`` (needs no masks)."""
    return (row0 + BR <= n_rows) & (col0 + BC <= n_cols)


@device
def quantize_block_tile(
    # the operand tile and where it sits
    values,
    row0,
    col0,
    n_rows,
    n_cols,
    scale_stride,
    # per-tensor scale parameters (unused for ROW_AMAX) and pointers of this operand
    p0,
    p1,
    amax_ptr,
    random_ptr,
    data_ptr,
    scales_ptr,
    tensor_scale_ptr,
    # tile shape and variant
    BR: tl.constexpr,
    BC: tl.constexpr,
    EVEN: tl.constexpr,
    TILE_2D: tl.constexpr,
    ROW_AMAX: tl.constexpr,
    ROUNDING: tl.constexpr,
    RANDOM_BITS: tl.constexpr,
    RULE: tl.constexpr,
    ZERO_ENC: tl.constexpr,
    SANITIZE: tl.constexpr,
    STORE_EVICTION: tl.constexpr,
):
    """Scales, codes and packed bytes of one ``[BR, BC]`` tile of an ``[n_rows, n_cols]`` operand whose scale rows
    are ``scale_stride`` bytes apart (``n_cols / 16``, or TE's padded ``round_up(n_cols / 16, 4)``).

    ``EVEN``: the operand is a whole number of tiles, so nothing is masked; else the masks compare the stored units
    (bytes, blocks) of 16-element steps (``n_rows``, ``n_cols``, ``row0``, ``col0`` are multiples of 16), a form
    Triton's alignment analysis sees constant over a vector of bytes (``col0 + 2 * d < n_cols`` made every byte a store
    of its own, and cost registers in ``fast.group``'s grouped kernel).  Round to nearest is :func:`e2m1_pairs`'s.
    Returns the packed bytes ``[BR, BC / 2]`` and the E4M3 scale codes (``[BR / 16, BC / 16]`` with ``TILE_2D``, else
    ``[BR, BC / 16]``), which the transposed operand of 16 x 16 tiles shares.
    """
    r = tl.arange(0, BR)
    c = tl.arange(0, BC)
    row_ok = (row0 + r) < n_rows
    row_base = row0.to(tl.int64)
    if ROW_AMAX:
        amax = tl.load(amax_ptr + row0 + r, mask=row_ok, other=0).to(tl.float32, bitcast=True)
        tensor_scale, row_p0, row_p1 = global_scales(amax, RULE)
        # A vector mask and a scalar condition are combined as vectors: the interpreter rejects the mix.
        tl.store(tensor_scale_ptr + row0 + r, tensor_scale, mask=row_ok & ((r * 0 + col0) == 0))
        p0 = row_p0[:, None]
        p1 = row_p1[:, None]

    # Block amax, block scale, encode scale.
    blocks = abs_max(tl.reshape(values, [BR, BC // 16, 16]), 2, RULE, SANITIZE)
    if TILE_2D:  # one scale per 16 x 16 tile (no row amax with these), stored on each of its rows
        tiles = abs_max(tl.reshape(blocks, [BR // 16, 16, BC // 16]), 1, RULE, SANITIZE)
        tile_code, tile_encode = block_scale(tiles, p0, p1, RULE, ZERO_ENC)
        code = tl.reshape(tl.broadcast_to(tile_code[:, None, :], [BR // 16, 16, BC // 16]), [BR, BC // 16])
        encode = tl.reshape(tl.broadcast_to(tile_encode[:, None, :], [BR // 16, 16, BC // 16]), [BR, BC // 16])
    else:
        code, encode = block_scale(blocks, p0, p1, RULE, ZERO_ENC)
        tile_code = code
    s = tl.arange(0, BC // 16)
    s_pointers = scales_ptr + row_base * scale_stride + (r[:, None] * scale_stride + (col0 // 16 + s)[None, :])
    if EVEN:
        tl.store(s_pointers, code.to(tl.uint8), eviction_policy=STORE_EVICTION)
    else:
        tl.store(
            s_pointers,
            code.to(tl.uint8),
            mask=row_ok[:, None] & ((col0 // 16 + s) < n_cols // 16)[None, :],
            eviction_policy=STORE_EVICTION,
        )

    # Elements.
    scaled = tl.reshape(tl.reshape(values, [BR, BC // 16, 16]) * encode[:, :, None], [BR, BC])
    if ROUNDING == 0:
        low, high = tl.split(tl.reshape(scaled, [BR, BC // 2, 2]))
        packed = e2m1_pairs(low, high)
    else:
        e_pointers = random_ptr + row_base * n_cols + (r[:, None] * n_cols + (col0 + c)[None, :])
        if EVEN:
            random = tl.load(e_pointers)
        else:
            random = tl.load(e_pointers, mask=row_ok[:, None] & ((col0 + c) < n_cols)[None, :], other=0)
        q = e2m1_stochastic(scaled, random.to(tl.int32), RANDOM_BITS)
        low, high = tl.split(tl.reshape(q, [BR, BC // 2, 2]))
        packed = (low + (high << 4)).to(tl.uint8)
    d = tl.arange(0, BC // 2)
    d_pointers = data_ptr + row_base * (n_cols // 2) + (r[:, None] * (n_cols // 2) + (col0 // 2 + d)[None, :])
    if EVEN:
        tl.store(d_pointers, packed, eviction_policy=STORE_EVICTION)
    else:
        tl.store(
            d_pointers,
            packed,
            mask=row_ok[:, None] & ((col0 // 2 + d) < n_cols // 2)[None, :],
            eviction_policy=STORE_EVICTION,
        )
    return packed, tile_code


@device
def sanitized_magnitude(values, RULE: tl.constexpr, SANITIZE: tl.constexpr):
    """``|v|``, NaN zeroed for TE in the interpreter (NumPy's ``fmax`` mishandles signalling NaNs)."""
    magnitude = tl.abs(values)
    if RULE == 0 and SANITIZE:
        magnitude = tl.where(magnitude == magnitude, magnitude, 0.0)
    return magnitude


@device
def max2(a, b, RULE: tl.constexpr):
    if RULE == 0:
        return tl.maximum(a, b)
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@device
def amax_chunk(
    words_ptr,
    n_words,
    chunk,
    running,
    INPUT: tl.constexpr,
    RULE: tl.constexpr,
    CHUNK: tl.constexpr,
    EVEN: tl.constexpr,
    SANITIZE: tl.constexpr,
    EVICTION: tl.constexpr,
):
    """The running elementwise maxima after one chunk of ``CHUNK`` words."""
    start = tl.cast(chunk, tl.int64) * CHUNK
    w = tl.arange(0, CHUNK)
    if EVEN:
        words = tl.load(words_ptr + start + w, eviction_policy=EVICTION)
    else:
        limit = tl.minimum(n_words - start, CHUNK).to(tl.int32)
        words = tl.load(words_ptr + start + w, mask=w < limit, other=0, eviction_policy=EVICTION)
    lo, hi = _word_halves(words, INPUT)
    return max2(
        running, max2(sanitized_magnitude(lo, RULE, SANITIZE), sanitized_magnitude(hi, RULE, SANITIZE), RULE), RULE
    )


@device
def rowwise_tile(
    # the input and the random bits as words (two elements each), the tile (row-major order of [BR, NB * 16]
    # element tiles) and x's dims
    words_ptr,
    random_ptr,
    tile,
    M,
    K,
    # per-tensor scale parameters (global_scales), unused for ROW_AMAX
    p0,
    p1,
    # outputs; bytes between the rows of the scales: K / 16, or TE's padded round_up(K / 16, 4)
    data_ptr,
    scales_ptr,
    amax_ptr,
    tensor_scale_ptr,
    scale_stride,
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
    STORE_EVICTION: tl.constexpr,
):
    """The rowwise operand of one tile of ``BR`` rows by ``NB`` blocks of 16: the rowwise kernel's tile body, also
    run by ``fast.group``'s grouped kernel on each member's tiles (pointers at the member, its padded scale
    stride, its ``p0, p1``).

    A tile is ``[BR, NB, 8 / V, V]`` words in memory order (``V`` words, 16 bytes, per load): element ``2i`` of a word
    in its low half, ``2i + 1`` in its high half, and byte ``i`` of the packed data is word ``i``, so the data is stored
    with the input's offsets.  Triton lays the last axis out within a thread and consecutive threads along the next
    ones, so a warp's loads and stores are contiguous; a block's ``8 / V`` pieces sit in neighbouring threads, which
    exchange their maxima by shuffles and each compute the block's scales.  (One thread per block, with the pieces as
    the outer axis, needs no shuffle but makes every warp load touch twice the cache lines, which was slower.)
    ``STORE_EVICTION``: the L2 hint of the data and scale stores, as :func:`quantize_tile`'s.
    """
    KW = K // 2
    KB = K // 16
    tiles_k = tl.cdiv(KB, NB)
    h = tl.arange(0, 8 // V)[None, None, :, None]
    r = tl.arange(0, BR)
    b = tl.arange(0, NB)
    j = tl.arange(0, V)[None, None, None, :]
    row0 = (tile // tiles_k) * BR
    blk0 = (tile % tiles_k) * NB
    row_ok = (row0 + r) < M
    ok = row_ok[:, None] & ((blk0 + b) < KB)[None, :]
    offsets = r[:, None, None, None] * KW + (8 * (blk0 + b))[None, :, None, None] + h * V + j
    row_base = row0.to(tl.int64) * KW
    if EVEN:
        words = tl.load(words_ptr + row_base + offsets, eviction_policy="evict_first")
    else:
        words = tl.load(
            words_ptr + row_base + offsets, mask=ok[:, :, None, None], other=0, eviction_policy="evict_first"
        )
    lo, hi = _word_halves(words, INPUT)

    # Block amax, block scale, encode scale.
    pair = max2(sanitized_magnitude(lo, RULE, SANITIZE), sanitized_magnitude(hi, RULE, SANITIZE), RULE)
    blocks = abs_max(abs_max(pair, 3, RULE, SANITIZE), 2, RULE, SANITIZE)
    if TILE_2D:
        tiles_2d = abs_max(tl.reshape(blocks, [BR // 16, 16, NB]), 1, RULE, SANITIZE)
        blocks = tl.reshape(tl.broadcast_to(tiles_2d[:, None, :], [BR // 16, 16, NB]), [BR, NB])
    if ROW_AMAX:
        amax = tl.load(amax_ptr + row0 + r, mask=row_ok, other=0).to(tl.float32, bitcast=True)
        tensor_scale, row_p0, row_p1 = global_scales(amax, RULE)
        # A vector mask and a scalar condition are combined as vectors: the interpreter rejects the mix.
        tl.store(tensor_scale_ptr + row0 + r, tensor_scale, mask=row_ok & ((r * 0 + blk0) == 0))
        code, encode = block_scale(blocks, row_p0[:, None], row_p1[:, None], RULE, ZERO_ENC)
    else:
        code, encode = block_scale(blocks, p0, p1, RULE, ZERO_ENC)
    s_pointers = scales_ptr + row0.to(tl.int64) * scale_stride + (r[:, None] * scale_stride + (blk0 + b)[None, :])
    if EVEN:
        tl.store(s_pointers, code.to(tl.uint8), eviction_policy=STORE_EVICTION)
    else:
        tl.store(s_pointers, code.to(tl.uint8), mask=ok, eviction_policy=STORE_EVICTION)

    # Elements: codes of fl32(v * enc), two per byte.
    enc = encode[:, :, None, None]
    if ROUNDING == 0:
        packed = e2m1_pairs(lo * enc, hi * enc)
    else:
        if EVEN:
            random = tl.load(random_ptr + row_base + offsets)
        else:
            random = tl.load(random_ptr + row_base + offsets, mask=ok[:, :, None, None], other=0)
        r_lo, r_hi = _random_halves(random, RANDOM_BITS)
        q_lo = e2m1_stochastic(lo * enc, r_lo, RANDOM_BITS)
        q_hi = e2m1_stochastic(hi * enc, r_hi, RANDOM_BITS)
        packed = (q_lo + (q_hi << 4)).to(tl.uint8)
    if EVEN:
        tl.store(data_ptr + row_base + offsets, packed.to(tl.uint8), eviction_policy=STORE_EVICTION)
    else:
        tl.store(
            data_ptr + row_base + offsets,
            packed.to(tl.uint8),
            mask=ok[:, :, None, None],
            eviction_policy=STORE_EVICTION,
        )
