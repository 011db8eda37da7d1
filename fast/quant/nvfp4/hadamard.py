"""NVFP4's 16-point Hadamard transform of tile columns (TE's random Hadamard transform, RHT): the float32
butterflies of :func:`hadamard_16_sums` and the bfloat16-rounded result of :func:`hadamard_16_columns`."""

from __future__ import annotations

from fast._triton import device, tl
from fast.quant.nvfp4.rounding import bfloat16_rne

__all__ = ["hadamard_16_columns", "hadamard_16_sums"]


@device
def hadamard_16_columns(values, BM: tl.constexpr, BK: tl.constexpr):
    """TE's random Hadamard transform of each 16-row chunk of the columns of float32 ``values [BM, BK]`` (the
    columnwise operand ``values.T``, transformed along its rows): :func:`hadamard_16_sums` rounded to bfloat16
    (:func:`bfloat16_rne`), returned as float32 ``[BM, BK]``."""
    return bfloat16_rne(hadamard_16_sums(values, BM, BK))


@device
def hadamard_16_sums(values, BM: tl.constexpr, BK: tl.constexpr):
    """:func:`hadamard_16_columns` before its rounding: terms ``s_i v_i / 4``, float32 butterflies ``h = 1, 2, 4,
    8``.  The butterfly partners are combined by sums over an axis of 2, so the tile stays in the threads that hold
    it.  The amax pass takes the maximum of these magnitudes and rounds it once: rounding to nearest is monotonic and
    symmetric, so the largest rounded magnitude is the rounded largest one."""
    lane = tl.arange(0, 16)
    signs = tl.where(((0xD7E8 >> lane) & 1) != 0, -0.25, 0.25)  # RHT_SIGN_MASK (kernels read no globals)
    v = tl.reshape(values, [BM // 16, 16, BK]) * signs[None, :, None]
    v = _column_butterfly(v, BM, BK, 1)
    v = _column_butterfly(v, BM, BK, 2)
    v = _column_butterfly(v, BM, BK, 4)
    v = _column_butterfly(v, BM, BK, 8)
    return tl.reshape(v, [BM, BK])


@device
def _column_butterfly(v, BM: tl.constexpr, BK: tl.constexpr, H: tl.constexpr):
    """One float32 butterfly stage on axis 1 (16) of ``v [BM / 16, 16, BK]``: ``v[i], v[i + H] -> v[i] + v[i + H],
    v[i] - v[i + H]``.  The partners are picked out of the axis of 2 as int32 bits by integer sums (``x + 0`` is
    ``x``) and added as floats elementwise: a float reduction over the pair may start from +0 (NumPy's does, so
    Triton's interpreter's; a GPU run gave +0 too), which turns ``-0 + -0`` into +0.  The sums keep the tile's
    layout, which ``tl.split`` and ``tl.join`` do not (Triton converted the tile through shared memory, with many
    more barriers a tile)."""
    pairs = tl.reshape(v, [BM // 16 * (8 // H), 2, H, BK]).to(tl.int32, bitcast=True)
    first = (tl.arange(0, 2) == 0)[None, :, None, None]
    a = tl.sum(tl.where(first, pairs, 0), axis=1).to(tl.float32, bitcast=True)[:, None, :, :]
    b = tl.sum(tl.where(first, 0, pairs), axis=1).to(tl.float32, bitcast=True)[:, None, :, :]
    return tl.reshape(tl.where(first, a + b, a - b), [BM // 16, 16, BK])
