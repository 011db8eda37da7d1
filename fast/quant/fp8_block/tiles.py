"""FP8 blockwise tile bodies: tile loads and stores, the block amaxes, and :func:`quantize_tile` (one tile's scales
and codes of either or both copies), shared with ``fast.group``'s grouped kernel and the Gluon kernel."""

from __future__ import annotations

from fast._triton import device, device_modes, float32_bits, tl
from fast.quant.fp8 import fp8_code, reciprocal, scale_from_amax

# %% Compute kernel


@device
def _load_rows(x_ptr, rows, cols, M, K, INPUT: tl.constexpr, EVEN: tl.constexpr):
    """float32 values of ``x[rows][:, cols]`` (0 outside ``[M, K]``; EVEN: the tile lies inside, no mask)."""
    pointers = x_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :]
    in_range = (rows < M)[:, None] & (cols < K)[None, :]
    raw = tl.load(pointers) if EVEN else tl.load(pointers, mask=in_range, other=0)
    _, bits = float32_bits(raw, INPUT)
    return bits.to(tl.float32, bitcast=True)


@device
def _store_tile(pointers, code, first, second, first_size, second_size, EVEN: tl.constexpr):
    """Store ``code`` at ``pointers`` (a 2-D tile whose axes run over ``first`` and ``second``), masked unless EVEN."""
    if EVEN:
        tl.store(pointers, code)
    else:
        tl.store(pointers, code, mask=(first < first_size)[:, None] & (second < second_size)[None, :])


@device
def _amax_interpreted(value, AXIS: tl.constexpr):
    """:func:`_amax` under the interpreter: ``|value|`` with NaN as 0, then the maximum."""
    return tl.max(tl.where(value == value, tl.abs(value), 0.0), axis=AXIS)


@device_modes(interpreted=_amax_interpreted)
def _amax(value, AXIS: tl.constexpr):
    """Block maxima of ``|value|`` along AXIS, NaN ignored (missing elements load as 0; an all-NaN block gives 0).

    Compiled: ``max.f32`` of ``|x|`` (a NaN operand loses; the absolute value is a free operand modifier, so no
    magnitude tensor is kept in registers), then ``max.f32`` with 0, which takes an all-NaN block's NaN to 0.
    Interpreted: :func:`_amax_interpreted` (NumPy's maximum propagates NaN).
    """
    return tl.maximum(tl.max(tl.abs(value), axis=AXIS), 0.0)


@device
def quantize_tile(
    x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, pid_m, pid_k, M, K, SCALE_STRIDE,
    COLUMNWISE_SCALE_STRIDE, epsilon, value_for_inf, FP8_MAX: tl.constexpr, POW2: tl.constexpr,
    MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr, MAX_BITS: tl.constexpr,
    MAGIC: tl.constexpr, CORE: tl.constexpr, TWO_D: tl.constexpr, ROWWISE: tl.constexpr, COLWISE: tl.constexpr,
    INPUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    """Every output of tile ``(pid_m, pid_k)`` of ``x`` ``[M, K]`` (the kernel's arguments, module docstring).

    The tile is read once; every output (rowwise and columnwise codes, their scales) comes from its registers.
    ``fast.group``'s grouped kernel calls this on each member's tiles with the member's pointers and strides.
    """
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    value = _load_rows(x_ptr, rows, cols, M, K, INPUT, EVEN)
    data_ptrs = data_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :]
    if TWO_D:  # one scale for the tile
        amax = tl.max(_amax(value, 1), axis=0)
        scale = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
        code = fp8_code(value * scale, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
        inverse = reciprocal(scale, POW2)
        if ROWWISE:
            _store_tile(data_ptrs, code, rows, cols, M, K, EVEN)
            tl.store(scale_inv_ptr + pid_m * SCALE_STRIDE + pid_k, inverse)
        if COLWISE:
            tl.store(columnwise_scale_inv_ptr + pid_k * COLUMNWISE_SCALE_STRIDE + pid_m, inverse)
    else:
        if ROWWISE:  # 1x128 blocks along the rows
            row_scale = scale_from_amax(_amax(value, 1), epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
            row_code = fp8_code(value * row_scale[:, None], MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
            _store_tile(data_ptrs, row_code, rows, cols, M, K, EVEN)
            row_inverse = reciprocal(row_scale, POW2)
            if EVEN:
                tl.store(scale_inv_ptr + pid_k * SCALE_STRIDE + rows, row_inverse)
            else:
                tl.store(scale_inv_ptr + pid_k * SCALE_STRIDE + rows, row_inverse, mask=rows < M)
        if COLWISE:  # 128x1 blocks down the columns
            scale = scale_from_amax(_amax(value, 0), epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
            code = fp8_code(value * scale[None, :], MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
            inverse = reciprocal(scale, POW2)
            if EVEN:
                tl.store(columnwise_scale_inv_ptr + pid_m * COLUMNWISE_SCALE_STRIDE + cols, inverse)
            else:
                tl.store(columnwise_scale_inv_ptr + pid_m * COLUMNWISE_SCALE_STRIDE + cols, inverse, mask=cols < K)
    if COLWISE:  # stored transposed: the column blocks run along the rows of columnwise_data
        column_ptrs = columnwise_ptr + cols.to(tl.int64)[:, None] * M + rows[None, :]
        _store_tile(column_ptrs, tl.trans(code), cols, rows, K, M, EVEN)
