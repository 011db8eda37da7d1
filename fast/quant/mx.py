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
One program reads one ``BLOCK_M x BLOCK_K`` tile of ``x`` once (a 2-D load viewed as ``[BLOCK_M, NB, 32]``)
and writes everything asked of it: block maxima, scale bytes, the reciprocal ``2**(127 - s)`` (float32
bits), the scaled values (one float32 multiply, exact: a power of two), the codes, FP4 packing, and the
scale bytes at their compact or swizzled offsets; rowwise and columnwise outputs come from the same
registers.  FP4 of bfloat16 ``x`` reads the tile as int32 words of element pairs instead and never widens
it to float32 (:func:`_half_maxima`, :func:`_e2m1_words`).  The 1-D grid walks the K-tiles of a row band
before the next band, so the tiles in flight cover whole rows.  Compiled for sm_90, the rowwise bfloat16
kernel has about 7 SASS instructions per element for FP8 (23 with the integer rounding it had before, which
kept it instruction-bound), about 18 for FP6, and about 13 for FP4 (20 with :func:`mx_code` per element);
rowwise plus columnwise FP4 about 20.8 on 80 registers (34.5 with :func:`mx_code`, 22.3 on 96 with
:func:`_e2m1_pairs`).

MXFP8 rowwise plus columnwise with compact scales stages its rowwise scale bytes: a 32-row tile owns only
``BLOCK_K / 32`` bytes of each 32-byte sector of a compact row, and stores that narrow cost the L2 one
transaction each, so the kernel writes each tile's bytes contiguously to a staging buffer and
:func:`_unstage_row_scales` (a dependent launch on sm_90) permutes them into the compact matrix in whole
sectors (:func:`_stages_row_scales`).

The work is split so each piece is the cheapest exact form on the GPU, with an integer twin where
Triton's interpreter cannot run it (``fast._triton.device_modes``; CPU tests check the interpreted
bodies, ``tests/gpu/test_gpu_mx.py`` the compiled ones, both against ``reference``):

- block maxima (:func:`_block_amax`): ``max.f32`` of ``|x|`` (``te``: a NaN loses, an all-NaN block
  gives 0) or ``max.NaN.f32`` (torchao: NaN wins); interpreted, an integer max of magnitude bits.  FP4 of
  bfloat16 (:func:`_half_maxima`): ``|x|`` of a word's two elements by one ``and``, then ``max.bf16x2`` /
  ``max.NaN.bf16x2``, two elements per instruction (a columnwise word holds two columns' maxima);
- scale bytes (:func:`mx_scale_byte`): integer arithmetic on the amax bits, once per block; ``rceil``
  rounds ``d = amax * fl32(1 / max)`` up to a power of two as ``min((b + 0x7FFFFF) >> 23, (b - 1) >>
  22)`` of its bits (the second term handles subnormal ``d``), which also saturates Inf to 254;
- FP8 codes: ``fast._triton.fp8_code``, the hardware ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`` (two
  elements per instruction; a NaN element, scaled to the canonical positive NaN by the multiply,
  gives 0x7F);
- FP6 codes, and FP4 of float32 inputs (:func:`mx_code`): clamp to ``+-max`` with ``min``/``max.f32``
  (NaN -> +max), then one float32 add of ``2**(e + 23 - m)`` -- ``e`` the exponent of ``|v|``'s binade, at least the
  smallest normal's -- whose last place is the code step there: IEEE rounds ``|v|`` to nearest even
  once, and the code is the number of steps above the addend plus ``(e - e_min) << m``, the sign
  or-ed in.  Interpreted, the integer rounding: ``(b - ((127 - bias) << 23) + 2**(22 - m) - 1 + odd)
  >> (23 - m)`` for normal codes and a float32 add of ``2**(24 - bias - m)`` for subnormal ones;
- FP4 codes of bfloat16 inputs (:func:`_e2m1_words`): two elements per instruction in bfloat16x2 arithmetic
  on the input words (``mul`` by the reciprocal, a clamp, one ``fma`` at the binade's step, a subtraction whose
  bfloat16 bits are the code, as bfloat16's subnormals mirror E2M1's), the packed bytes assembled with ``prmt``
  and a multiply by 17; interpreted, float32 products and :func:`mx_code` on each;
- FP4 codes of float16 inputs (:func:`_e2m1_pairs`): two elements per instruction in float16x2 arithmetic
  (``cvt.rn.f16x2.f32`` of the scaled float32 values, a clamp, one ``fma`` at the binade's step, a subtraction
  whose float16 bits are the code), the packed bytes assembled with ``prmt``; interpreted, :func:`mx_code` on
  each;
- the torchao edges: a block of scale 0xFF gets codes 0 (its scaled values are zeroed: one select per element).

Launch
------
Triton's ``JITFunction`` binds ~35 arguments and looks up its cache on every call, which costs about as
much host time as the kernel takes on an H100 (a first sweep measured ~95 us per call in all), so a
stream of calls would be host-bound.  The first call of each plan, dtype, device and tile override
goes through it (and the autotuner, over :func:`_autotune_configs`); later ones launch the returned
``CompiledKernel`` bound to its grid directly (``_LAUNCHES``).  The interpreter takes the first path
always.

Paths
-----
``QCONFORM_FAST_PATH`` chooses per call, as in ``fast/cast.py``: ``auto`` (the kernel for CUDA
tensors when Triton is importable -- for FP8 on GPUs with the FP8 conversion, compute capability 8.9+
-- else torch), ``triton`` (always; CPU tensors need ``TRITON_INTERPRET=1``), ``torch``.  The torch
path composes ``fast.cast``, ``fast.pack`` and ``fast.layout`` with the scale arithmetic in torch
integer ops.  This module imports without Triton and queries no device at import time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable
from typing import Any, NamedTuple

import torch

import fast.cast
import fast.layout
import fast.pack
from fast._triton import LaunchCache, device, device_modes, fp8_code, jit, tl, triton, wait_for_primary
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
    def fp8(self) -> int:
        """The kernel's ``FP8``: 1 E4M3FN, 2 E5M2 (the hardware conversion), 0 FP6 and FP4 (:func:`mx_code`)."""
        return 0 if self.bits != 8 else 1 if self.mantissa_bits == 3 else 2

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
        bits = descale.to(tl.int32, bitcast=True)  # not negative: amax is not (a NaN's byte is set below)
        # Rounded up to a power of two: E + (M != 0) for a normal d; a subnormal d rounds to 2**-126 (byte 1) only
        # above 2**-127 (M > 0x400000).  (bits - 1) >> 22 is 0 up to 0x400000, 1 below 0x800000 and never below
        # the first term for a normal d, so the minimum covers both.  An infinite d gives 255, clamped to 254.
        byte = tl.minimum((bits + 0x7FFFFF) >> 23, (bits - 1) >> 22)
        if RCEIL_DIVIDE:  # torchao 0.18: ceil of a float32 log2, which rounds to j just above 2**j
            byte = byte - mx_log2_keeps_power(bits)
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
        if RULE != 3:  # rceil saturates an infinite amax to 254 above
            byte = tl.where(amax == 0x7F800000, 254, byte)
    elif EDGES == 1:
        byte = tl.where(amax >= 0x7F800000, 255, byte)
    else:
        byte = tl.where(amax > 0x7F800000, 255, byte)
    return byte


@device
def mx_log2_keeps_power(bits):
    """int32 1 where a finite float32 ``d`` (non-negative bits) lies above ``2**j`` but ``RN32(log2 d) == j``, else 0.

    ``d = 2**j * (1 + m * 2**-23)`` with ``0 < m <= T``; ``T`` is 0, 1, 2, 5, 11, 22 as ``a = j`` (``j >= 0``) or
    ``-j - 1`` (``j < 0``) reaches 4, 8, 16, 32, 64 (half the float32 spacing above ``j`` doubles there).  The
    subnormal ``d`` above ``2**-127`` (``j = -127``, ``a = 126``) has the grid ``2**-22``: ``2 * m`` is compared.
    """
    exponent = bits >> 23
    mantissa = bits & 0x7FFFFF
    offset = tl.where(exponent == 0, 2 * (mantissa - 0x400000), mantissa)
    j = exponent - 127
    a = tl.where(j >= 0, j, -j - 1)
    slack = tl.where(
        a >= 64, 22, tl.where(a >= 32, 11, tl.where(a >= 16, 5, tl.where(a >= 8, 2, (a >= 4).to(tl.int32))))
    )
    return ((offset > 0) & (offset <= slack) & (exponent < 255)).to(tl.int32)


@device
def mx_reciprocal(byte, ZERO_BITS: tl.constexpr):
    """float32 ``2**(127 - s)`` of scale bytes 0..254: 254 -> ``2**-127`` (subnormal), 0 -> ``ZERO_BITS``.

    Byte 255 (NaN) gives ``2**-127``: the codes of such blocks are the caller's (the kernel writes 0).
    """
    bits = tl.maximum((254 - byte) << 23, 0x00400000)
    if ZERO_BITS != 254 << 23:  # torchao 0.18
        bits = tl.where(byte == 0, ZERO_BITS, bits)
    return bits.to(tl.float32, bitcast=True)


@device
def _mx_code_interpreted(
    scaled,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_VALUE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SUBNORMAL_ADDEND: tl.constexpr,
):
    """:func:`mx_code` in integer arithmetic with one float32 add for subnormal codes (module docstring)."""
    bits = scaled.to(tl.int32, bitcast=True)
    magnitude = bits & 0x7FFFFFFF
    shift: tl.constexpr = 23 - MANTISSA_BITS
    normal = (magnitude + (((1 << (shift - 1)) - 1) - ((127 - BIAS) << 23)) + ((magnitude >> shift) & 1)) >> shift
    rounded = magnitude.to(tl.float32, bitcast=True) + SUBNORMAL_ADDEND
    subnormal = rounded.to(tl.int32, bitcast=True) - ((151 - BIAS - MANTISSA_BITS) << 23)  # bits of the addend
    code = tl.minimum(tl.where(magnitude < ((128 - BIAS) << 23), subnormal, normal), MAX_CODE)
    return tl.where(magnitude > 0x7F800000, MAX_CODE, code | ((bits >> SIGN_SHIFT) & SIGN_MASK))


@device_modes(interpreted=_mx_code_interpreted)
def mx_code(
    scaled,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_VALUE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SUBNORMAL_ADDEND: tl.constexpr,
):
    """int32 saturating round-to-nearest-even code of float32 ``scaled`` in an element format with MANTISSA_BITS,
    BIAS, largest code MAX_CODE of value MAX_VALUE and its sign bit at SIGN_MASK; NaN gives ``MAX_CODE`` (+max).

    Compiled (module docstring): a clamp to +-MAX_VALUE that takes NaN to +MAX_VALUE (two ``min``/``max.f32``),
    then one float32 add of ``2**(e + 23 - m)`` -- ``e`` the exponent of ``|v|``'s binade, at least the smallest
    normal's -- whose last place is the code step there, so IEEE rounds ``|v|`` to nearest even once; the code
    is the number of steps plus the binade's first code.  Interpreted: :func:`_mx_code_interpreted`.
    """
    clamped = tl.maximum(tl.minimum(scaled, MAX_VALUE), -MAX_VALUE)
    bits = clamped.to(tl.int32, bitcast=True)
    exponent = tl.maximum(bits & 0x7F800000, (128 - BIAS) << 23)
    step = exponent + ((23 - MANTISSA_BITS) << 23)
    rounded = tl.abs(clamped) + step.to(tl.float32, bitcast=True)
    first = (exponent >> (23 - MANTISSA_BITS)) - ((128 - BIAS) << MANTISSA_BITS)  # (e - e_min) << m
    code = rounded.to(tl.int32, bitcast=True) - step + first
    return code | ((bits >> SIGN_SHIFT) & SIGN_MASK)


@device
def _e2m1_pairs_interpreted(low, high):
    """:func:`_e2m1_pairs` as two :func:`mx_code` (interpreted: integer arithmetic) of ``32 * v`` and a nibble pack."""
    low_code = mx_code(low * 32.0, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    high_code = mx_code(high * 32.0, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    return (low_code | (high_code << 4)).to(tl.uint8)


@device_modes(interpreted=_e2m1_pairs_interpreted)
def _e2m1_pairs(low, high):
    """uint8 ``code(low / 2**-5) | code(high / 2**-5) << 4`` of float32 values ``2**-5 * v`` (the kernel folds
    ``2**-5`` into the block reciprocal) whose magnitudes of ``2**-19`` and more are float16 values (scaled
    bfloat16 or float16 inputs): :func:`mx_code`'s contract for E2M1 (saturating RNE, NaN -> +max), two elements
    per instruction in float16x2 arithmetic.

    Per pair: ``cvt.rn.f16x2.f32`` packs ``h = v / 32`` (exact from ``2**-14`` up; smaller magnitudes, whose codes
    are 0, keep their sign; beyond 65504 -> Inf); ``c = min(|h|, 6 / 32)`` (NaN -> 6 / 32: the multiply by the
    reciprocal made every NaN the positive canonical one); ``m = 2**(e' - 5)``, ``e'`` the exponent of
    ``max(|v|, 1)`` (E2M1's binade, at least the smallest normal's); ``t = c * 2**-9 + m`` (one ``fma``) rounds
    ``v * 2**-14`` to nearest even at ``m``'s last place, which is the code step there times ``2**-14``, and
    ``t - m`` is the rounded value times ``2**-14``, where float16's smallest normal meets E2M1's: its bits 9-11
    are the E2M1 code (float16 subnormals are E2M1's).  Shifted up by 3 beside ``h``'s sign, each half holds its
    nibble in the top of its byte 1; ``prmt`` gathers those bytes and two shifts pair the nibbles.
    ``tests/gpu/test_gpu_mx.py`` checks every bfloat16 and float16 value at several scales.
    """
    return tl.inline_asm_elementwise(
        "{\n.reg .b32 h, c, m, t, s, x0, x1, x2, x3, y0, y1, top, low, k9;\n"
        "mov.b32 top, 0x32003200;\nmov.b32 low, 0x28002800;\nmov.b32 k9, 0x18001800;\n"
        "cvt.rn.f16x2.f32 h, $5, $1;\nabs.f16x2 c, h;\nmin.f16x2 c, c, top;\nmax.f16x2 m, c, low;\n"
        "and.b32 m, m, 0x7C007C00;\nfma.rn.f16x2 t, c, k9, m;\nsub.rn.f16x2 t, t, m;\n"
        "shl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x0, t, s;\n"
        "cvt.rn.f16x2.f32 h, $6, $2;\nabs.f16x2 c, h;\nmin.f16x2 c, c, top;\nmax.f16x2 m, c, low;\n"
        "and.b32 m, m, 0x7C007C00;\nfma.rn.f16x2 t, c, k9, m;\nsub.rn.f16x2 t, t, m;\n"
        "shl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x1, t, s;\n"
        "cvt.rn.f16x2.f32 h, $7, $3;\nabs.f16x2 c, h;\nmin.f16x2 c, c, top;\nmax.f16x2 m, c, low;\n"
        "and.b32 m, m, 0x7C007C00;\nfma.rn.f16x2 t, c, k9, m;\nsub.rn.f16x2 t, t, m;\n"
        "shl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x2, t, s;\n"
        "cvt.rn.f16x2.f32 h, $8, $4;\nabs.f16x2 c, h;\nmin.f16x2 c, c, top;\nmax.f16x2 m, c, low;\n"
        "and.b32 m, m, 0x7C007C00;\nfma.rn.f16x2 t, c, k9, m;\nsub.rn.f16x2 t, t, m;\n"
        "shl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x3, t, s;\n"
        "prmt.b32 y0, x0, x1, 0x7531;\nprmt.b32 y1, x2, x3, 0x7531;\n"
        "shr.b32 x0, y0, 4;\nshr.b32 x1, y0, 8;\nadd.u32 y0, x0, x1;\n"
        "shr.b32 x2, y1, 4;\nshr.b32 x3, y1, 8;\nadd.u32 y1, x2, x3;\n"
        "prmt.b32 $0, y0, y1, 0x6420;\n}",
        "=r,r,r,r,r,r,r,r,r",
        [low, high],
        dtype=tl.uint8,
        is_pure=True,
        pack=4,
    )


@device
def _bf16x2_max_ignoring_nan(a, b):
    """``max.bf16x2`` of two words of bfloat16 pairs: per half, a NaN operand loses (``fmaxf``)."""
    return tl.inline_asm_elementwise("max.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1)


@device
def _bf16x2_max_propagating_nan(a, b):
    """``max.NaN.bf16x2``: per half, a NaN operand wins (as canonical NaN)."""
    return tl.inline_asm_elementwise(
        "max.NaN.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1
    )


@device
def _half_maxima_interpreted(words, AXIS: tl.constexpr, EDGES: tl.constexpr):
    """:func:`_half_maxima` as integer maxima of the float32 magnitude bits of each half (``te``: NaN zeroed)."""
    low = (words << 16) & 0x7FFF0000
    high = words & 0x7FFF0000
    if EDGES == 0:
        low = tl.where(low > 0x7F800000, 0, low)
        high = tl.where(high > 0x7F800000, 0, high)
    if AXIS == 3:
        return _amax(_amax(low, 2), 0), _amax(_amax(high, 2), 0)
    return _amax(low, AXIS), _amax(high, AXIS)


@device_modes(interpreted=_half_maxima_interpreted)
def _half_maxima(words, AXIS: tl.constexpr, EDGES: tl.constexpr):
    """``(low, high)``: int32 float32 bits of the maxima of ``|x|`` over the low and the high bfloat16 halves of
    int32 ``words`` (``[BM, NB, 16]``, element ``2i`` in the low half) along AXIS 0 or 2, or 3 (axis 2, then 0).

    ``te`` (EDGES 0): NaN never wins and a half with only NaN gives 0; the torchao edges: NaN wins (its bits then
    exceed Inf's).  Compiled: ``|x|`` of both halves by one ``and``, one ``max.bf16x2`` / ``max.NaN.bf16x2`` per
    word (two elements).
    """
    magnitude = words & 0x7FFF7FFF
    if EDGES == 0:
        if AXIS == 3:
            maxima = tl.reduce(tl.reduce(magnitude, 2, _bf16x2_max_ignoring_nan), 0, _bf16x2_max_ignoring_nan)
        else:
            maxima = tl.reduce(magnitude, AXIS, _bf16x2_max_ignoring_nan)
    elif AXIS == 3:
        maxima = tl.reduce(tl.reduce(magnitude, 2, _bf16x2_max_propagating_nan), 0, _bf16x2_max_propagating_nan)
    else:
        maxima = tl.reduce(magnitude, AXIS, _bf16x2_max_propagating_nan)
    low = maxima << 16
    high = maxima & 0x7FFF0000
    if EDGES == 0:  # only NaN in the half: max.bf16x2 gives NaN
        low = tl.where(low > 0x7F800000, 0, low)
        high = tl.where(high > 0x7F800000, 0, high)
    return low, high


@device
def _e2m1_words_interpreted(words, reciprocal):
    """:func:`_e2m1_words` as float32 products and :func:`mx_code` (interpreted: integer arithmetic) of each half."""
    low = (words << 16).to(tl.float32, bitcast=True) * (reciprocal << 16).to(tl.float32, bitcast=True)
    high = (words & -65536).to(tl.float32, bitcast=True) * (reciprocal & -65536).to(tl.float32, bitcast=True)
    low_code = mx_code(low, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    high_code = mx_code(high, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    return (low_code | (high_code << 4)).to(tl.uint8)


@device_modes(interpreted=_e2m1_words_interpreted)
def _e2m1_words(words, reciprocal):
    """uint8 ``code(x0 * r0) | code(x1 * r1) << 4`` of int32 ``words`` of bfloat16 pairs ``(x0, x1)`` (``x0`` the low
    half) and ``reciprocal``, words of bfloat16 powers of two ``(r0, r1)`` (the block reciprocals ``2**(127 - s)``,
    ``2**-127`` a subnormal): :func:`mx_code`'s contract for E2M1 (saturating RNE, NaN -> +max) of the float32
    product, two elements per instruction in bfloat16x2 arithmetic.

    Per word: ``v = x * r`` (``mul.rn.bf16x2``: exact where the product is a bfloat16 normal; a smaller one has
    code 0 and keeps its sign, as in float32; NaN -> the canonical positive NaN); ``c = min(|v|, 6)`` (NaN -> 6);
    ``m = 2**(max(e, 0) - 120)``, ``e`` the exponent of ``c``, from ``max(c, 1)``'s exponent bits less 120;
    ``t = fma(c, 2**-126, m) - m``: the fma rounds ``c`` once, to nearest even at the E2M1 step of its binade
    (``m``'s last place), and the difference ``r * 2**-126`` is exact (a bfloat16 subnormal below ``r = 1``) with
    bits ``code << 6``, as bfloat16's exponent field and subnormals mirror E2M1's (bias 1, a subnormal 0.5).
    Shifted left by 6 with ``v``'s sign or-ed in, each half holds its nibble in its top 4 bits; ``prmt`` gathers
    those bytes of two words, a multiply by 17 adds each byte's nibble into the one above, and a last ``prmt``
    keeps the four packed bytes.  Interpreted: :func:`_e2m1_words_interpreted`.  ``tests/gpu/test_gpu_mx.py``
    checks every bfloat16 value at every scale byte.
    """
    return tl.inline_asm_elementwise(
        "{\n.reg .b32 v, c, m, t, u0, u1, u2, u3, six, one, k126;\n"
        "mov.b32 six, 0x40C040C0;\nmov.b32 one, 0x3F803F80;\nmov.b32 k126, 0x00800080;\n"
        "mul.rn.bf16x2 v, $1, $5;\nabs.bf16x2 c, v;\nmin.bf16x2 c, c, six;\nmax.bf16x2 m, c, one;\n"
        "and.b32 m, m, 0x7F807F80;\nsub.u32 m, m, 0x3C003C00;\nfma.rn.bf16x2 t, c, k126, m;\n"
        "sub.rn.bf16x2 t, t, m;\nshl.b32 t, t, 6;\nlop3.b32 u0, t, v, 0x80008000, 0xF8;\n"
        "mul.rn.bf16x2 v, $2, $6;\nabs.bf16x2 c, v;\nmin.bf16x2 c, c, six;\nmax.bf16x2 m, c, one;\n"
        "and.b32 m, m, 0x7F807F80;\nsub.u32 m, m, 0x3C003C00;\nfma.rn.bf16x2 t, c, k126, m;\n"
        "sub.rn.bf16x2 t, t, m;\nshl.b32 t, t, 6;\nlop3.b32 u1, t, v, 0x80008000, 0xF8;\n"
        "mul.rn.bf16x2 v, $3, $7;\nabs.bf16x2 c, v;\nmin.bf16x2 c, c, six;\nmax.bf16x2 m, c, one;\n"
        "and.b32 m, m, 0x7F807F80;\nsub.u32 m, m, 0x3C003C00;\nfma.rn.bf16x2 t, c, k126, m;\n"
        "sub.rn.bf16x2 t, t, m;\nshl.b32 t, t, 6;\nlop3.b32 u2, t, v, 0x80008000, 0xF8;\n"
        "mul.rn.bf16x2 v, $4, $8;\nabs.bf16x2 c, v;\nmin.bf16x2 c, c, six;\nmax.bf16x2 m, c, one;\n"
        "and.b32 m, m, 0x7F807F80;\nsub.u32 m, m, 0x3C003C00;\nfma.rn.bf16x2 t, c, k126, m;\n"
        "sub.rn.bf16x2 t, t, m;\nshl.b32 t, t, 6;\nlop3.b32 u3, t, v, 0x80008000, 0xF8;\n"
        "prmt.b32 u0, u0, u1, 0x7531;\nprmt.b32 u2, u2, u3, 0x7531;\n"
        "mul.lo.u32 u0, u0, 17;\nmul.lo.u32 u2, u2, 17;\nprmt.b32 $0, u0, u2, 0x7531;\n}",
        "=r,r,r,r,r,r,r,r,r",
        [words, reciprocal],
        dtype=tl.uint8,
        is_pure=True,
        pack=4,
    )


@device
def _amax(magnitude, AXIS: tl.constexpr):
    """Integer max along ``AXIS``, as ``tl.reduce`` with Triton's own max combiner.

    ``tl.max`` is a ``triton.jit`` function bound when Triton was imported, so a process that turns the
    interpreter on later could not call it; the interpreter runs this combiner as ``numpy.nanmax``.
    """
    return tl.reduce(magnitude, AXIS, tl.standard._elementwise_max)


@device
def _max_ignoring_nan(a, b):
    """``max.f32``: a NaN operand loses (C ``fmaxf``, TransformerEngine's amax)."""
    return tl.maximum(a, b)


@device
def _max_propagating_nan(a, b):
    """``max.NaN.f32``: a NaN operand wins (``torch.amax``, torchao's amax)."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@device
def _block_amax_interpreted(value, AXIS: tl.constexpr, EDGES: tl.constexpr):
    """:func:`_block_amax` as an integer max over float32 magnitude bits (NumPy's nanmax, the interpreter's float
    max, mishandles signalling NaNs); ``te`` zeroes NaN magnitudes first."""
    magnitude = value.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    if EDGES == 0:
        magnitude = tl.where(magnitude > 0x7F800000, 0, magnitude)
    if AXIS == 3:
        return _amax(_amax(magnitude, 2), 0)
    return _amax(magnitude, AXIS)


@device_modes(interpreted=_block_amax_interpreted)
def _block_amax(value, AXIS: tl.constexpr, EDGES: tl.constexpr):
    """int32 float32 bits of the block maxima of ``|value|`` (``[BM, NB, 32]``) along AXIS 0 or 2, or 3 (axis 2,
    then 0: 32x32 tiles).

    ``te`` (EDGES 0): NaN never wins and an all-NaN block has amax 0; the torchao edges: NaN wins (its bits then
    exceed Inf's).  Compiled, one ``max.f32`` / ``max.NaN.f32`` per element with ``|x|`` as a free operand
    modifier.
    """
    magnitude = tl.abs(value)
    if EDGES == 0:
        if AXIS == 3:
            amax = tl.reduce(tl.reduce(magnitude, 2, _max_ignoring_nan), 0, _max_ignoring_nan)
        else:
            amax = tl.reduce(magnitude, AXIS, _max_ignoring_nan)
        amax = tl.maximum(amax, 0.0)  # fmaxf(NaN, 0) = 0
    elif AXIS == 3:
        amax = tl.reduce(tl.reduce(magnitude, 2, _max_propagating_nan), 0, _max_propagating_nan)
    else:
        amax = tl.reduce(magnitude, AXIS, _max_propagating_nan)
    return amax.to(tl.int32, bitcast=True)


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
    float16 inputs: :func:`_e2m1_pairs` (bfloat16 FP4 tiles take :func:`_quantize_bf16_fp4_tile`); FP6 and FP4 of
    float32 inputs: :func:`mx_code`, where NaN gives +max.  The torchao edges: every NaN sits in a block of scale
    255, whose codes are 0 (the codes of +0: such elements are zeroed before the cast, as the two nibbles of a
    columnwise FP4 byte have different scales).
    """
    reciprocal = mx_reciprocal(scale, ZERO_BITS)
    if PACK and INPUT != 0:
        reciprocal = reciprocal * 0.03125  # exact (float32 subnormals included): _e2m1_pairs takes v / 32
    scaled = value * reciprocal
    if EDGES != 0:
        scaled = tl.where(scale == 255, 0.0, scaled)
    if PACK:
        BM: tl.constexpr = value.shape[0]
        NB: tl.constexpr = value.shape[1]
        low, high = tl.split(tl.reshape(scaled, [BM, NB, 16, 2]))
        if INPUT != 0:
            codes = _e2m1_pairs(low, high)
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
    (``stride`` = K-tiles), for :func:`_unstage_row_scales`."""
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
def _reciprocal_pairs(low, high, ZERO_BITS: tl.constexpr):
    """int32 words of the bfloat16 reciprocals ``2**(127 - s)`` of scale bytes ``low`` (low half) and ``high``."""
    low_bits = mx_reciprocal(low, ZERO_BITS).to(tl.int32, bitcast=True) >> 16  # exact: 16 low bits are 0
    high_bits = mx_reciprocal(high, ZERO_BITS).to(tl.int32, bitcast=True) & -65536
    return low_bits | high_bits


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
    order of the packed codes), block maxima by :func:`_half_maxima`, codes by :func:`_e2m1_words` -- two elements
    per instruction throughout, no float32 values.  A columnwise word holds two columns: two scale bytes, their
    reciprocals in its two halves."""
    NB: tl.constexpr = BLOCK_K // 32
    pair = tile_k * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    word_ptrs = x_ptr.to(tl.pointer_type(tl.int32)) + row.to(tl.int64)[:, None] * (cols // 2) + pair[None, :]
    in_range = (row[:, None] < rows) & (pair[None, :] < cols // 2)
    loaded = tl.load(word_ptrs) if EVEN else tl.load(word_ptrs, mask=in_range, other=0)
    words = tl.reshape(loaded, [BLOCK_M, NB, 16])
    if TWO_D:  # one 32x32 tile per block of NB (BLOCK_M == 32)
        low, high = _half_maxima(words, 3, EDGES)
        scale = mx_scale_byte(tl.maximum(low, high), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
        if EDGES != 0:  # blocks of scale 255 get codes 0
            words = tl.where(scale[None, :, None] == 255, 0, words)
        codes = _e2m1_words(words, _reciprocal_pairs(scale, scale, ZERO_BITS)[None, :, None])
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
            low, high = _half_maxima(words, 2, EDGES)
            row_scale = mx_scale_byte(tl.maximum(low, high), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            row_words = words
            if EDGES != 0:
                row_words = tl.where(row_scale[:, :, None] == 255, 0, words)
            codes = _e2m1_words(row_words, _reciprocal_pairs(row_scale, row_scale, ZERO_BITS)[:, :, None])
            _store_data(codes, row_data_ptr, row, tile_k, data_stride, rows, cols, True, EVEN)
            _store_row_scales(
                row_scale, row_scale_ptr, row, tile_k, row_scale_stride, rows, cols, SWIZZLED, STAGED, EVEN
            )
        if COLUMNWISE:  # 32x1 blocks: axis 0 (BLOCK_M == 32), two columns per word
            low, high = _half_maxima(words, 0, EDGES)
            low_scale = mx_scale_byte(low, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            high_scale = mx_scale_byte(high, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE)
            if EDGES != 0:
                words = words & (tl.where(low_scale == 255, 0, 0xFFFF) | tl.where(high_scale == 255, 0, -65536))[None]
            codes = _e2m1_words(words, _reciprocal_pairs(low_scale, high_scale, ZERO_BITS)[None, :, :])
            _store_data(codes, col_data_ptr, row, tile_k, data_stride, rows, cols, True, EVEN)
            scale = tl.reshape(tl.join(low_scale, high_scale), [NB, 32])
            _store_col_scales(scale, col_scale_ptr, col, tile_m, col_scale_stride, cols, SWIZZLED, EVEN)


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
            scale = mx_scale_byte(
                _block_amax(value, 3, EDGES), EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE
            )
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
                amax = _block_amax(value, 2, EDGES)
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
                amax = _block_amax(value, 0, EDGES)
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


def _unstage_row_scales(
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


# %% Tile configurations


class _Tile(NamedTuple):
    block_m: int
    block_k: int
    num_warps: int
    max_registers: int | None = None
    """ptxas's register cap per thread (``maxnreg``), or its own choice: fewer registers, more programs per SM."""

    @property
    def options(self) -> dict[str, int]:
        """Compile options of the tile besides its constexprs."""
        cap = {} if self.max_registers is None else {"maxnreg": self.max_registers}
        return {"num_warps": self.num_warps, **cap}


def _autotune_configs(rows_of_32: bool, staged: bool = False) -> list[_Tile]:
    """Tiles tried on CUDA (the first is also the interpreter's): ``rows_of_32`` when columnwise or 2d blocks
    fix ``BLOCK_M = 32``; rowwise-only tiles may take more or fewer rows.  ``BLOCK_K`` is a power of two >= 32.

    Beside the general tiles, the fastest of H100/H200 sweeps of the kernel-bound cases (``docs/performance.md``):
    one warp on 32x64 or 32x128 for columnwise and both (a columnwise block then lies within one warp: its maximum
    takes register and shuffle operations, no shared memory round trip and barrier across warps; 92-94% of copy
    bandwidth for MXFP8 columnwise on an H200 against 66% with 32x256 on 8 warps), 32x256 for 2d, 8x512x4 for
    FP4; and 32x128 on 2 warps with registers capped at 96 (MXFP8 rowwise + columnwise takes 122 uncapped and does
    not spill at 96: 10 programs per SM instead of 8; H100, bfloat16 8192^2: 0.1028 -> 0.1019 ms).  ``staged``
    (:func:`_stages_row_scales`) keeps the tiles at least 128 wide.
    """
    if rows_of_32:
        tiles = [
            _Tile(32, 256, 8),
            _Tile(32, 64, 1),
            _Tile(32, 128, 1),
            _Tile(32, 128, 2),
            _Tile(32, 64, 2),
            _Tile(32, 256, 4),
            _Tile(32, 128, 2, 96),
        ]
        return [tile for tile in tiles if tile.block_k >= 128 or not staged]
    return [_Tile(32, 256, 8), _Tile(16, 256, 4), _Tile(32, 128, 4), _Tile(64, 256, 8), _Tile(8, 512, 4)]


_AUTOTUNE_MIN_ELEMENTS = 1 << 22
"""Inputs smaller than this take the first tile of :func:`_autotune_configs` without autotuning: tuning compiles
every tile for each new shape (seconds), which dominates conformance runs over many small shapes."""
_TILE_ENV = "QCONFORM_MX_TILE"
"""Optional ``BLOCK_MxBLOCK_KxWARPS[xMAX_REGISTERS]`` (e.g. ``32x256x8``, ``32x128x2x96``) fixing the tile instead
of autotuning it (benchmarks)."""


@functools.cache
def _tuned_kernel(interpret: str | None, rows_of_32: bool, staged: bool) -> Any:
    """The kernel, autotuned over :func:`_autotune_configs` on CUDA (keyed on shape and what it writes)."""
    configs = [
        triton.Config({"BLOCK_M": t.block_m, "BLOCK_K": t.block_k}, num_warps=t.num_warps, maxnreg=t.max_registers)
        for t in _autotune_configs(rows_of_32, staged)
    ]
    key = ["rows", "cols", "ROWWISE", "COLUMNWISE", "TWO_D", "PACK", "INPUT", "SWIZZLED"]
    even = triton.heuristics(
        {"EVEN": lambda args: args["rows"] % args["BLOCK_M"] == 0 and args["cols"] % args["BLOCK_K"] == 0}
    )
    return triton.autotune(configs=configs, key=key)(even(jit(_mx_kernel)))


# %% Launcher


_RUNTIME_ARGS = 10
"""The kernel's leading runtime arguments (pointers and sizes); the rest of its signature is constexpr."""
_LAUNCHES = LaunchCache(_mx_kernel, _RUNTIME_ARGS)
"""Compiled launches by plan, input dtype, device, input alignment and tile override (module docstring, "Launch")."""


def _launch(x: torch.Tensor, plan: _Plan, outputs: dict[str, torch.Tensor]) -> None:
    """Run the kernel over ``x`` (contiguous, viewed as ``[M, K]``) into the allocated ``outputs``; when it stages
    the rowwise scales (:func:`_stages_row_scales`), :func:`_unstage_row_scales` after it."""
    fixed = os.environ.get(_TILE_ENV)
    tile = _fixed_tile(fixed, plan) if fixed else None
    staging = None
    if _stages_row_scales(plan, tile):
        widest = tile.block_k if tile else max(t.block_k for t in _autotune_configs(True, staged=True))
        staging = torch.empty(_round_up(plan.rows, 32) * _round_up(plan.cols, widest) // 32, dtype=torch.uint8,
                              device=x.device)  # fmt: skip
    key = (plan, x.dtype, x.device, x.data_ptr() % 16, fixed)  # Triton specializes on 16-byte alignment
    block_k = _launch_quantize(x, plan, outputs, staging, key, tile)
    if staging is not None:
        _unstage(staging, outputs["scale_rowwise"], plan, block_k // 32, key)


def _fixed_tile(fixed: str, plan: _Plan) -> _Tile:
    """The tile that ``QCONFORM_MX_TILE=fixed`` names, checked against ``plan``."""
    tile = _Tile(*(int(part) for part in fixed.split("x")))
    if (
        ((plan.columnwise or plan.two_d) and tile.block_m != 32)
        or tile.block_k % 32
        or tile.block_k & (tile.block_k - 1)
    ):
        raise ValueError(
            f"Got {_TILE_ENV}={fixed!r}, but BLOCK_K must be a power of two >= 32 and BLOCK_M 32 with "
            "columnwise or 2d blocks"
        )
    return tile


def _stages_row_scales(plan: _Plan, tile: _Tile | None) -> bool:
    """Whether the kernel stages its rowwise scale bytes (:func:`_store_row_scales`) for
    :func:`_unstage_row_scales` to copy into the compact matrix: MXFP8 with rowwise and columnwise 1x32 blocks and
    compact scales, ``K`` a multiple of 128 and tiles (the fixed ``tile`` or every autotuned one) at least 128
    wide, so that rows of staged scales are whole int32 words.

    A 32-row tile's row holds ``BLOCK_K / 32`` bytes of a 32-byte sector of the compact matrix, and stores
    narrower than a sector cost the L2 one transaction each (``docs/performance.md``, "Partial-sector scale
    writes"); the staged tiles and the copy store whole sectors.  Measured on an H100 (bfloat16 8192^2): 0.1023 ->
    0.0995 ms; MXFP6 and MXFP4, whose kernels the scale stores do not hold back, get slower, as does 2d.
    """
    return (
        plan.fmt.bits == 8
        and plan.rowwise
        and plan.columnwise
        and not plan.two_d
        and not plan.swizzled
        and plan.cols % 128 == 0
        and (tile is None or tile.block_k >= 128)
    )


_UNSTAGE_BYTES = 64
"""Scale bytes along a row that one program of :func:`_unstage_row_scales` copies, at most (two sectors)."""
_UNSTAGE_LAUNCHES = LaunchCache(_unstage_row_scales, 5)
"""Compiled launches of :func:`_unstage_row_scales` by the quantize kernel's key."""


def _unstage(staging: torch.Tensor, scale: torch.Tensor, plan: _Plan, per_tile: int, key: Hashable) -> None:
    """Copy the staged rowwise scales (``per_tile`` bytes a row of each tile, a multiple of 4) into the compact
    ``scale``, as int32 words.  Launched dependent on the quantize kernel where the GPU can (compute capability
    9.0+): its programs start as the kernel's last ones finish and wait for it (``griddepcontrol.wait``), which
    takes its launch off the critical path (H100, bfloat16 8192^2: 0.1011 -> 0.0995 ms)."""
    words = plan.cols // BLOCK_SIZE // 4
    args = (staging.view(torch.int32), scale.view(torch.int32), plan.rows, words, scale.shape[1] // 4)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if not interpret and _UNSTAGE_LAUNCHES.launch(key, args):
        return
    tiles_k = triton.cdiv(words, per_tile // 4)
    tiles = unstaged_tiles(per_tile, tiles_k)
    dependent = dependent_launch(scale.device)
    meta = {"BLOCK_M": 32, "PER_TILE": per_tile // 4, "TILES": tiles, "WAIT": dependent}
    grid = triton.cdiv(plan.rows, 32) * triton.cdiv(tiles_k, tiles)
    options = {"launch_pdl": True} if dependent else {}
    compiled = jit(_unstage_row_scales)[(grid,)](*args, **meta, num_warps=4, **options)
    if not interpret:
        _UNSTAGE_LAUNCHES.store(key, compiled, grid, meta)


def dependent_launch(device_: torch.device) -> bool:
    """Whether a kernel on ``device_`` can be launched as a programmatic dependent of the one before it
    (``launch_pdl``, :func:`~fast._triton.wait_for_primary`): compiled, on compute capability 9.0 and later."""
    return os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.get_device_capability(device_) >= (9, 0)


def unstaged_tiles(per_tile: int, tiles_k: int) -> int:
    """Tiles one program of :func:`unstage_tiles` copies: ``_UNSTAGE_BYTES`` of a row, as few as the row has."""
    return min(max(_UNSTAGE_BYTES // per_tile, 1), triton.next_power_of_2(tiles_k))


def _launch_quantize(
    x: torch.Tensor,
    plan: _Plan,
    outputs: dict[str, torch.Tensor],
    staging: torch.Tensor | None,
    key: Hashable,
    tile: _Tile | None,
) -> int:
    """Run the quantize kernel on the fixed ``tile`` or the autotuned one (rowwise scales into ``staging`` when
    given); its ``BLOCK_K``."""
    interpret = os.environ.get("TRITON_INTERPRET")
    # A direction not asked for gets the other's buffers as (never written) stand-ins.
    row_data = outputs.get("data_rowwise", outputs.get("data_columnwise"))
    assert row_data is not None  # _allocate makes at least one direction
    col_data = outputs.get("data_columnwise", row_data)
    row_scale = outputs.get("scale_rowwise", row_data) if staging is None else staging
    col_scale = outputs.get("scale_columnwise", row_data)
    row_scale_stride = plan.row_scale_shape[1] // 4 if plan.swizzled else plan.row_scale_shape[1]
    col_scale_stride = plan.col_scale_shape[0] // 4 if plan.swizzled else plan.col_scale_shape[1]
    data_stride = plan.cols // 2 if plan.fmt.bits == 4 else plan.cols
    args = (x, row_data, row_scale, col_data, col_scale, plan.rows, plan.cols, data_stride, row_scale_stride,
            col_scale_stride)  # fmt: skip
    if interpret != "1" and _LAUNCHES.launch(key, args):
        return _LAUNCHES.constant(key, "BLOCK_K")
    if x.device.type != "cuda" and interpret != "1":
        raise RuntimeError(
            f"Got {_PATH_ENV}=triton and x on {x.device}, but the Triton kernel runs CPU tensors only in Triton's "
            "interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    if interpret != "1" and plan.fmt.fp8 and not _has_fp8_conversion(x.device):
        raise RuntimeError(
            f"Got {_PATH_ENV}=triton and an FP8 format on {x.device} (compute capability "
            f"{torch.cuda.get_device_capability(x.device)}), but the MXFP8 kernel converts with "
            f"cvt.rn.satfinite.e4m3x2.f32, which needs 8.9 or later; use {_PATH_ENV}=auto or torch there"
        )
    meta = {**_constants(plan, x.dtype), "STAGED": staging is not None}
    rows_of_32 = plan.columnwise or plan.two_d
    if interpret == "1" or tile or plan.rows * plan.cols < _AUTOTUNE_MIN_ELEMENTS:
        tile = tile or _autotune_configs(rows_of_32)[0]
        even = plan.rows % tile.block_m == 0 and plan.cols % tile.block_k == 0
        meta.update(BLOCK_M=tile.block_m, BLOCK_K=tile.block_k, EVEN=even)
        kernel = jit(_mx_kernel)[(_grid(plan, tile.block_m, tile.block_k),)]
        if interpret == "1":
            import numpy as np  # the interpreter computes in NumPy: NaN inputs must not raise warnings there

            with np.errstate(all="ignore"):
                kernel(*args, **meta, num_warps=tile.num_warps)  # the interpreter has no registers to cap
            return tile.block_k
        compiled = kernel(*args, **meta, **tile.options)
    else:
        tuned = _tuned_kernel(interpret, rows_of_32, staging is not None)
        compiled = tuned[lambda config: (_grid(plan, config["BLOCK_M"], config["BLOCK_K"]),)](*args, **meta)
        best = tuned.best_config.kwargs
        meta.update(BLOCK_M=best["BLOCK_M"], BLOCK_K=best["BLOCK_K"])
        meta.update(EVEN=plan.rows % meta["BLOCK_M"] == 0 and plan.cols % meta["BLOCK_K"] == 0)
    _LAUNCHES.store(key, compiled, _grid(plan, meta["BLOCK_M"], meta["BLOCK_K"]), meta)
    return meta["BLOCK_K"]


def _grid(plan: _Plan, block_m: int, block_k: int) -> int:
    """Programs of the 1-D grid: one per ``block_m x block_k`` tile."""
    return triton.cdiv(plan.rows, block_m) * triton.cdiv(plan.cols, block_k)


def _constants(plan: _Plan, dtype: torch.dtype) -> dict[str, Any]:
    """The kernel's constexpr arguments other than the tile."""
    fmt = plan.fmt
    return {
        "FP8": fmt.fp8,
        "MANTISSA_BITS": fmt.mantissa_bits,
        "BIAS": fmt.bias,
        "MAX_CODE": fmt.max_code,
        "MAX_VALUE": fmt.max_value,
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
        "INPUT": _INPUT_IDS[dtype],
    }


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
        if plan.edges == "torchao_018":
            byte = byte - _log2_keeps_power_torch(exponent, mantissa)
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


def _log2_keeps_power_torch(exponent: torch.Tensor, mantissa: torch.Tensor) -> torch.Tensor:
    """int32 1 where torchao 0.18's ``ceil(log2(d))`` stays at ``j`` above ``2**j``: :func:`mx_log2_keeps_power`."""
    offset = torch.where(exponent == 0, 2 * (mantissa - 0x400000), mantissa)
    j = exponent - 127
    a = torch.where(j >= 0, j, -j - 1)
    slack = (a >= 4).to(torch.int32) + (a >= 8) + 3 * (a >= 16) + 6 * (a >= 32) + 11 * (a >= 64)
    return ((offset > 0) & (offset <= slack) & (exponent < 255)).to(torch.int32)


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
    outputs = _allocate(x, plan)
    if _use_triton(x.device, plan):
        _launch(x, plan, outputs)
    else:
        _torch_path(x.view(plan.rows, plan.cols), plan, outputs)
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


def _use_triton(device_: torch.device, plan: _Plan) -> bool:
    """The kernel, or the torch path; ``auto`` takes the kernel for CUDA tensors when Triton is importable and, for
    FP8, the GPU converts to FP8 in hardware."""
    choice = os.environ.get(_PATH_ENV, "auto")
    if choice not in ("auto", "triton", "torch"):
        raise ValueError(f"Got {_PATH_ENV}={choice!r}, but {_PATH_ENV} must be one of ['auto', 'triton', 'torch']")
    if choice == "triton" and triton is None:
        raise RuntimeError(f"Got {_PATH_ENV}=triton, but triton is not installed")
    if choice != "auto":
        return choice == "triton"
    return device_.type == "cuda" and triton is not None and (plan.fmt.fp8 == 0 or _has_fp8_conversion(device_))


@functools.cache
def _has_fp8_conversion(device_: torch.device) -> bool:
    """Whether ``device_`` has ``cvt.rn.satfinite.e4m3x2.f32`` (compute capability 8.9 and later)."""
    return torch.cuda.get_device_capability(device_) >= (8, 9)


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
