"""MX quantization (contract ``quant.mx``): one fused Triton kernel for CUDA, torch ops elsewhere.

Contract
--------
``x`` (float32, bfloat16 or float16, at least 2-D, leading dimensions flattened into ``M``) is cut
into blocks of 32 -- 1x32 along K (rowwise), 32x1 along M (columnwise) or 32x32 tiles (``blocks="2d"``)
-- and each block gets an E8M0 scale byte ``s`` from its ``amax`` by ``scale_rule`` (``floor``
``E - emax``, ``ceil`` ``E + (M != 0) - emax``, ``even`` after rounding ``amax`` at the element
precision, ``rceil`` ``fl32(amax * fl32(1 / max))`` rounded up to a power of two), clamped to
0..254, with NaN and Inf per ``edges``.  Each element is the saturating round-to-nearest-even code
of ``fl32(x * 2**(127 - s))``.  ``specs/quant/mx.yaml`` has every parameter and its sources;
``reference/quant/mx.py`` is the contract in NumPy.

Layouts
-------
Data keeps ``x``'s layout (columnwise data is *not* transposed, as TransformerEngine's MXFP8): FP8 one
code per byte, FP6 one code per byte (low 6 bits), FP4 two per byte along K, element ``2i`` in the
low nibble.  Scales have TransformerEngine's padded shapes: rowwise ``[round_up(M, 128),
round_up(K / 32, 4)]``, columnwise ``[round_up(M / 32, 4), round_up(K, 128)]``; ``compact`` is the
row-major matrix, ``swizzled`` the cuBLAS 128x4 layout (``fast/layout.py``; the columnwise matrix is
swizzled as its transpose ``[K, M / 32]``) written by the kernel directly.  Padding bytes are zero in
both layouts (the contract leaves them free in ``compact``).

The kernel
----------
One program reads one ``BLOCK_M x BLOCK_K`` tile of ``x`` once and writes everything asked of it: the
block maxima (an integer max over float32 magnitude bits, so NaN handling is explicit: ``te`` zeroes
NaN magnitudes first, the torchao variants let them win), the scale bytes, the reciprocal ``2**(127
- s)`` as float32 bits, the scaled values (one float32 multiply, exact: a power of two), the codes,
FP4 packing, and the scale bytes at their compact or swizzled offsets; rowwise and columnwise
outputs come from the same registers.

Codes come from :func:`mx_code`, a rounding core specialised for scaled MX values, with a constant
shift instead of the general core's per-element one (``fast._triton.round_to_code``, about 26
integer instructions per element, which keeps a bfloat16 cast at two thirds of the copy bandwidth):

- ``|v| >= 2**(1 - bias)`` (a normal code): rebias the float32 bits in place and round away the
  ``23 - m`` low mantissa bits to nearest even, ``(b - ((127 - bias) << 23) + 2**(22 - m) - 1 +
  odd) >> (23 - m)``; a carry moves into the exponent, and overflow counts on past the largest
  code, so ``min(code, max_code)`` saturates (Inf included);
- ``|v| < 2**(1 - bias)`` (a subnormal code): ``t = |v| + 2**(24 - bias - m)``, a float32 add whose
  result's last place is the subnormal step ``2**(1 - bias - m)``: IEEE rounds the exact ``|v|`` to
  nearest even once, and ``bits(t) - bits(2**(24 - bias - m))`` is the code (reaching the smallest
  normal code when it rounds up);
- the sign comes from the input's own bits; NaN is the kernel's business, from the input: under ``te``
  a NaN element gives ``NAN_CODE`` whatever its sign (the canonical NaN's code, as on the GPU), under the
  torchao edges its whole block has scale 0xFF and codes 0.

Both branches round the exact value of ``v`` exactly once, so the codes equal ``cast.fp8`` /
``cast.fp6`` / ``cast.fp4`` of ``v`` for every non-NaN input (``tests/fast/test_fast_mx.py`` checks
every bfloat16 value and random float32 ones against ``reference.cast``, in the interpreter;
``tests/gpu/test_gpu_mx.py`` compiled).

Paths
-----
``QCONFORM_FAST_PATH`` chooses per call, as in ``fast/cast.py``: ``auto`` (the kernel for CUDA
tensors when Triton is importable, else torch), ``triton`` (always; CPU tensors need
``TRITON_INTERPRET=1``), ``torch``.  The torch path composes ``fast.cast``, ``fast.pack`` and
``fast.layout`` with the scale arithmetic in torch integer ops.  This module imports without Triton
and queries no device at import time.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import torch

import fast.cast
import fast.layout
import fast.pack
from fast._triton import device, float32_bits, jit, tl, triton
from fast.layout import swizzled_offset

__all__ = [
    "BLOCKS",
    "BLOCK_SIZE",
    "EDGES",
    "MX_FORMATS",
    "SCALE_LAYOUTS",
    "SCALE_RULES",
    "USAGES",
    "bench",
    "mx",
    "mx_code",
    "mx_reciprocal",
    "mx_scale_byte",
]

BLOCK_SIZE = 32
MX_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
SCALE_RULES: tuple[str, ...] = ("floor", "rceil", "ceil", "even")
USAGES: tuple[str, ...] = ("rowwise", "columnwise", "both")
BLOCKS: tuple[str, ...] = ("1d", "2d")
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
EDGES: tuple[str, ...] = ("te", "torchao", "torchao_018")

_PATH_ENV = "QCONFORM_FAST_PATH"
_INPUT_IDS: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_RULE_IDS: dict[str, int] = {"floor": 0, "ceil": 1, "even": 2, "rceil": 3}
_EDGE_IDS: dict[str, int] = {"te": 0, "torchao": 1, "torchao_018": 2}
_F32_INF = 0x7F800000
_E8M0_MAX = 254
_E8M0_NAN = 255


class _Format(NamedTuple):
    """An MX element format: bit fields, its largest finite code and value, and ``emax = floor(log2 max)``."""

    bits: int
    mantissa_bits: int
    bias: int
    max_code: int
    max_value: float
    emax: int

    @property
    def nan_code(self) -> int:
        """Code of a NaN element: FP8 ``0x7F`` (all magnitude bits), FP6/FP4 (no NaN) ``+max``."""
        return (1 << (self.bits - 1)) - 1 if self.bits == 8 else self.max_code

    @property
    def reciprocal_of_max(self) -> float:
        """``fl32(1 / max)`` (a Python float holding the float32 value)."""
        return float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(self.max_value, dtype=torch.float32))


_FORMATS: dict[str, _Format] = {
    # OCP OFP8 / MX v1.0: max 448 (0x7E), 57344 (0x7B), 7.5 (0x1F), 28 (0x1F), 6 (0x7).
    "float8_e4m3fn": _Format(8, 3, 7, 0x7E, 448.0, 8),
    "float8_e5m2": _Format(8, 2, 15, 0x7B, 57344.0, 15),
    "float6_e2m3fn": _Format(6, 3, 1, 0x1F, 7.5, 2),
    "float6_e3m2fn": _Format(6, 2, 3, 0x1F, 28.0, 4),
    "float4_e2m1fn": _Format(4, 1, 1, 0x7, 6.0, 2),
}


class _Plan(NamedTuple):
    """Everything one call needs besides its tensors (checked parameters and derived sizes)."""

    fmt: _Format
    rule: str
    edges: str
    rowwise: bool
    columnwise: bool
    two_d: bool
    swizzled: bool
    rows: int
    cols: int

    @property
    def zero_reciprocal_bits(self) -> int:
        """float32 bits of the reciprocal of scale byte 0: ``2**127``, or torchao 0.18's ``2**126`` / ``1.0``."""
        if self.edges != "torchao_018":
            return 254 << 23
        return 127 << 23 if self.rule == "rceil" else 253 << 23

    @property
    def row_scale_shape(self) -> tuple[int, int]:
        return _round_up(self.rows, 128), _round_up(self.cols // BLOCK_SIZE, 4)

    @property
    def col_scale_shape(self) -> tuple[int, int]:
        return _round_up(self.rows // BLOCK_SIZE, 4), _round_up(self.cols, 128)


# %% Device functions


@device
def mx_scale_byte(
    amax,
    EMAX: tl.constexpr,
    EVEN_ADD: tl.constexpr,
    RULE: tl.constexpr,
    EDGES: tl.constexpr,
    RCEIL_OPERAND: tl.constexpr,
    RCEIL_DIVIDE: tl.constexpr,
):
    """int32 E8M0 byte of block maxima ``amax`` (float32 magnitude bits, NaN patterns allowed).

    RULE 0 floor, 1 ceil, 2 even, 3 rceil (``amax * RCEIL_OPERAND``, or ``amax / RCEIL_OPERAND`` if
    RCEIL_DIVIDE); EDGES 0 te (Inf -> 254), 1 torchao (NaN, Inf -> 255), 2 torchao_018 (NaN -> 255).
    """
    if RULE == 3:
        value = amax.to(tl.float32, bitcast=True)
        descale = tl.math.div_rn(value, RCEIL_OPERAND) if RCEIL_DIVIDE else value * RCEIL_OPERAND
        bits = descale.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        exponent = bits >> 23
        mantissa = bits & 0x7FFFFF
        byte = exponent + tl.where(exponent == 0, mantissa > 0x400000, mantissa != 0).to(tl.int32)
    else:
        finite = tl.minimum(amax, 0x7F800000)  # NaN patterns are overridden below; keep the add in range
        if RULE == 2:
            finite = (finite + EVEN_ADD) & 0x7F800000
        exponent = finite >> 23
        if RULE == 1:
            exponent = exponent + ((finite & 0x7FFFFF) != 0).to(tl.int32)
        byte = exponent - EMAX
    byte = tl.minimum(tl.maximum(byte, 0), 254)
    if EDGES == 0:
        byte = tl.where(amax == 0x7F800000, 254, byte)
    elif EDGES == 1:
        byte = tl.where(amax >= 0x7F800000, 255, byte)
    else:
        byte = tl.where(amax > 0x7F800000, 255, byte)
    return byte


@device
def mx_reciprocal(byte, ZERO_BITS: tl.constexpr):
    """float32 ``2**(127 - s)`` of scale bytes: 254 -> ``2**-127`` (subnormal), 0 -> ``ZERO_BITS``, 255 -> NaN."""
    bits = tl.where(byte == 254, 0x00400000, (254 - byte) << 23)
    bits = tl.where(byte == 0, ZERO_BITS, bits)
    bits = tl.where(byte == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@device
def mx_code(
    scaled,
    signed,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SUBNORMAL_ADDEND: tl.constexpr,
):
    """Saturating RNE code of float32 ``scaled`` (sign from ``signed``'s bit 31); see the module docstring.

    NaN is the caller's: it knows NaN from the input (the scale multiplier is never NaN where NaN elements are
    kept), which saves a comparison per element.
    """
    magnitude = scaled.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    shift: tl.constexpr = 23 - MANTISSA_BITS
    normal = (magnitude + (((1 << (shift - 1)) - 1) - ((127 - BIAS) << 23)) + ((magnitude >> shift) & 1)) >> shift
    rounded = magnitude.to(tl.float32, bitcast=True) + SUBNORMAL_ADDEND
    subnormal = rounded.to(tl.int32, bitcast=True) - ((151 - BIAS - MANTISSA_BITS) << 23)  # bits of the addend
    code = tl.minimum(tl.where(magnitude < ((128 - BIAS) << 23), subnormal, normal), MAX_CODE)
    return code | ((signed >> SIGN_SHIFT) & SIGN_MASK)


@device
def _amax(magnitude, AXIS: tl.constexpr):
    """Integer max along ``AXIS``, as ``tl.reduce`` with Triton's own max combiner.

    ``tl.max`` is a ``triton.jit`` function bound when Triton was imported, so a process that turns the
    interpreter on later could not call it; the interpreter runs this combiner as ``numpy.nanmax``.
    """
    return tl.reduce(magnitude, AXIS, tl.standard._elementwise_max)


@device
def _block_codes(
    value,
    sign,
    is_nan,
    scale,
    ZERO_BITS: tl.constexpr,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SUBNORMAL_ADDEND: tl.constexpr,
    EDGES: tl.constexpr,
):
    """Codes of ``value`` under the (broadcast) scale bytes ``scale``.

    ``te`` (EDGES 0): no scale is 255, and NaN elements (``is_nan``: an all-ones integer mask, from the input)
    give ``NAN_CODE``.  The torchao edges: every NaN sits in a block of scale 255, whose codes are 0.  Each edge
    needs one select only.
    """
    scaled = value * mx_reciprocal(scale, ZERO_BITS)
    codes = mx_code(scaled, sign, MANTISSA_BITS, BIAS, MAX_CODE, SIGN_SHIFT, SIGN_MASK, SUBNORMAL_ADDEND)
    # te: one LOP3 puts the NaN code where the mask is set
    return (codes & ~is_nan) | (is_nan & NAN_CODE) if EDGES == 0 else tl.where(scale == 255, 0, codes)


@device
def _store_data(codes, data_ptr, row, col, row_stride, rows, cols, PACK: tl.constexpr, EVEN: tl.constexpr):
    """Store int32 codes ``[BM, NB, 32]`` of rows ``row [BM]`` and columns ``col [NB, 32]`` (FP4: packed pairs);
    ``EVEN``: the tile lies inside the matrix, no masks."""
    BM: tl.constexpr = codes.shape[0]
    NB: tl.constexpr = codes.shape[1]
    row_base = row.to(tl.int64)[:, None, None] * row_stride
    row_ok = row[:, None, None] < rows
    if PACK:
        low, high = tl.split(tl.reshape(codes, [BM, NB, 16, 2]))
        pair = tl.program_id(1) * (NB * 16) + tl.arange(0, NB)[:, None] * 16 + tl.arange(0, 16)[None, :]
        packed = (low | (high << 4)).to(tl.uint8)
        if EVEN:
            tl.store(data_ptr + row_base + pair[None, :, :], packed)
        else:
            tl.store(data_ptr + row_base + pair[None, :, :], packed, mask=row_ok & (pair[None, :, :] < cols // 2))
    elif EVEN:
        tl.store(data_ptr + row_base + col[None, :, :], codes.to(tl.uint8))
    else:
        tl.store(data_ptr + row_base + col[None, :, :], codes.to(tl.uint8), mask=row_ok & (col[None, :, :] < cols))


@device
def _store_row_scales(scale, scale_ptr, row, stride, rows, cols, SWIZZLED: tl.constexpr, EVEN: tl.constexpr):
    """Rowwise scale bytes ``[BM, NB]`` of rows ``row``: compact row-major, or swizzled (``stride`` = tiles across)."""
    NB: tl.constexpr = scale.shape[1]
    blocks = tl.program_id(1) * NB + tl.arange(0, NB)
    mask = (row[:, None] < rows) & (blocks[None, :] < cols // 32)
    if SWIZZLED:
        offsets = swizzled_offset(row[:, None], blocks[None, :], stride)
    else:
        offsets = row[:, None] * stride + blocks[None, :]
    if EVEN:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8))
    else:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8), mask=mask)


@device
def _store_col_scales(scale, scale_ptr, col, stride, cols, SWIZZLED: tl.constexpr, EVEN: tl.constexpr):
    """Columnwise scale bytes ``[NB, 32]`` of columns ``col`` for this program's 32 rows (M-block ``program_id(0)``):
    compact ``[M / 32, K]``, or swizzled as the transpose ``[K, M / 32]`` (``stride`` = its tiles across)."""
    block = tl.program_id(0)
    offsets = swizzled_offset(col, block, stride) if SWIZZLED else block * stride + col
    if EVEN:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8))
    else:
        tl.store(scale_ptr + offsets, scale.to(tl.uint8), mask=col < cols)


# %% Compute kernel


def _mx_kernel(
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
    # element format
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr,
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
    INPUT: tl.constexpr,
    # tiling: BLOCK_M rows (32 with columnwise or 2d blocks) by BLOCK_K columns (NB blocks of 32);
    # EVEN: every tile lies inside the matrix (no masks)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr,
):
    # The tile is read as [BLOCK_M, NB, 32]: the last axis is one rowwise block (contiguous in memory, so the
    # loads vectorize), axis 0 runs down a columnwise block, and no reshape of a 2-D tile is needed.
    NB: tl.constexpr = BLOCK_K // 32
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    col = tl.program_id(1) * BLOCK_K + tl.arange(0, NB)[:, None] * 32 + tl.arange(0, 32)[None, :]
    x_ptrs = x_ptr + row.to(tl.int64)[:, None, None] * cols + col[None, :, :]
    if EVEN:
        raw = tl.load(x_ptrs)
    else:
        raw = tl.load(x_ptrs, mask=(row[:, None, None] < rows) & (col[None, :, :] < cols), other=0.0)
    if INPUT == 1:  # bfloat16: a 16-bit shift, exact (the sign stays in bit 31)
        bits = raw.to(tl.uint16, bitcast=True).to(tl.int32) << 16
        sign = bits
    else:
        signed, bits = float32_bits(raw, INPUT)
        sign = signed if INPUT == 2 else bits  # float16 widening may drop a NaN's sign
    value = bits.to(tl.float32, bitcast=True)
    # Block maxima are integer maxima over magnitude bits (the order of non-negative floats), so NaN handling is
    # explicit: te zeroes NaN magnitudes first (fmaxf from 0 never lets NaN win), torchao lets them win.  A float
    # max would do te's in one instruction, but NumPy's nanmax (the interpreter's) mishandles signalling NaNs.
    magnitude = bits & 0x7FFFFFFF
    # All ones where the element is NaN, as an integer mask (not a predicate the compiler would spill):
    # 0x7F800000 - magnitude is negative exactly for NaN patterns, and the arithmetic shift spreads the sign.
    is_nan = (0x7F800000 - magnitude) >> 31
    if EDGES == 0:
        magnitude = magnitude & ~is_nan

    if TWO_D:  # one 32x32 tile per block of NB (BLOCK_M == 32)
        scale = mx_scale_byte(_amax(_amax(magnitude, 2), 0), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
        codes = _block_codes(
            value,
            sign,
            is_nan,
            scale[None, :, None],
            ZERO_BITS,
            MANTISSA_BITS,
            BIAS,
            MAX_CODE,
            NAN_CODE,
            SIGN_SHIFT,
            SIGN_MASK,
            SUBNORMAL_ADDEND,
            EDGES,
        )
        if ROWWISE:
            _store_data(codes, row_data_ptr, row, col, data_stride, rows, cols, PACK, EVEN)
            row_scale = tl.broadcast_to(scale[None, :], [BLOCK_M, NB])
            _store_row_scales(row_scale, row_scale_ptr, row, row_scale_stride, rows, cols, SWIZZLED, EVEN)
        if COLUMNWISE:
            _store_data(codes, col_data_ptr, row, col, data_stride, rows, cols, PACK, EVEN)
            col_scale = tl.broadcast_to(scale[:, None], [NB, 32])
            _store_col_scales(col_scale, col_scale_ptr, col, col_scale_stride, cols, SWIZZLED, EVEN)
    else:
        if ROWWISE:  # 1x32 blocks: the last axis
            scale = mx_scale_byte(_amax(magnitude, 2), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            codes = _block_codes(
                value,
                sign,
                is_nan,
                scale[:, :, None],
                ZERO_BITS,
                MANTISSA_BITS,
                BIAS,
                MAX_CODE,
                NAN_CODE,
                SIGN_SHIFT,
                SIGN_MASK,
                SUBNORMAL_ADDEND,
                EDGES,
            )
            _store_data(codes, row_data_ptr, row, col, data_stride, rows, cols, PACK, EVEN)
            _store_row_scales(scale, row_scale_ptr, row, row_scale_stride, rows, cols, SWIZZLED, EVEN)
        if COLUMNWISE:  # 32x1 blocks: axis 0 (BLOCK_M == 32)
            scale = mx_scale_byte(_amax(magnitude, 0), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            codes = _block_codes(
                value,
                sign,
                is_nan,
                scale[None, :, :],
                ZERO_BITS,
                MANTISSA_BITS,
                BIAS,
                MAX_CODE,
                NAN_CODE,
                SIGN_SHIFT,
                SIGN_MASK,
                SUBNORMAL_ADDEND,
                EDGES,
            )
            _store_data(codes, col_data_ptr, row, col, data_stride, rows, cols, PACK, EVEN)
            _store_col_scales(scale, col_scale_ptr, col, col_scale_stride, cols, SWIZZLED, EVEN)


# %% Tile configurations


class _Tile(NamedTuple):
    block_m: int
    block_k: int
    num_warps: int


def _autotune_configs(rows_of_32: bool) -> list[_Tile]:
    """Tiles tried on CUDA (the first is also the interpreter's): ``rows_of_32`` when columnwise or 2d blocks
    fix ``BLOCK_M = 32``; rowwise-only tiles may take more or fewer rows.  ``BLOCK_K`` is a power of two >= 32."""
    if rows_of_32:
        return [_Tile(32, 256, 8), _Tile(32, 128, 4), _Tile(32, 128, 8), _Tile(32, 512, 8), _Tile(32, 64, 4)]
    return [
        _Tile(32, 256, 8),
        _Tile(16, 256, 4),
        _Tile(32, 128, 4),
        _Tile(64, 256, 8),
        _Tile(64, 128, 8),
        _Tile(128, 64, 8),
    ]


_TILE_ENV = "QCONFORM_MX_TILE"
"""Optional ``BLOCK_MxBLOCK_KxWARPS`` (e.g. ``32x256x8``) fixing the tile instead of autotuning it (benchmarks)."""


@functools.cache
def _tuned_kernel(interpret: str | None, rows_of_32: bool) -> Any:
    """The kernel, autotuned over :func:`_autotune_configs` on CUDA (keyed on shape and what it writes)."""
    configs = [
        triton.Config({"BLOCK_M": t.block_m, "BLOCK_K": t.block_k}, num_warps=t.num_warps)
        for t in _autotune_configs(rows_of_32)
    ]
    key = ["rows", "cols", "ROWWISE", "COLUMNWISE", "TWO_D", "PACK", "INPUT", "SWIZZLED"]
    even = triton.heuristics(
        {"EVEN": lambda args: args["rows"] % args["BLOCK_M"] == 0 and args["cols"] % args["BLOCK_K"] == 0}
    )
    return triton.autotune(configs=configs, key=key)(even(jit(_mx_kernel)))


# %% Launcher


def _launch(x2: torch.Tensor, plan: _Plan, outputs: dict[str, torch.Tensor]) -> None:
    """Run the kernel over ``x2 [M, K]`` (contiguous) into the allocated ``outputs``."""
    interpret = os.environ.get("TRITON_INTERPRET")
    if x2.device.type != "cuda" and interpret != "1":
        raise RuntimeError(
            f"Got {_PATH_ENV}=triton and x on {x2.device}, but the Triton kernel runs CPU tensors only in Triton's "
            "interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    fmt = plan.fmt
    # A direction not asked for gets the other's buffers as (never written) stand-ins.
    row_data = outputs.get("data_rowwise", outputs.get("data_columnwise"))
    assert row_data is not None  # _allocate makes at least one direction
    col_data = outputs.get("data_columnwise", row_data)
    row_scale = outputs.get("scale_rowwise", row_data)
    col_scale = outputs.get("scale_columnwise", row_data)
    row_scale_stride = plan.row_scale_shape[1] // 4 if plan.swizzled else plan.row_scale_shape[1]
    col_scale_stride = plan.col_scale_shape[0] // 4 if plan.swizzled else plan.col_scale_shape[1]
    meta: dict[str, Any] = {
        "MANTISSA_BITS": fmt.mantissa_bits,
        "BIAS": fmt.bias,
        "MAX_CODE": fmt.max_code,
        "NAN_CODE": fmt.nan_code,
        "SIGN_SHIFT": 32 - fmt.bits,
        "SIGN_MASK": 1 << (fmt.bits - 1),
        "SUBNORMAL_ADDEND": 2.0 ** (24 - fmt.bias - fmt.mantissa_bits),
        "PACK": fmt.bits == 4,
        "EMAX": fmt.emax,
        "EVEN_ADD": 1 << (22 - fmt.mantissa_bits),
        "RULE": _RULE_IDS[plan.rule],
        "EDGES": _EDGE_IDS[plan.edges],
        "RCEIL_OPERAND": fmt.max_value if plan.edges == "torchao_018" else fmt.reciprocal_of_max,
        "RCEIL_DIVIDE": plan.edges == "torchao_018",
        "ZERO_BITS": plan.zero_reciprocal_bits,
        "ROWWISE": plan.rowwise,
        "COLUMNWISE": plan.columnwise,
        "TWO_D": plan.two_d,
        "SWIZZLED": plan.swizzled,
        "INPUT": _INPUT_IDS[x2.dtype],
    }
    args = (
        x2,
        row_data,
        row_scale,
        col_data,
        col_scale,
        plan.rows,
        plan.cols,
        row_data.shape[-1],
        row_scale_stride,
        col_scale_stride,
    )
    rows_of_32 = plan.columnwise or plan.two_d
    fixed = os.environ.get(_TILE_ENV)
    if interpret == "1" or fixed:
        tile = _Tile(*(int(part) for part in fixed.split("x"))) if fixed else _autotune_configs(rows_of_32)[0]
        if (rows_of_32 and tile.block_m != 32) or tile.block_k % 32 or tile.block_k & (tile.block_k - 1):
            raise ValueError(
                f"Got {_TILE_ENV}={fixed!r}, but BLOCK_K must be a power of two >= 32 and BLOCK_M 32 with "
                "columnwise or 2d blocks"
            )
        kernel = jit(_mx_kernel)[(triton.cdiv(plan.rows, tile.block_m), triton.cdiv(plan.cols, tile.block_k))]
        even = plan.rows % tile.block_m == 0 and plan.cols % tile.block_k == 0
        meta.update(BLOCK_M=tile.block_m, BLOCK_K=tile.block_k, EVEN=even, num_warps=tile.num_warps)
        if interpret == "1":
            import numpy as np  # the interpreter computes in NumPy: NaN inputs must not raise warnings there

            with np.errstate(all="ignore"):
                kernel(*args, **meta)
        else:
            kernel(*args, **meta)
        return

    def tuned_grid(config: dict[str, int]) -> tuple[int, int]:
        return triton.cdiv(plan.rows, config["BLOCK_M"]), triton.cdiv(plan.cols, config["BLOCK_K"])

    _tuned_kernel(interpret, rows_of_32)[tuned_grid](*args, **meta)


# %% Torch path


def _scale_bytes_torch(amax: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """int32 scale bytes of int32 block maxima (float32 magnitude bits), as :func:`mx_scale_byte`."""
    fmt = plan.fmt
    if plan.rule == "rceil":
        value = amax.view(torch.float32)
        if plan.edges == "torchao_018":
            descale = value / torch.tensor(fmt.max_value, dtype=torch.float32, device=amax.device)
        else:
            descale = value * torch.tensor(fmt.reciprocal_of_max, dtype=torch.float32, device=amax.device)
        bits = descale.view(torch.int32) & 0x7FFFFFFF
        exponent, mantissa = bits >> 23, bits & 0x7FFFFF
        byte = exponent + torch.where(exponent == 0, mantissa > 0x400000, mantissa != 0).to(torch.int32)
    else:
        finite = amax.clamp(max=_F32_INF)
        if plan.rule == "even":
            finite = (finite + (1 << (22 - fmt.mantissa_bits))) & _F32_INF
        exponent = finite >> 23
        if plan.rule == "ceil":
            exponent = exponent + ((finite & 0x7FFFFF) != 0).to(torch.int32)
        byte = exponent - fmt.emax
    byte = byte.clamp(0, _E8M0_MAX)
    if plan.edges == "te":
        byte = byte.masked_fill(amax == _F32_INF, _E8M0_MAX)
    elif plan.edges == "torchao":
        byte = byte.masked_fill(amax >= _F32_INF, _E8M0_NAN)
    else:
        byte = byte.masked_fill(amax > _F32_INF, _E8M0_NAN)
    return byte


def _reciprocal_torch(byte: torch.Tensor, plan: _Plan) -> torch.Tensor:
    bits = torch.where(byte == _E8M0_MAX, 0x00400000, (_E8M0_MAX - byte) << 23)
    bits = bits.masked_fill(byte == 0, plan.zero_reciprocal_bits).masked_fill(byte == _E8M0_NAN, 0x7FC00000)
    return bits.to(torch.int32).view(torch.float32)


def _codes_torch(value: torch.Tensor, byte: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """uint8 codes of ``value`` (float32 ``[M, K]``) given each element's scale byte (``[M, K]``, int32)."""
    fmt = plan.fmt
    scaled = value * _reciprocal_torch(byte, plan)
    name = next(n for n, f in _FORMATS.items() if f is fmt)
    if fmt.bits == 8:
        codes = fast.cast.fp8(scaled, format=name, overflow="saturate")["codes"]
        codes = codes.masked_fill(scaled.isnan(), fmt.nan_code)
    elif fmt.bits == 6:
        codes = fast.cast.fp6(scaled, format=name, nan="max")["codes"]
    else:
        codes = fast.cast.fp4(scaled, format=name, nan="max")["codes"]
    codes = codes.masked_fill(byte == _E8M0_NAN, 0)
    return fast.pack.nibbles(codes)["packed"] if fmt.bits == 4 else codes


def _torch_path(x2: torch.Tensor, plan: _Plan, outputs: dict[str, torch.Tensor]) -> None:
    rows, cols = plan.rows, plan.cols
    bits = x2.to(torch.float32).view(torch.int32)
    value = bits.view(torch.float32)
    magnitude = bits & 0x7FFFFFFF
    if plan.edges == "te":
        magnitude = magnitude.masked_fill(magnitude > _F32_INF, 0)
    tile = None
    if plan.two_d:
        blocks = magnitude.view(rows // BLOCK_SIZE, BLOCK_SIZE, cols // BLOCK_SIZE, BLOCK_SIZE)
        tile = _scale_bytes_torch(blocks.amax(dim=(1, 3)), plan)
    if plan.rowwise:
        if tile is None:
            scale = _scale_bytes_torch(magnitude.view(rows, cols // BLOCK_SIZE, BLOCK_SIZE).amax(dim=2), plan)
        else:
            scale = tile.repeat_interleave(BLOCK_SIZE, dim=0)
        outputs["data_rowwise"].view(rows, -1).copy_(
            _codes_torch(value, scale.repeat_interleave(BLOCK_SIZE, dim=1), plan)
        )
        _store_scales_torch(scale.to(torch.uint8), outputs["scale_rowwise"], plan, transpose=False)
    if plan.columnwise:
        if tile is None:
            scale = _scale_bytes_torch(magnitude.view(rows // BLOCK_SIZE, BLOCK_SIZE, cols).amax(dim=1), plan)
        else:
            scale = tile.repeat_interleave(BLOCK_SIZE, dim=1)
        outputs["data_columnwise"].view(rows, -1).copy_(
            _codes_torch(value, scale.repeat_interleave(BLOCK_SIZE, dim=0), plan)
        )
        _store_scales_torch(scale.to(torch.uint8), outputs["scale_columnwise"], plan, transpose=True)


def _store_scales_torch(scale: torch.Tensor, out: torch.Tensor, plan: _Plan, *, transpose: bool) -> None:
    """Write the logical scale matrix into the (zeroed) padded buffer, compact or swizzled."""
    if plan.swizzled:
        source = scale.t() if transpose else scale
        out.view(-1).copy_(fast.layout.scale_swizzle(source)["swizzled"].view(-1))
    else:
        out[: scale.shape[0], : scale.shape[1]] = scale


# %% Public function


def mx(
    x: torch.Tensor,
    *,
    format: str,
    scale_rule: str,
    usage: str = "rowwise",
    blocks: str = "1d",
    scale_layout: str = "compact",
    edges: str = "te",
) -> dict[str, torch.Tensor]:
    """Quantize ``x`` to MX: E8M0 block scales and FP8/FP6/FP4 element codes.

    Contract
    --------
    ``quant.mx``: per block of 32 (rowwise 1x32, columnwise 32x1, or 32x32 tiles), ``s`` from the
    block's ``amax`` by ``scale_rule`` (clamped to 0..254; NaN/Inf per ``edges``), elements
    ``satfinite_rne(fl32(x * 2**(127 - s)))``; module docstring and ``specs/quant/mx.yaml``.

    Source
    ------
    OCP MX v1.0; TransformerEngine ``quantize_mxfp8.cuh`` (``rceil``, ``te``, 2D, padded shapes);
    torchao ``to_mx`` at 36027d8 and v0.18.0 (``floor``, ``ceil``, ``even``, ``rceil``, the torchao edges).

    Encoding
    --------
    ``x``: contiguous float32, bfloat16 or float16 tensor, at least 2-D (``[..., M, K]``, leading
    dimensions flattened into ``M``).  Returns, on ``x``'s device: ``data_rowwise`` /
    ``data_columnwise`` (``uint8`` in ``x``'s shape, FP4 with ``K / 2`` bytes per row, element ``2i`` in
    the low nibble; columnwise not transposed) and ``scale_rowwise`` ``[round_up(M, 128),
    round_up(K / 32, 4)]`` / ``scale_columnwise`` ``[round_up(M / 32, 4), round_up(K, 128)]`` (``uint8``
    E8M0; ``compact`` row-major or ``swizzled`` 128x4, padding zero), for the directions ``usage`` asks.

    Edge cases
    ----------
    Zero blocks give scale 0 and signed zero codes; NaN and Inf per ``edges`` (``te``: amax ignores
    NaN, Inf -> 254, NaN elements -> 0x7F / +max; ``torchao``: NaN or Inf -> 0xFF and the block's codes
    0; ``torchao_018``: NaN -> 0xFF, Inf through the rule, scale 0 multiplies by ``2**126`` or 1).

    The implementation (one fused Triton kernel, or torch ops) is chosen per call by
    ``QCONFORM_FAST_PATH``.  Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16
    tensor; ``ValueError`` for an unknown parameter, a non-contiguous or empty ``x``, fewer than 2
    dimensions, ``K % 32`` (rowwise, 2d), ``M % 32`` (columnwise, 2d) or an odd ``K`` (FP4);
    ``RuntimeError`` where a forced Triton path cannot run.
    """
    plan = _plan(x, format, scale_rule, usage, blocks, scale_layout, edges)
    x2 = x.view(plan.rows, plan.cols)
    outputs = _allocate(x, plan)
    if _use_triton(x.device):
        _launch(x2, plan, outputs)
    else:
        _torch_path(x2, plan, outputs)
    return outputs


def _allocate(x: torch.Tensor, plan: _Plan) -> dict[str, torch.Tensor]:
    """Output buffers; scale buffers are zeroed (padding), data buffers are fully written."""
    data_shape = (*x.shape[:-1], plan.cols // 2 if plan.fmt.bits == 4 else plan.cols)
    out: dict[str, torch.Tensor] = {}
    if plan.rowwise:
        out["data_rowwise"] = torch.empty(data_shape, dtype=torch.uint8, device=x.device)
        out["scale_rowwise"] = _scale_buffer(plan.row_scale_shape, (plan.rows, plan.cols // BLOCK_SIZE), x.device)
    if plan.columnwise:
        out["data_columnwise"] = torch.empty(data_shape, dtype=torch.uint8, device=x.device)
        out["scale_columnwise"] = _scale_buffer(plan.col_scale_shape, (plan.rows // BLOCK_SIZE, plan.cols), x.device)
    return out


def _scale_buffer(shape: tuple[int, int], logical: tuple[int, int], device_: torch.device) -> torch.Tensor:
    """A scale buffer: ``empty`` when the logical matrix fills it (no padding), else zeroed."""
    if shape == logical:
        return torch.empty(shape, dtype=torch.uint8, device=device_)
    return torch.zeros(shape, dtype=torch.uint8, device=device_)


def _use_triton(device_: torch.device) -> bool:
    choice = os.environ.get(_PATH_ENV, "auto")
    if choice not in ("auto", "triton", "torch"):
        raise ValueError(f"Got {_PATH_ENV}={choice!r}, but {_PATH_ENV} must be one of ['auto', 'triton', 'torch']")
    if choice == "triton" and triton is None:
        raise RuntimeError(f"Got {_PATH_ENV}=triton, but triton is not installed")
    return choice == "triton" or (choice == "auto" and device_.type == "cuda" and triton is not None)


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"Got {name}={value!r}, but {name} must be one of {list(allowed)}")


def _plan(x: object, format: str, scale_rule: str, usage: str, blocks: str, scale_layout: str, edges: str) -> _Plan:
    """Check every argument; the plan of the call."""
    _check_choice("format", format, MX_FORMATS)
    _check_choice("scale_rule", scale_rule, SCALE_RULES)
    _check_choice("usage", usage, USAGES)
    _check_choice("blocks", blocks, BLOCKS)
    _check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    _check_choice("edges", edges, EDGES)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    dtype = str(x.dtype).removeprefix("torch.")
    if x.dtype not in _INPUT_IDS:
        raise TypeError(
            f"Got x.dtype={dtype}, but x must be one of ['float32', 'bfloat16', 'float16'] (float64 is refused: "
            "narrowing it through float32 would round twice)"
        )
    shape = tuple(x.shape)
    if x.dim() < 2:
        raise ValueError(
            f"Got x.shape={shape}, but x must have at least 2 dimensions [..., M, K] (MX blocks run along K, or "
            "along M for columnwise usage); reshape a vector to [1, K]"
        )
    if x.numel() == 0:
        raise ValueError(f"Got x.shape={shape}, but x must not be empty")
    if not x.is_contiguous():
        raise ValueError(f"Got x with shape {shape} and strides {x.stride()}, but x must be contiguous")
    rows, cols = x.numel() // shape[-1], shape[-1]
    two_d = blocks == "2d"
    what = "2d blocks" if two_d else f"usage={usage!r}"
    if (usage != "columnwise" or two_d) and cols % BLOCK_SIZE:
        raise ValueError(
            f"Got x.shape={shape}, but {what} needs K % 32 == 0 (K = x.shape[-1] = {cols}): blocks of 32 run along K"
        )
    if (usage != "rowwise" or two_d) and rows % BLOCK_SIZE:
        raise ValueError(
            f"Got x.shape={shape}, but {what} needs M % 32 == 0 (M = {rows}, the product of the leading "
            "dimensions): columnwise blocks of 32 run along M"
        )
    fmt = _FORMATS[format]
    if fmt.bits == 4 and cols % 2:
        raise ValueError(f"Got x.shape={shape}, but FP4 packs two codes per byte along K: K must be even")
    return _Plan(
        fmt,
        scale_rule,
        edges,
        rowwise=usage != "columnwise",
        columnwise=usage != "rowwise",
        two_d=two_d,
        swizzled=scale_layout == "swizzled",
        rows=rows,
        cols=cols,
    )


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# %% Benchmark


def bench(
    shape: tuple[int, int] = (8192, 8192),
    *,
    dtype: torch.dtype = torch.bfloat16,
    format: str = "float8_e4m3fn",
    scale_rule: str = "rceil",
    usage: str = "rowwise",
    scale_layout: str = "compact",
) -> dict[str, float]:
    """Median CUDA time of :func:`mx` on a random ``shape`` input, beside a device-to-device copy.

    Bytes moved: the input once, each data copy and each scale matrix once.  Returns ``ms``,
    ``gb_per_s``, ``copy_gb_per_s`` and ``fraction_of_copy`` (``triton.testing.do_bench``, L2 flushed).
    """
    from triton.testing import do_bench

    x = (torch.randn(shape, device="cuda") * 64).to(dtype)
    out = mx(x, format=format, scale_rule=scale_rule, usage=usage, scale_layout=scale_layout)
    ms = do_bench(
        lambda: mx(x, format=format, scale_rule=scale_rule, usage=usage, scale_layout=scale_layout),
        return_mode="median",
    )
    moved = x.numel() * x.element_size() + sum(t.numel() for t in out.values())
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    gb_per_s = moved / ms / 1e6
    copy_gb_per_s = 2 * x.numel() * x.element_size() / copy_ms / 1e6
    return {
        "ms": ms,
        "gb_per_s": gb_per_s,
        "copy_gb_per_s": copy_gb_per_s,
        "fraction_of_copy": gb_per_s / copy_gb_per_s,
    }


# %% Check and time


def _main() -> None:
    """The kernel against the torch path on an irregular shape (every format, rule and edge), then time it on CUDA."""
    device_ = "cuda" if torch.cuda.is_available() else "cpu"
    if device_ == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    generator = torch.Generator().manual_seed(0)
    patterns = torch.randint(-(2**15), 2**15, (96, 320), dtype=torch.int32, generator=generator).to(torch.int16)
    x = patterns.view(torch.bfloat16).to(device_)
    for format in MX_FORMATS:
        for rule in SCALE_RULES:
            for edges in EDGES:
                results = []
                for path in ("triton", "torch"):
                    os.environ[_PATH_ENV] = path
                    results.append(mx(x, format=format, scale_rule=rule, usage="both", edges=edges))
                bad = sum(int((results[0][k] != results[1][k]).sum()) for k in results[0])
                print(f"{format} {rule} {edges}: {bad} mismatching bytes")
    os.environ.pop(_PATH_ENV)
    if device_ == "cuda":
        for usage in USAGES:
            print(usage, bench(usage=usage))


if __name__ == "__main__":
    _main()
