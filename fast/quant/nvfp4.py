"""NVFP4 quantization (contract ``quant.nvfp4``): fused Triton kernels for CUDA, torch ops elsewhere.

Contract (``specs/quant/nvfp4.yaml``; the reference is ``reference/quant/nvfp4.py``): ``x [M, K]``
(float32, bfloat16 or float16; ``M`` and ``K`` multiples of 16) gives a rowwise operand ``x`` and a
columnwise operand ``x.T`` (optionally through TE's 16-point random Hadamard transform, rounded to
bfloat16).  Each operand gets an amax (per tensor or per row), a float32 tensor scale, one E4M3 block
scale per 16 elements (1x16 along its rows or 16x16 tiles) and E2M1 codes of ``fl32(v * enc)``, two
per byte, low nibble first.  ``scale_rule`` picks TransformerEngine's or torchao's scale arithmetic.

Layout
------
Rowwise: ``data`` uint8 ``[M, K/2]`` (byte ``[m, j]`` holds elements ``2j`` (low nibble) and ``2j+1``
of row ``m``), ``scales`` uint8 E4M3 ``[M, K/16]`` (compact: no padding, no swizzle; a 16x16 tile's
scale is stored on each of its 16 rows), ``amax`` / ``tensor_scale`` float32 ``[1]`` or ``[M]``.
Columnwise: the same for ``x.T``, i.e. ``columnwise_data [K, M/2]`` (transposed), ``columnwise_scales
[K, M/16]``, ``columnwise_amax`` / ``columnwise_tensor_scale`` ``[1]`` or ``[K]``.  The cuBLAS 128x4
swizzle of the scales is the separate contract ``layout.scale_swizzle``.

Kernels
-------
Two passes over ``x``, the fewest a global amax allows; with ``amax_source="given"`` only the quantize pass runs
(one launch, one read of ``x``: its programs read the caller's amaxes and program 0 copies them into the outputs):

1. ``_nvfp4_tensor_amax_kernel`` (``x`` as a flat array) or ``_nvfp4_amax_kernel`` (tiles: with RHT, the
   transformed columnwise operand too, or row amaxes): persistent programs keep an elementwise running maximum
   of ``|x|`` with ``max.f32``, which ignores NaN as TE's ``fmaxf`` does (torchao's rules propagate it), reduce
   it once and store its float32 bits per program, which the quantize pass reduces, or ``atomic_max`` them
   (tiles; non-negative floats order like their bits; per row or column, per tile, for the row-scaled
   variant).  The last tiles, 30-45% of L2 (``_kept_bytes``), are loaded evict-last and everything else
   evict-first, so that the quantize pass, which starts there, finds them in L2.
2. ``_nvfp4_quantize_kernel``: persistent programs over ``[BM, BK]`` tiles of ``x`` (128 x 64 for both
   operands), each tile read once.  The tensor scales come from the amaxes once per program; the
   rowwise part reduces blocks of 16 along ``K``, computes the E4M3 block scales and encode scales,
   rounds ``fl32(v * enc)`` to E2M1 and writes packed data and scales.  The columnwise part works in
   ``x``'s orientation too (no transposed tile): blocks are 16 rows of a column, the Hadamard
   butterflies run down the columns, and a byte is a pair of rows; only the packed bytes and the
   scales are transposed, by their stores, which give each row of ``[K, M/2]`` (``[K, M/16]``)
   ``BM / 2`` (``BM / 16``) contiguous bytes.  The tile is loaded as a 5-D or 6-D view
   (:func:`_column_tile`) that leaves the two rows of a byte and 8 of a block's 16 rows in one
   thread, or all 16 (the columnwise operand alone, and with RHT).  Programs walk the tiles in
   reverse, so the tiles the amax pass read last (still in L2) are read first; with 16 x 16 tiles they
   load two tiles ahead (``_Launch.stages``, ``cp.async``).  The rowwise operand
   alone takes ``_nvfp4_rowwise_kernel``, which reads ``x`` as words in contiguous 16-byte pieces; the
   columnwise operand alone, from 16-bit input on whole tiles with round to nearest (:func:`_gluon_columnwise`),
   takes the Gluon kernel of ``fast.quant.nvfp4_gluon``, which stores the transposed codes and scales in wider
   pieces than this kernel can.
   Each kernel's tile body is a device function, :func:`quantize_tile` and :func:`rowwise_tile`
   (tile, dims, pointers, scale-row strides, the tensor scales' ``p0, p1``), which ``fast.group``'s
   grouped kernel runs on every member's tiles.

All the float arithmetic is the contract's, in float32: IEEE divisions and reciprocals (``tl.div_rn``,
``rcp.rn.f32``), products that are each rounded once (floating-point contraction is turned off at
launch: an FMA would skip the rounding of a product).  Compiled, round to nearest makes two E2M1 codes
per float16x2 sequence (:func:`_e2m1_pairs`: the float32 product rounded to odd at float16's precision,
so that rounding it again is exact) and the E4M3 block scale is the hardware's saturating conversion
(:func:`_e4m3_scale`); the 16 x 16 tiles' columnwise bytes pair the nibbles of the rowwise ones anew
(:func:`_store_columns`).  Interpreted, the integer bit arithmetic of :func:`e2m1_rne` (three candidate
roundings by float32 magic-number additions and their minimum) and ``_e4m3_rne`` (bit rounding in place).
Stochastic rounding with uint8 random bits is :func:`_e2m1_stochastic` (floors by ``fma.rm`` / ``add.rm``), with
uint32 bits and interpreted ``fast._triton.round_to_code``.  (H100, bfloat16 8192 x 8192, both operands: 38 -> 30
SASS instructions per element in Triton 3.6's sm_90 code, 168 registers.)

Paths
-----
``QCONFORM_FAST_PATH`` chooses per call, as in ``fast/cast.py``: ``auto`` (the kernels for CUDA
tensors when Triton is importable, else torch), ``triton`` (CPU tensors need ``TRITON_INTERPRET=1``)
or ``torch``.  The torch path is the same arithmetic with torch tensor ops (tensor-by-tensor
divisions only: torch rewrites a division by a Python number, and ``1 / t``, as multiplications by
a reciprocal) and the casts of ``fast.cast``.  This module imports without Triton and queries no
device at import time.
"""

from __future__ import annotations

import contextlib
import os
import struct
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from fast._triton import (
    PATH_ENV,
    device,
    device_modes,
    float32_bits,
    fp8_code,
    jit,
    round_to_code,
    selected_path,
    tl,
    triton,
)
from fast.cast import fp4 as cast_fp4
from fast.cast import fp8 as cast_fp8
from fast.pack import nibbles as pack_nibbles

__all__ = [
    "AMAX_SCOPES",
    "AMAX_SOURCES",
    "BLOCKS",
    "PATH_ENV",
    "RHT_SIGN_MASK",
    "ROUNDINGS",
    "SCALE_RULES",
    "USAGES",
    "ZERO_SCALES",
    "bench",
    "e2m1_rne",
    "hadamard_16_columns",
    "nvfp4",
    "quantize_tile",
    "rowwise_tile",
]

USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
AMAX_SOURCES: tuple[str, ...] = ("computed", "given")
BLOCKS: tuple[str, ...] = ("1x16", "16x16")
AMAX_SCOPES: tuple[str, ...] = ("tensor", "row")
ROUNDINGS: tuple[str, ...] = ("rne", "stochastic")
SCALE_RULES: tuple[str, ...] = ("te", "torchao", "torchao_cuda")
ZERO_SCALES: tuple[str, ...] = ("flt_max", "zero")
RHT_SIGN_MASK = 0xD7E8
"""TE's fixed RHT signs: bit ``i`` set where ``s_i = -1`` (``get_wgrad_sign_vector``)."""


def _f32(value: float) -> float:
    """``value`` rounded to float32 (round to nearest even), as a Python float."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


_FLT_MAX = _f32(3.4028234663852886e38)
_SIXTH = _f32(1.0 / 6.0)
"""fl32(1/6) = 0x3E2AAAAB (TE's ``fp4_max_inv``)."""
_INV_2688 = _f32(1.0 / 2688.0)
"""fl32(1/2688): torch's CUDA ``amax / 2688.0`` multiplies by it; TE's dequantizer's ``factor_inv``."""
_TORCHAO_FLOOR = 2.0**-6
_E4M3_MAX = 448.0
_INPUT_DTYPES: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_RANDOM_DTYPES: dict[torch.dtype, int] = {torch.uint8: 8, torch.uint32: 32}
_RULE_IDS: dict[str, int] = {"te": 0, "torchao": 1, "torchao_cuda": 2}
_F32_INF = 0x7F800000


class _Settings(NamedTuple):
    """The contract's parameters, checked."""

    usage: str
    block: str
    amax_scope: str
    rht: bool
    rounding: str
    scale_rule: str
    zero_scale: str
    amax_source: str = "computed"  # fast.group builds settings without it

    @property
    def rowwise(self) -> bool:
        return self.usage != "columnwise"

    @property
    def columnwise(self) -> bool:
        return self.usage != "rowwise"


# %% Device functions


@device
def e2m1_rne(scaled):
    """int32 E2M1 codes of float32 ``scaled``: round to nearest even, saturating, NaN -> +6 (0x7)."""
    return _e2m1_rne_raw(scaled) & 15


@device
def _e2m1_rne_raw(scaled):
    """:func:`e2m1_rne` in the low 4 bits, above them ``0x4B40000`` (the bits of ``1.5 * 2**23``).

    With ``a = min(|v|, 6)`` (``min.f32`` ignores NaN, so NaN gives 6: the saturation and the NaN rule
    in one instruction), the magnitude code is ``round(2a)`` below 2, ``round(a) + 2`` in [2, 4) and
    ``round(a / 2) + 4`` from 4 up (the E2M1 spacings 0.5, 1 and 2), each rounded to nearest even by
    one float32 addition of ``M = 1.5 * 2**23`` (spacing 1, the integer left in the low mantissa bits).
    Since ``2a <= a + 2`` exactly below 2 and ``a + 2 <= a / 2 + 4`` exactly below 4 (and the other way
    round above), and rounding is monotonic, the code is the minimum of the three.  The sign bit is
    added unless the input is NaN: as int32 the negative non-NaN patterns are exactly those
    ``<= 0xFF800000`` (-Inf).  Checked on all 2^32 float32 inputs against ``reference.cast.fp4``.  Six
    float32 instructions (the ``abs`` is an operand modifier of the first) and two integer ones.
    """
    a = tl.minimum(tl.abs(scaled), 6.0)
    # 2a and a / 2 are exact (a / 2 of a float32 subnormal may round, but then t2 is 4 + M anyway): FMA-safe.
    t0 = tl.fma(a, 2.0, 12582912.0)
    t2 = tl.fma(a, 0.5, 12582916.0)
    t = tl.minimum(tl.minimum(t0, a + 12582914.0), t2)
    negative = scaled.to(tl.int32, bitcast=True) <= -8388608  # 0xFF800000
    return t.to(tl.int32, bitcast=True) + tl.where(negative, 8, 0)


@device
def _e2m1_pairs_interpreted(low, high):
    """:func:`_e2m1_pairs` as two :func:`_e2m1_rne_raw` and a nibble pack (the interpreter cannot run PTX)."""
    return (_e2m1_rne_raw(low) + (_e2m1_rne_raw(high) << 4)).to(tl.uint8)


@device_modes(interpreted=_e2m1_pairs_interpreted)
def _e2m1_pairs(low, high):
    """uint8 ``code(low) | code(high) << 4``: :func:`e2m1_rne` of float32 products ``v = x * enc`` (a product makes
    every NaN the positive canonical one), two elements per instruction in float16x2 arithmetic.

    Per pair: the float32 bits are rounded to odd at float16's precision (``b | ((b + 0x1FFF) & 0x2000)`` sets bit 13
    where bits 0-12 are not all zero, as the add carries into it; ``cvt.rz.f16x2.f32`` then drops bits 0-12), so ``h``
    is ``v`` where ``v`` is a float16 and otherwise whichever of its two float16 neighbours has an odd last bit: ``h``
    equals an E2M1 midpoint (0.25, 0.75, ..., 5, all of them float16 values with an even last bit) only if ``v`` does,
    and lies on the same side of every other E2M1 midpoint and grid value, so rounding ``h`` to E2M1 is rounding ``v``
    (no double rounding; ``|v|`` below ``2**-14`` gives code 0 either way, beyond 65504 the clamp). Then, as
    ``fast.quant.mx._e2m1_pairs``: ``c = min(|h|, 6)`` (NaN -> 6), ``m = 2**-5 * 2**e`` with ``2**e`` the binade of
    ``max(c, 1)`` (1, 2 or 4: E2M1's step is ``2**(e - 1)``), ``t = c * 2**-14 + m`` (one ``fma``) rounds to nearest
    even at ``m``'s last place, which is the step times ``2**-14``, and ``t - m`` is the rounded value times ``2**-14``,
    whose float16 bits 9-11 are the magnitude code; shifted up by 3 beside ``h``'s sign, each half holds its nibble in
    the top of its byte 1 (the low nibble zero); ``prmt`` gathers those bytes, a product by 17 (``y + (y << 4)``, no
    carries) puts each pair's two nibbles in one byte and a last ``prmt`` gathers those.
    The sticky bit is an add and an and-or, not a ``setp`` and a predicated ``or``: outputs byte-equal, H200, bfloat16
    8192 x 8192, both operands 0.1378 -> 0.1326 ms, with a given amax 0.1023 -> 0.0971, grouped 8 x [4096, 7168] both
    0.4677 -> 0.4536 (``docs/performance.md``, 2026-12-01).
    ``tests/gpu/test_gpu_nvfp4.py`` checks it on every float32 within 2**14 ulps of each E2M1 midpoint and grid
    point, on every bfloat16 value at many scales and on random float32 patterns.
    """
    return tl.inline_asm_elementwise(
        "{\n.reg .b32 a, b, s, h, c, m, t, x0, x1, x2, x3, y0, y1, six, one, k14;\n"
        "mov.b32 six, 0x46004600;\nmov.b32 one, 0x3C003C00;\nmov.b32 k14, 0x04000400;\n"
        "add.u32 s, $1, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 a, $1, s;\n"
        "add.u32 s, $5, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 b, $5, s;\n"
        "cvt.rz.f16x2.f32 h, b, a;\nabs.f16x2 c, h;\nmin.f16x2 c, c, six;\nmax.f16x2 m, c, one;\n"
        "and.b32 m, m, 0x7C007C00;\nsub.u32 m, m, 0x14001400;\nfma.rn.f16x2 t, c, k14, m;\n"
        "sub.rn.f16x2 t, t, m;\nshl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x0, t, s;\n"
        "add.u32 s, $2, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 a, $2, s;\n"
        "add.u32 s, $6, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 b, $6, s;\n"
        "cvt.rz.f16x2.f32 h, b, a;\nabs.f16x2 c, h;\nmin.f16x2 c, c, six;\nmax.f16x2 m, c, one;\n"
        "and.b32 m, m, 0x7C007C00;\nsub.u32 m, m, 0x14001400;\nfma.rn.f16x2 t, c, k14, m;\n"
        "sub.rn.f16x2 t, t, m;\nshl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x1, t, s;\n"
        "add.u32 s, $3, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 a, $3, s;\n"
        "add.u32 s, $7, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 b, $7, s;\n"
        "cvt.rz.f16x2.f32 h, b, a;\nabs.f16x2 c, h;\nmin.f16x2 c, c, six;\nmax.f16x2 m, c, one;\n"
        "and.b32 m, m, 0x7C007C00;\nsub.u32 m, m, 0x14001400;\nfma.rn.f16x2 t, c, k14, m;\n"
        "sub.rn.f16x2 t, t, m;\nshl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x2, t, s;\n"
        "add.u32 s, $4, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 a, $4, s;\n"
        "add.u32 s, $8, 0x1FFF;\nand.b32 s, s, 0x2000;\nor.b32 b, $8, s;\n"
        "cvt.rz.f16x2.f32 h, b, a;\nabs.f16x2 c, h;\nmin.f16x2 c, c, six;\nmax.f16x2 m, c, one;\n"
        "and.b32 m, m, 0x7C007C00;\nsub.u32 m, m, 0x14001400;\nfma.rn.f16x2 t, c, k14, m;\n"
        "sub.rn.f16x2 t, t, m;\nshl.b32 t, t, 3;\nand.b32 s, h, 0x80008000;\nor.b32 x3, t, s;\n"
        "prmt.b32 y0, x0, x1, 0x7531;\nprmt.b32 y1, x2, x3, 0x7531;\n"
        "mul.lo.u32 y0, y0, 17;\nmul.lo.u32 y1, y1, 17;\nprmt.b32 $0, y0, y1, 0x7531;\n}",
        "=r,r,r,r,r,r,r,r,r",
        [low, high],
        dtype=tl.uint8,
        is_pure=True,
        pack=4,
    )


@device
def _e2m1_stochastic_interpreted(scaled, random, RANDOM_BITS: tl.constexpr):
    """:func:`_e2m1_stochastic` by ``fast._triton.round_to_code`` (the interpreter cannot run PTX)."""
    bits = scaled.to(tl.int32, bitcast=True)
    return round_to_code(bits, bits, random, 1, 1, 28, 8, True, 7, 7, 7, 2, RANDOM_BITS)


@device_modes(interpreted=_e2m1_stochastic_interpreted)
def _e2m1_stochastic(scaled, random, RANDOM_BITS: tl.constexpr):
    """int32 E2M1 codes (sign included, saturating, NaN -> +6 (0x7)) of float32 ``scaled`` rounded stochastically
    with the int32 random values ``random`` (uint8 values for ``RANDOM_BITS`` 8, uint32 bits for 32): the rule of
    ``fast._triton.round_to_code`` (``cast.fp4``'s: up iff the dropped fraction truncated to ``RANDOM_BITS`` bits
    exceeds ``2**RANDOM_BITS - 1 - r``).

    For 8 bits, compiled: with the E2M1 step ``s`` of ``a = min(|v|, 6)`` (``min.f32`` ignores NaN) and the
    fraction ``f`` of ``a / s``, "up" is ``floor(256 f) + r >= 256``, which for an integer ``r`` is ``f + r / 256 >=
    1``: the magnitude code is ``floor(a / s + r / 256)`` plus the segment's offset, exactly.  As in
    :func:`_e2m1_rne_raw`, each segment's candidate (``2a``, ``a + 2``, ``a / 2 + 4``) is computed and the minimum
    taken (floors are monotonic); each candidate is ``u = 1 + 2**-7 (c a + r / 256)`` by one ``fma.rm`` with ``1 +
    r * 2**-15`` (``r``'s bits under 1.0's exponent, one ``mad``) and floored at ``2**-7`` by one ``add.rm`` of
    ``2**16 - 1`` plus the offset (the sum's last place is ``2**-7``); both round toward minus infinity, which keeps
    the floor.  The code is in the low bits of ``2**16``'s float32 bits.  Both operands on 64 x 64 tiles: 3376
    -> 2072 sm_90 SASS instructions a thread against the generic integer rounding (Triton 3.6).  32-bit random
    values need more than float32's precision: the generic rounding.  ``tests/gpu/test_gpu_nvfp4.py`` checks it
    against ``reference.cast.fp4`` at every E2M1 rounding threshold for all 256 values of ``r``."""
    if RANDOM_BITS == 8:
        return tl.inline_asm_elementwise(
            "{\n.reg .f32 a, r, t0, t1, t2;\n.reg .b32 k;\n.reg .pred p;\n"
            "abs.f32 a, $1;\nmin.f32 a, a, 0f40C00000;\n"
            "mad.lo.u32 k, $2, 256, 0x3F800000;\nmov.b32 r, k;\n"
            "fma.rm.f32 t0, a, 0f3C800000, r;\nfma.rm.f32 t1, a, 0f3C000000, r;\nfma.rm.f32 t2, a, 0f3B800000, r;\n"
            "add.rm.f32 t0, t0, 0f477FFF00;\nadd.rm.f32 t1, t1, 0f477FFF04;\nadd.rm.f32 t2, t2, 0f477FFF08;\n"
            "min.f32 t0, t0, t1;\nmin.f32 t0, t0, t2;\nmov.b32 k, t0;\nsub.u32 k, k, 0x47800000;\n"
            "setp.le.s32 p, $1, -8388608;\n@p add.u32 k, k, 8;\nmov.b32 $0, k;\n}",
            "=r,r,r",
            [scaled, random],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    bits = scaled.to(tl.int32, bitcast=True)
    return round_to_code(bits, bits, random, 1, 1, 28, 8, True, 7, 7, 7, 2, RANDOM_BITS)


@device
def _e4m3_scale_interpreted(target):
    """:func:`_e4m3_scale` by :func:`_e4m3_rne` (integer arithmetic)."""
    return _e4m3_rne(target)


@device_modes(interpreted=_e4m3_scale_interpreted)
def _e4m3_scale(target):
    """``(code, value)`` of :func:`_e4m3_rne`, by the hardware: ``cvt.rn.satfinite.e4m3x2.f32``
    (``fast._triton.fp8_code``: nearest even, saturating at +-448, NaN -> 0x7F, float32 subnormals -> +-0, all of
    them :func:`_e4m3_rne`'s codes) and the exact conversion of the code back to float32."""
    code = fp8_code(target, False)
    return code, code.to(tl.float8e4nv, bitcast=True).to(tl.float32)


@device
def _reciprocal_interpreted(d):
    return tl.div_rn(_full_like(d, 1.0), d)


@device_modes(interpreted=_reciprocal_interpreted)
def _reciprocal(d):
    """``fl32(1 / d)``, correctly rounded (IEEE, subnormals kept): ``rcp.rn.f32``, the same value as ``div.rn.f32``
    of 1 in fewer instructions; interpreted, ``tl.div_rn``."""
    return tl.inline_asm_elementwise("rcp.rn.f32 $0, $1;", "=r,r", [d], dtype=tl.float32, is_pure=True, pack=1)


@device
def _full_like(t, value):
    """A float32 tensor of ``t``'s shape filled with ``value`` (``t * 0 + value`` would turn Inf into NaN).  A select of
    ``value`` either way, rather than ``tl.full``: it takes ``t``'s layout in a Gluon kernel too
    (``fast.quant.nvfp4_gluon``), where ``tl.full`` has none; the compiled code is the same."""
    return tl.where(t == t, value, value)


@device
def _max_propagating_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@device
def _abs_max(values, axis: tl.constexpr, RULE: tl.constexpr, SANITIZE: tl.constexpr):
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
def _e4m3_rne(v):
    """``(code, value)`` of float32 ``v`` rounded to E4M3 (nearest even, saturating at +-448, float32 subnormals to
    +-0); NaN -> 0x7F.

    On ``a = |v|``: from ``2**-6`` up the float32 bits are rounded to nearest even at bit 20 in place (``value``)
    and rebiased (``code``); below it the E4M3 subnormals are the multiples of ``2**-9``, which one float32
    addition of ``1.5 * 2**14`` (spacing ``2**-9``) rounds to, leaving the count in the low bits.  The sign
    goes back on last (a negative ``v`` comes only from a negative given amax under the ``te`` rule).
    """
    bits = v.to(tl.int32, bitcast=True)
    sign = bits & -2147483648  # 0x80000000
    magnitude = bits & 0x7FFFFFFF
    a = magnitude.to(tl.float32, bitcast=True)
    rounded = ((magnitude + 0x7FFFF + ((magnitude >> 20) & 1)) & -1048576).to(tl.float32, bitcast=True)  # 0xFFF00000
    normal = tl.minimum(rounded, 448.0)
    shifted = a + 24576.0
    is_normal = a >= 0.015625
    value = tl.where(is_normal, normal, shifted - 24576.0)
    code = tl.where(is_normal, (normal.to(tl.int32, bitcast=True) >> 20) - 960, shifted.to(tl.int32, bitcast=True) & 15)
    signed = (value.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return tl.where(v != v, 0x7F, code | ((sign >> 24) & 0x80)), tl.where(v != v, v, signed)


@device
def _global_scales(amax, RULE: tl.constexpr):
    """``(tensor_scale, p0, p1)`` from the amax: TE ``(S_dec, fl32(S_enc * fl32(1/6)), S_dec)``,
    torchao ``(pts, pts, fl32(1 / pts))``."""
    if RULE == 0:
        encode = tl.minimum(tl.div_rn(_full_like(amax, 2688.0), amax), 3.4028234663852886e38)
        encode = tl.where((amax == 0.0) | (encode == 0.0), 1.0, encode)
        decode = tl.div_rn(_full_like(encode, 1.0), encode)
        return decode, encode * 0.1666666716337204, decode
    # torchao: amax / 2688 on the CPU, amax * fl32(1/2688) on CUDA.
    pts = tl.div_rn(amax, _full_like(amax, 2688.0)) if RULE == 1 else amax * 0.00037202381645329297
    return pts, pts, tl.div_rn(_full_like(pts, 1.0), pts)


@device
def _block_scale(block_amax, p0, p1, RULE: tl.constexpr, ZERO_ENC: tl.constexpr):
    """``(E4M3 code, encode scale)`` of each block from its float32 amax and the operand's ``p0, p1``."""
    if RULE == 0:
        target = tl.minimum(block_amax * p0, 3.4028234663852886e38)
    else:
        scaled = tl.div_rn(block_amax, _full_like(block_amax, 6.0)) if RULE == 1 else block_amax * 0.1666666716337204
        ratio = tl.div_rn(scaled, tl.broadcast_to(p0, scaled.shape))
        target = tl.where(ratio != ratio, ratio, tl.minimum(tl.maximum(ratio, 0.015625), 448.0))
    code, scale = _e4m3_scale(target)
    if RULE == 0:
        encode = tl.minimum(_reciprocal(scale * p1), 3.4028234663852886e38)
        if ZERO_ENC:
            encode = tl.where(scale == 0.0, 0.0, encode)
    else:
        encode = tl.div_rn(tl.broadcast_to(p1, scale.shape), scale)
    return code, encode


@device
def _operand_scales(source_ptr, n_sources, amax_ptr, tensor_scale_ptr, RULE: tl.constexpr, SOURCES: tl.constexpr):
    """``(p0, p1)`` of the per-tensor amax: the largest of the ``n_sources`` int32 bit patterns at ``source_ptr``
    (``SOURCES``, a power of two, at least ``n_sources``; as int32, non-negative floats order like their bits and a
    NaN's come above Inf's, as with ``atomic_max``): a given amax, or the flat amax pass's per-program maxima.
    Program 0 writes the tensor scale, and the amax bits to ``amax_ptr``: the output's amax (a given one's copy:
    no launch of its own, 0.0660 ms for the given-amax rowwise call on the H100, where the kernel alone took 0.0598
    under ncu), or the same bits back in place after an ``atomic_max`` amax pass."""
    i = tl.arange(0, SOURCES)
    bits = tl.max(tl.load(source_ptr + i, mask=i < n_sources, other=0), axis=0)
    tensor_scale, p0, p1 = _global_scales(bits.to(tl.float32, bitcast=True), RULE)
    tl.store(tensor_scale_ptr, tensor_scale, mask=tl.program_id(0) == 0)
    tl.store(amax_ptr, bits, mask=tl.program_id(0) == 0)
    return p0, p1


@device
def _whole(row0, col0, n_rows, n_cols, BR: tl.constexpr, BC: tl.constexpr):
    """Whether the ``[BR, BC]`` tile at ``(row0, col0)`` lies inside ``[n_rows, n_cols]`` (needs no masks)."""
    return (row0 + BR <= n_rows) & (col0 + BC <= n_cols)


@device
def _quantize_tile(
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

    ``EVEN``: the operand is a whole number of tiles, so nothing is masked; else the masks compare the stored
    units (bytes, blocks) of 16-element steps (``n_rows``, ``n_cols``, ``row0``, ``col0`` are multiples of 16), a
    form Triton's alignment analysis sees constant over a vector of bytes (``col0 + 2 * d < n_cols`` made every
    byte a store of its own: 72 ``st.global.b8`` a thread for both operands, and 215 registers against 168 in
    ``fast.group``'s grouped kernel, Triton 3.6 for sm_90).  Round to nearest is :func:`_e2m1_pairs`'s.  Returns
    the packed bytes ``[BR, BC / 2]`` and the E4M3 scale codes (``[BR / 16, BC / 16]`` with ``TILE_2D``, else
    ``[BR, BC / 16]``), which the transposed operand of 16 x 16 tiles shares.
    """
    r = tl.arange(0, BR)
    c = tl.arange(0, BC)
    row_ok = (row0 + r) < n_rows
    row_base = row0.to(tl.int64)
    if ROW_AMAX:
        amax = tl.load(amax_ptr + row0 + r, mask=row_ok, other=0).to(tl.float32, bitcast=True)
        tensor_scale, row_p0, row_p1 = _global_scales(amax, RULE)
        # A vector mask and a scalar condition are combined as vectors: the interpreter rejects the mix.
        tl.store(tensor_scale_ptr + row0 + r, tensor_scale, mask=row_ok & ((r * 0 + col0) == 0))
        p0 = row_p0[:, None]
        p1 = row_p1[:, None]

    # Block amax, block scale, encode scale.
    blocks = _abs_max(tl.reshape(values, [BR, BC // 16, 16]), 2, RULE, SANITIZE)
    if TILE_2D:  # one scale per 16 x 16 tile (no row amax with these), stored on each of its rows
        tiles = _abs_max(tl.reshape(blocks, [BR // 16, 16, BC // 16]), 1, RULE, SANITIZE)
        tile_code, tile_encode = _block_scale(tiles, p0, p1, RULE, ZERO_ENC)
        code = tl.reshape(tl.broadcast_to(tile_code[:, None, :], [BR // 16, 16, BC // 16]), [BR, BC // 16])
        encode = tl.reshape(tl.broadcast_to(tile_encode[:, None, :], [BR // 16, 16, BC // 16]), [BR, BC // 16])
    else:
        code, encode = _block_scale(blocks, p0, p1, RULE, ZERO_ENC)
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
        packed = _e2m1_pairs(low, high)
    else:
        e_pointers = random_ptr + row_base * n_cols + (r[:, None] * n_cols + (col0 + c)[None, :])
        if EVEN:
            random = tl.load(e_pointers)
        else:
            random = tl.load(e_pointers, mask=row_ok[:, None] & ((col0 + c) < n_cols)[None, :], other=0)
        q = _e2m1_stochastic(scaled, random.to(tl.int32), RANDOM_BITS)
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
def hadamard_16_columns(values, BM: tl.constexpr, BK: tl.constexpr):
    """TE's random Hadamard transform of each 16-row chunk of the columns of float32 ``values [BM, BK]`` (the
    columnwise operand ``values.T``, transformed along its rows): :func:`_hadamard_16_sums` rounded to bfloat16
    (:func:`_bfloat16_rne`), returned as float32 ``[BM, BK]``."""
    return _bfloat16_rne(_hadamard_16_sums(values, BM, BK))


@device
def _hadamard_16_sums(values, BM: tl.constexpr, BK: tl.constexpr):
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
def _bfloat16_rne_interpreted(v):
    """:func:`_bfloat16_rne` in integer arithmetic (the interpreter's bfloat16 conversions flush subnormals)."""
    bits = v.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # -65536 is 0xFFFF0000
    quiet = (bits | 0x400000) & -65536
    return tl.where((bits & 0x7FFFFFFF) > 0x7F800000, quiet, rounded).to(tl.float32, bitcast=True)


@device_modes(interpreted=_bfloat16_rne_interpreted)
def _bfloat16_rne(v):
    """float32 ``v`` rounded to bfloat16 (nearest even, subnormals kept, overflow to Inf; NaN stays NaN, its payload
    and sign unspecified: every later step treats all NaNs alike), as float32: the hardware conversion
    (``cvt.rn.bf16x2.f32``) and back, where the integer rounding took six instructions an element."""
    return v.to(tl.bfloat16).to(tl.float32)


@device
def _column_butterfly(v, BM: tl.constexpr, BK: tl.constexpr, H: tl.constexpr):
    """One float32 butterfly stage on axis 1 (16) of ``v [BM / 16, 16, BK]``: ``v[i], v[i + H] -> v[i] + v[i + H],
    v[i] - v[i + H]``.  The partners are picked out of the axis of 2 as int32 bits by integer sums (``x + 0`` is
    ``x``) and added as floats elementwise: a float reduction over the pair may start from +0 (NumPy's does, so
    Triton's interpreter's; a GPU run gave +0 too), which turns ``-0 + -0`` into +0.  The sums keep the tile's
    layout, which ``tl.split`` and ``tl.join`` do not (Triton 3.6 converted the tile through shared memory: 52
    barriers a tile instead of 8, 0.31 -> 0.84 ms for both operands with RHT on the H100)."""
    pairs = tl.reshape(v, [BM // 16 * (8 // H), 2, H, BK]).to(tl.int32, bitcast=True)
    first = (tl.arange(0, 2) == 0)[None, :, None, None]
    a = tl.sum(tl.where(first, pairs, 0), axis=1).to(tl.float32, bitcast=True)[:, None, :, :]
    b = tl.sum(tl.where(first, 0, pairs), axis=1).to(tl.float32, bitcast=True)[:, None, :, :]
    return tl.reshape(tl.where(first, a + b, a - b), [BM // 16, 16, BK])


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
    rows ``scale_stride`` bytes apart).  Round to nearest is :func:`_store_columns`'s (:func:`_e2m1_pairs`).
    """
    r = tl.arange(0, BM)
    c = tl.arange(0, BK)
    col_ok = (col0 + c) < K
    col_base = col0.to(tl.int64)
    if ROW_AMAX:
        amax = tl.load(amax_ptr + col0 + c, mask=col_ok, other=0).to(tl.float32, bitcast=True)
        tensor_scale, col_p0, col_p1 = _global_scales(amax, RULE)
        # A vector mask and a scalar condition are combined as vectors: the interpreter rejects the mix.
        tl.store(tensor_scale_ptr + col0 + c, tensor_scale, mask=col_ok & ((c * 0 + row0) == 0))
        p0 = col_p0[None, :]
        p1 = col_p1[None, :]

    # Block amax (16 rows of a column), block scale, encode scale.
    blocks = _abs_max(tl.reshape(values, [BM // 16, 16, BK]), 1, RULE, SANITIZE)
    if TILE_2D:
        tiles = _abs_max(tl.reshape(blocks, [BM // 16, BK // 16, 16]), 2, RULE, SANITIZE)
        tile_code, tile_encode = _block_scale(tiles, p0, p1, RULE, ZERO_ENC)
        code = tl.reshape(tl.broadcast_to(tile_code[:, :, None], [BM // 16, BK // 16, 16]), [BM // 16, BK])
        encode = tl.reshape(tl.broadcast_to(tile_encode[:, :, None], [BM // 16, BK // 16, 16]), [BM // 16, BK])
    else:
        code, encode = _block_scale(blocks, p0, p1, RULE, ZERO_ENC)

    # Elements.
    scaled = tl.reshape(tl.reshape(values, [BM // 16, 16, BK]) * encode[:, None, :], [BM, BK])
    q = scaled  # round to nearest: by _store_columns
    if ROUNDING != 0:
        e_pointers = random_ptr + col_base * M + (c[None, :] * M + (row0 + r)[:, None])
        if EVEN:
            random = tl.load(e_pointers)
        else:
            random = tl.load(e_pointers, mask=col_ok[None, :] & ((row0 + r) < M)[:, None], other=0)
        q = _e2m1_stochastic(scaled, random.to(tl.int32), RANDOM_BITS)
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
    scaled float32 values, rounded to nearest here by :func:`_e2m1_pairs`; 2, the rowwise bytes ``[BM, BK / 2]`` of the
    same codes (16 x 16 tiles: ``x.T``'s codes are ``x``'s), whose nibbles pair anew, so that the shared codes come from
    :func:`_e2m1_pairs` rather than from the 8 float32 instructions an element of :func:`_e2m1_rne_raw`: H200, bfloat16
    8192 x 8192, both operands in 16 x 16 tiles 0.1228 / 0.1229 / 0.1225 -> 0.1210 / 0.1215 / 0.1210 ms in three
    runs, outputs byte-equal (``docs/performance.md``, 2026-12-03).  ``EVEN``: the tile is whole (no masks), else
    masks in blocks and bytes, as :func:`_quantize_tile`'s; ``ALIGNED``: so is every tile of the operand."""
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
        packed = _e2m1_pairs(low.to(tl.float32, bitcast=True), high.to(tl.float32, bitcast=True))
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
def _amax_tile(
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
            row_amax = _abs_max(values, 1, RULE, SANITIZE).to(tl.int32, bitcast=True)
            tl.atomic_max(amax_ptr + row0 + r, row_amax, mask=row_ok)
        if COLUMNWISE:
            col_amax = _abs_max(values, 0, RULE, SANITIZE).to(tl.int32, bitcast=True)
            tl.atomic_max(columnwise_amax_ptr + col0 + c, col_amax, mask=col_ok)
    else:
        # Elementwise running maxima, reduced once after the last tile (no reduction per tile).
        running = _max2(running, _magnitude(values, RULE, SANITIZE), RULE)
        if COLUMNWISE and RHT:
            running_t = _max2(running_t, _magnitude(_hadamard_16_sums(values, BM, BK), RULE, SANITIZE), RULE)
    return running, running_t


def _nvfp4_amax_kernel(
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
        running, running_t = _amax_tile(
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
        running, running_t = _amax_tile(
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
        amax = _abs_max(_abs_max(running, 0, RULE, SANITIZE), 0, RULE, SANITIZE).to(tl.int32, bitcast=True)
        if ROWWISE:
            tl.atomic_max(amax_ptr, amax)
        if COLUMNWISE:
            if RHT:  # the transformed operand's amax, rounded once (see _hadamard_16_sums)
                amax = _bfloat16_rne(_abs_max(_abs_max(running_t, 0, RULE, SANITIZE), 0, RULE, SANITIZE))
                amax = amax.to(tl.int32, bitcast=True)
            tl.atomic_max(columnwise_amax_ptr, amax)


@device
def _magnitude(values, RULE: tl.constexpr, SANITIZE: tl.constexpr):
    """``|v|``, NaN zeroed for TE in the interpreter (NumPy's ``fmax`` mishandles signalling NaNs)."""
    magnitude = tl.abs(values)
    if RULE == 0 and SANITIZE:
        magnitude = tl.where(magnitude == magnitude, magnitude, 0.0)
    return magnitude


@device
def _max2(a, b, RULE: tl.constexpr):
    if RULE == 0:
        return tl.maximum(a, b)
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


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

    Triton 3.6 (the GPU's) gives a load's threads to its contiguous axis first and then to the other axes in index
    order, leaving the last ones in registers.  ``WHOLE_BLOCKS`` false: ``[2, BM / 16, 4, 2, BK]``, row ``16 g + 4 q
    + 2 b + a`` at ``[b, g, q, a]``; 16 bytes of a row a thread, then ``b`` and ``g`` to threads: a thread holds 8
    of a block's 16 rows (rows 2i and 2i + 1, one columnwise byte, together), its neighbour the other 8, and half of
    a rowwise block.  True: ``[BK / 4, BM / 16, 2, 4, 2, 4]``, row ``16 g + 8 b + 2 q + a`` and column ``4 c + d`` at
    ``[c, g, b, q, a, d]``; 8 bytes of a row a thread, then ``c`` and ``g`` to threads: a thread holds all 16 rows of
    its 4 columns' blocks, so the Hadamard butterflies and the columnwise block maxima stay in the thread (no
    shuffles), while a rowwise block spans 4 threads.  H100, bfloat16 8192 x 8192: columnwise 0.1295 -> 0.1198 ms
    (with ``_COLUMNWISE``'s 4 programs per SM), columnwise with RHT 0.1912 -> 0.1359, both with RHT 0.2548 -> 0.2230,
    both with RHT in 16 x 16 tiles 0.2389 -> 0.1997, both with RHT, stochastic 0.3479 -> 0.3164; both without RHT
    slower (0.1678 -> 0.2122: 231 registers, the rowwise block scales computed by 4 threads each), so they keep 8
    rows.  (Other Triton versions may order the axes otherwise: slower, not wrong.)  The permute and reshape of
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
    # per-tensor scale parameters (_global_scales) of each operand, unused for ROW_AMAX
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

    ``EVEN``: every tile of ``x`` is whole.  Else, where the body fits 168 registers (16-bit input, round to nearest,
    tensor amax, no RHT), the tiles that are whole (all but the last row and column of tiles) run without masks: a
    separate copy of the body, since masks chosen by branches inside it held both variants' values at once (167 ->
    226 registers, Triton 3.6 for sm_90).  H100, bfloat16, 8 uneven experts x 7168 (``fast.group``): 0.729 ->
    0.613 ms.  The other variants take 226-255 registers already and were slower with the copy (float32 [32752,
    7168] both: 0.909 -> 0.935 ms; RHT spilled more), so their ragged operands keep masks on every tile.

    ``STORE_EVICTION``: the L2 eviction hint of the data and scale stores, :func:`_store_eviction`'s (``fast.group``'s
    grouped kernel too, for its whole buffer).  The same hint on the MX, FP8 blockwise and FP8 current-scaling kernels
    was 0 to 2% slower (H100, bfloat16 8192 x 8192); they store without one."""
    whole = EVEN
    if not EVEN and INPUT != 0 and ROUNDING == 0 and not ROW_AMAX and not RHT:
        tiles_k = tl.cdiv(K, BK)
        whole = _whole((tile // tiles_k) * BM, (tile % tiles_k) * BK, M, K, BM, BK)
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
    # per-tensor scale parameters (_global_scales) of each operand, unused for ROW_AMAX
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
        packed, tile_code = _quantize_tile(
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


def _nvfp4_quantize_kernel(
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
    # where each operand's per-tensor amax bits are read (_operand_scales), and how many there are
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
            p0, p1 = _operand_scales(amax_source_ptr, n_sources, amax_ptr, tensor_scale_ptr, RULE, SOURCES)
        if COLUMNWISE:
            t_p0, t_p1 = _operand_scales(
                columnwise_amax_source_ptr, n_sources, columnwise_amax_ptr, columnwise_tensor_scale_ptr, RULE, SOURCES
            )
    # Persistent programs walk the tiles backwards: the amax pass read the last ones last (still in L2).  STAGES > 1:
    # the tile loads of later steps are issued ahead (_Launch.stages).
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


@device
def _amax_chunk(
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
    return _max2(running, _max2(_magnitude(lo, RULE, SANITIZE), _magnitude(hi, RULE, SANITIZE), RULE), RULE)


def _nvfp4_tensor_amax_kernel(
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
    ``partial_ptr[program]``, which the quantize pass reduces (:func:`_operand_scales`): no zeroed buffer for
    ``atomic_max``, so no fill kernel before this one (H100, bfloat16 8192 x 8192: 1.0 us and a 1.2 us gap a call).
    """
    chunks = tl.cdiv(n_words, CHUNK)
    first_kept = chunks - kept_words // CHUNK
    running = tl.zeros([CHUNK], tl.float32)
    for chunk in range(tl.program_id(0), first_kept, tl.num_programs(0)):
        running = _amax_chunk(words_ptr, n_words, chunk, running, INPUT, RULE, CHUNK, EVEN, SANITIZE, "evict_first")
    for chunk in range(first_kept + tl.program_id(0), chunks, tl.num_programs(0)):
        running = _amax_chunk(words_ptr, n_words, chunk, running, INPUT, RULE, CHUNK, EVEN, SANITIZE, "evict_last")
    tl.store(partial_ptr + tl.program_id(0), _abs_max(running, 0, RULE, SANITIZE).to(tl.int32, bitcast=True))


@device
def rowwise_tile(
    # the input and the random bits as words (two elements each), the tile (row-major order of [BR, NB * 16]
    # element tiles) and x's dims
    words_ptr,
    random_ptr,
    tile,
    M,
    K,
    # per-tensor scale parameters (_global_scales), unused for ROW_AMAX
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

    A tile is ``[BR, NB, 8 / V, V]`` words in memory order (``V`` words, 16 bytes, per load): element
    ``2i`` of a word in its low half, ``2i + 1`` in its high half, and byte ``i`` of the packed data is
    word ``i``, so the data is stored with the input's offsets.  Triton lays the last axis out within a
    thread and consecutive threads along the next ones, so a warp's loads and stores are contiguous; a
    block's ``8 / V`` pieces sit in neighbouring threads, which exchange their maxima by shuffles and
    each compute the block's scales.  (One thread per block, with the pieces as the outer axis, needs no
    shuffle but makes every warp load touch twice the cache lines: 0.103 ms against 0.092 ms for the
    whole call at the same tiles, bfloat16 8192 x 8192 on the H200.)  ``STORE_EVICTION``: the L2 hint of the
    data and scale stores, as :func:`quantize_tile`'s.
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
    pair = _max2(_magnitude(lo, RULE, SANITIZE), _magnitude(hi, RULE, SANITIZE), RULE)
    blocks = _abs_max(_abs_max(pair, 3, RULE, SANITIZE), 2, RULE, SANITIZE)
    if TILE_2D:
        tiles_2d = _abs_max(tl.reshape(blocks, [BR // 16, 16, NB]), 1, RULE, SANITIZE)
        blocks = tl.reshape(tl.broadcast_to(tiles_2d[:, None, :], [BR // 16, 16, NB]), [BR, NB])
    if ROW_AMAX:
        amax = tl.load(amax_ptr + row0 + r, mask=row_ok, other=0).to(tl.float32, bitcast=True)
        tensor_scale, row_p0, row_p1 = _global_scales(amax, RULE)
        # A vector mask and a scalar condition are combined as vectors: the interpreter rejects the mix.
        tl.store(tensor_scale_ptr + row0 + r, tensor_scale, mask=row_ok & ((r * 0 + blk0) == 0))
        code, encode = _block_scale(blocks, row_p0[:, None], row_p1[:, None], RULE, ZERO_ENC)
    else:
        code, encode = _block_scale(blocks, p0, p1, RULE, ZERO_ENC)
    s_pointers = scales_ptr + row0.to(tl.int64) * scale_stride + (r[:, None] * scale_stride + (blk0 + b)[None, :])
    if EVEN:
        tl.store(s_pointers, code.to(tl.uint8), eviction_policy=STORE_EVICTION)
    else:
        tl.store(s_pointers, code.to(tl.uint8), mask=ok, eviction_policy=STORE_EVICTION)

    # Elements: codes of fl32(v * enc), two per byte.
    enc = encode[:, :, None, None]
    if ROUNDING == 0:
        packed = _e2m1_pairs(lo * enc, hi * enc)
    else:
        if EVEN:
            random = tl.load(random_ptr + row_base + offsets)
        else:
            random = tl.load(random_ptr + row_base + offsets, mask=ok[:, :, None, None], other=0)
        r_lo, r_hi = _random_halves(random, RANDOM_BITS)
        q_lo = _e2m1_stochastic(lo * enc, r_lo, RANDOM_BITS)
        q_hi = _e2m1_stochastic(hi * enc, r_hi, RANDOM_BITS)
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


def _nvfp4_rowwise_kernel(
    # pointers: the input and the random bits as words (two elements each), the outputs
    words_ptr,
    random_ptr,
    data_ptr,
    scales_ptr,
    amax_ptr,
    tensor_scale_ptr,
    # where the per-tensor amax bits are read (_operand_scales), and how many there are
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
        p0, p1 = _operand_scales(amax_source_ptr, n_sources, amax_ptr, tensor_scale_ptr, RULE, SOURCES)
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


# %% Launcher


class _Launch(NamedTuple):
    """One kernel's launch shape: tile rows, tile columns (elements; words for the flat amax pass), warps,
    resident programs per SM, whether the registers are capped at what keeps them resident (as ragged launches
    always are, see :func:`_launch_options`), and the quantize kernel's load stages (``tl.range``'s ``num_stages``:
    with 2 or more, each program's tile loads go ahead ``stages - 1`` tiles through shared memory, ``cp.async`` on
    sm_90)."""

    rows: int
    cols: int
    num_warps: int
    programs_per_sm: int
    register_cap: bool = False
    stages: int = 1


class _Tiling(NamedTuple):
    """The launch shapes of both passes."""

    quantize: _Launch
    amax: _Launch


_ROWWISE = _Tiling(quantize=_Launch(2, 2048, 4, 8), amax=_Launch(1, 4096, 8, 4))
"""Rowwise operand only (``_nvfp4_rowwise_kernel``): 2 x 2048 tiles (each thread half of two blocks of 16
of each of 2 rows), 4 warps, 8 programs per SM (4 x 2048 tiles and 4 per SM: 6% slower on the H200); the
flat amax pass in chunks of 4096 words (16 per thread), 8 warps."""
_BOTH = _Tiling(quantize=_Launch(128, 64, 4, 2), amax=_Launch(1, 4096, 8, 4))
"""Both operands (``_nvfp4_quantize_kernel``): 128 x 64 tiles, 4 warps (each thread 8 rows of 8 columns,
167 registers in Triton 3.6 for sm_90), 2 programs per SM.  A tile gives each row of the columnwise outputs
64 bytes of codes and 8 of scales: the transposed stores of 16-row tiles (8 and 1 bytes) took 60% of the
pass (H100, bfloat16 8192 x 8192: both 0.298 -> 0.191 ms, 16x16 0.287 -> 0.169, RHT 0.486 -> 0.314; 64 x 64
tiles with 2 warps were level for both).  The tile amax pass (row-scaled amax, Hadamard transform) uses the
same tiles."""
_BOTH_3 = _BOTH._replace(quantize=_Launch(128, 64, 4, 3))
"""Both operands in 16 x 16 tiles from 16-bit input with round to nearest, with RHT or without: 167-168 registers
in Triton 3.6 (sm_90), so 3 programs of 4 warps fit an SM uncapped (H100, bfloat16 8192 x 8192: 0.1562 -> 0.1527 ms,
with RHT 0.1996 -> 0.1855; with RHT the 168-register cap made it slower, 0.2214).  1x16 blocks in the same 168
registers since the float16x2 rounding (0.1851 -> 0.1696 ms at 3 programs) take ``_BOTH_4_CAPPED`` or
``_BOTH_3_CAPPED``, and whole 16 x 16 tiles without RHT ``_BOTH_PIPELINED``; ragged shapes are capped anyway
(``_launch_options``' ``resident``: the edge tiles' masked copy of the body, see :func:`quantize_tile`).  Row
amaxes and RHT in 1x16 blocks take 226-255 registers (2 programs)."""
_BOTH_3_CAPPED = _BOTH._replace(quantize=_Launch(128, 64, 4, 3, register_cap=True))
"""Both operands in 1x16 blocks, per-tensor amax, no RHT: 3 programs per SM under the 168-register cap.  From float32
(228 registers uncapped; Triton 3.6 for sm_90: no spills capped) and with stochastic rounding (193; 5 spilled words)
the cap is what lets 3 fit (H100, 8192 x 8192: float32 0.2526 -> 0.2430 ms, bfloat16 stochastic 0.2752 -> 0.2417;
3 programs uncapped: 0.2874, 0.3321).  16-bit input with round to nearest fits uncapped (168) and gained by the cap
too (0.1677 -> 0.1659 ms, given amax 0.1140 -> 0.1129; 16 x 16 tiles did not: 0.1526 -> 0.1513, given 0.1055 ->
0.1065); it keeps this tiling on ragged single shapes only (else ``_BOTH_4_CAPPED``).  With RHT capped 3 per SM
were slower (0.2215 -> 0.2334, and with stochastic rounding 0.3163 -> 0.3377), so RHT in 1x16 blocks keeps
``_BOTH``, as does stochastic rounding of float32 input (not measured capped).
``fast.group``'s grouped kernel takes 168 registers and ran this tiling for 16-bit input before ``_BOTH_4_CAPPED``:
on 8 uneven experts x 7168 (H100, bfloat16) 0.617 ms at 3 programs against 0.639 ms at 2."""
_BOTH_4_CAPPED = _BOTH._replace(quantize=_Launch(128, 64, 4, 4, register_cap=True))
"""Both operands in 1x16 blocks from 16-bit input, round to nearest, per-tensor amax, no RHT, whole 128 x 64 tiles
(and ``fast.group``'s grouped kernel): 4 programs per SM under the 128-register cap (Triton 3.6 for sm_90: no
spills, but one spilled word with the ``torchao`` rule's divisions).  With 3 programs the quantize pass stalls on
its tile loads (ncu, given amax: 0.60 instructions issued a cycle per scheduler, 2.7 active warps of 3); 4 hide
more of it.  H100, bfloat16: 8192 x 8192 both 0.1658 -> 0.1614 ms, given amax 0.1125 -> 0.1090; [32768, 7168]
0.5717 -> 0.5611; grouped 8 x [4096, 7168] 0.5773 -> 0.5610, uneven experts 0.6088 -> 0.5942; but a ragged single
shape (8176 x 8208) 0.2213 -> 0.2345, so ragged single shapes keep ``_BOTH_3_CAPPED`` (64 x 64 tiles on 2 warps at
8 per SM: 0.1648 ms, 128 x 32: 0.2169; raw in ``docs/bench/2026-11-27b-h100-nvfp4-occupancy.json``)."""
_BOTH_PIPELINED = _BOTH._replace(quantize=_Launch(128, 64, 4, 2, stages=3))
"""Both operands in 16 x 16 tiles from 16-bit input, round to nearest, no RHT, whole tiles: 2 programs per SM, each
loading two tiles ahead (3 stages; 230-232 registers in Triton 3.6 for sm_90).  H100, bfloat16: 8192 x 8192
0.1533 -> 0.1409 ms, given amax 0.1057 -> 0.1014; [32768, 7168] 0.5762 -> 0.4894, but given amax 0.3993 -> 0.4124
(2 stages slower, 4 and 5 level or slower; 4 programs under the 128-register cap 0.1759).  Pipelined loads lost
elsewhere: 1x16 blocks 0.1612 ms (level with ``_BOTH_4_CAPPED``, given amax slower), RHT 0.2149 -> 0.2631,
stochastic rounding 0.2407 -> 0.2553, the columnwise operand alone 0.1197 -> 0.1738.  Ragged shapes and
``fast.group``'s grouped kernel (whose loop crosses members) keep ``_BOTH_3``."""
_COLUMNWISE = _BOTH._replace(quantize=_Launch(128, 64, 4, 4))
"""The columnwise operand alone: 128 x 64 tiles, 4 warps, 4 programs per SM (128 registers in Triton 3.6 for sm_90
with a block's 16 rows in a thread, see :func:`_column_tile`; H100, bfloat16 8192 x 8192: 0.1198 ms, 0.1285 with
128 x 32 tiles on 2 warps and 8 programs, 0.1229 with 3 programs; 0.251 with the 16 x 128 tiles of before)."""
_ROWWISE_STOCHASTIC = _ROWWISE._replace(quantize=_Launch(2, 4096, 8, 4))
"""The rowwise operand alone, stochastic rounding: 2 x 4096 tiles, 8 warps, 4 programs per SM (H100, bfloat16 8192
x 8192 with uint8 random bits: 0.1367 ms; 0.1553 with ``_ROWWISE``'s tiles, 0.1413 with 4 x 2048, 0.1396 with 4 x
1024 on 2 warps, 0.1442-0.1708 with five others).  With a columnwise operand stochastic rounding takes the round to
nearest tilings since :func:`_e2m1_stochastic` (on the tiles of then: both 0.2758 ms, columnwise 0.1600, both with
RHT 0.3792, against 0.3433, 0.2568 and 1.4656 ms on the 64 x 64 tiles that the generic rounding needed)."""
_WIDE_RANDOM = _BOTH._replace(quantize=_Launch(64, 64, 4, 2))
"""uint32 random bits with a columnwise operand: 32 elements a thread, since the generic rounding of
``round_to_code`` (:func:`_e2m1_stochastic` for 32 bits) spills registers at 64 (Triton 3.6 for sm_90, both
operands: 255 registers and 1176 bytes of stack on 128 x 64 tiles)."""


def _tiling(
    s: _Settings,
    device_: torch.device,
    shape: tuple[int, int],
    dtype: torch.dtype,
    wide_random: bool = False,
    grouped: bool = False,
) -> _Tiling:
    """The launch shapes of these settings for inputs of ``shape`` (the largest member's, ``grouped``: for
    ``fast.group``'s grouped kernel) and type ``dtype`` on ``device_`` (``wide_random``: some random bits are uint32).
    Triton's interpreter pays per program, not per element: large CPU inputs take 128-row tiles there (the same code,
    other constexprs; small inputs keep the GPU's tiles, which the CPU tests check)."""
    rows, cols = shape
    sixteen_bit = dtype in (torch.bfloat16, torch.float16)
    whole = rows % _BOTH.quantize.rows == 0 and cols % _BOTH.quantize.cols == 0  # the 128 x 64 tiles
    if not s.columnwise:
        tiling = _ROWWISE_STOCHASTIC if s.rounding == "stochastic" and not wide_random else _ROWWISE
    elif wide_random:
        tiling = _WIDE_RANDOM
    elif not s.rowwise:
        tiling = _COLUMNWISE
    elif s.amax_scope == "row":
        tiling = _BOTH
    elif sixteen_bit and s.rounding == "rne" and s.block == "16x16":
        tiling = _BOTH_PIPELINED if whole and not s.rht and not grouped else _BOTH_3
    elif sixteen_bit and s.rounding == "rne" and s.block == "1x16" and not s.rht and (whole or grouped):
        tiling = _BOTH_4_CAPPED
    elif s.block == "1x16" and not s.rht and (sixteen_bit or s.rounding == "rne"):
        tiling = _BOTH_3_CAPPED
    else:
        tiling = _BOTH
    if device_.type != "cuda" and rows >= 1024:
        tiling = tiling._replace(quantize=tiling.quantize._replace(rows=128))
    if s.block == "16x16" and not s.columnwise:
        tiling = tiling._replace(quantize=tiling.quantize._replace(rows=max(16, tiling.quantize.rows)))
    return tiling


def _tile_amax_pass(s: _Settings) -> bool:
    """Whether the amax pass is ``_nvfp4_amax_kernel`` over tiles (row amaxes, or the RHT of a columnwise operand),
    which ``atomic_max``-es into the amax outputs, rather than the flat ``_nvfp4_tensor_amax_kernel``."""
    return s.amax_scope == "row" or (s.rht and s.columnwise)


def _outputs(x: torch.Tensor, s: _Settings, given: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Allocate every output; the amax buffers are int32 zeros for the tile amax pass (``atomic_max`` of float bit
    patterns), else left for the quantize kernel to write (the given amaxes, or the flat pass's maximum)."""
    rows, cols = x.shape
    out: dict[str, torch.Tensor] = {}
    amax_sizes = []
    if s.rowwise:
        amax_sizes.append(rows if s.amax_scope == "row" else 1)
    if s.columnwise:
        amax_sizes.append(cols if s.amax_scope == "row" else 1)
    make = torch.zeros if _tile_amax_pass(s) and not given else torch.empty
    amax_bits = make(sum(amax_sizes), dtype=torch.int32, device=x.device)
    parts = list(torch.split(amax_bits, amax_sizes))
    for prefix, wanted, shape in (("", s.rowwise, (rows, cols)), ("columnwise_", s.columnwise, (cols, rows))):
        if not wanted:
            continue
        amax = parts.pop(0)
        out[f"{prefix}data"] = torch.empty((shape[0], shape[1] // 2), dtype=torch.uint8, device=x.device)
        out[f"{prefix}scales"] = torch.empty((shape[0], shape[1] // 16), dtype=torch.uint8, device=x.device)
        out[f"{prefix}amax"] = amax
        out[f"{prefix}tensor_scale"] = torch.empty(amax.shape, dtype=torch.float32, device=x.device)
    return out


def _interpreter_errstate(x: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
    """Triton's interpreter runs the kernels in NumPy, which warns on every Inf and NaN it computes."""
    if x.device.type == "cuda":
        return contextlib.nullcontext()
    import numpy as np

    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def _launch_options(x: torch.Tensor, launch: _Launch, resident: bool = False) -> dict[str, Any]:
    """Warps, and no floating-point contraction on the GPU: an FMA would skip the rounding of a product.

    ``resident``: cap the registers at what keeps ``launch.programs_per_sm`` programs on an SM (65536 registers
    for ``programs_per_sm * num_warps * 32`` threads).  :func:`quantize_tile` on a ragged operand holds two
    copies of its body (masked edge tiles, unmasked others) and ptxas gives the pair more registers than either
    needs (both operands, bfloat16: 245 against 168, and 168 without spills under the cap of 3 programs of 4
    warps; Triton 3.6 for sm_90)."""
    if x.device.type != "cuda":
        return {"num_warps": launch.num_warps}
    options = {"num_warps": launch.num_warps, "enable_fp_fusion": False}
    cap = 65536 // (launch.programs_per_sm * launch.num_warps * 32) // 8 * 8
    if (resident or launch.register_cap) and cap < 256:
        options["maxnreg"] = cap
    return options


def _programs(x: torch.Tensor, tiles: int, per_sm: int) -> int:
    """Persistent grid: ``per_sm`` programs per SM (the interpreter runs four), never more than the tiles."""
    if x.device.type != "cuda":
        return min(tiles, 4)
    return min(tiles, per_sm * torch.cuda.get_device_properties(x.device).multi_processor_count)


def _kept_bytes(x: torch.Tensor, columnwise: bool) -> int:
    """How much of the end of ``x`` the amax pass marks evict-last, for the quantize pass, which reads it first,
    before its own writes push it out: 45% of the GPU's L2 for the rowwise operand alone, 30% with a columnwise one
    (none in the interpreter).  H100, bfloat16 8192 x 8192, whole calls at 60 / 45 / 30 / 15 / 0%: rowwise 0.1111 /
    0.1111 / 0.1118 / 0.1121 / 0.1123 ms, stochastic 0.1366 / 0.1352 / 0.1355 / 0.1356 / 0.1356; both 0.1593 / 0.1577
    / 0.1570 / 0.1571 / 0.1570, in 16 x 16 tiles 0.1395 / 0.1375 / 0.1368 / 0.1364 / 0.1361, stochastic 0.2368 / 0.2354
    / 0.2351 / 0.2360 / 0.2361, with RHT 0.2135 / 0.2135 / 0.2129 / 0.2135 / 0.2136; columnwise with RHT 0.1303 /
    0.1291 / 0.1287 / 0.1287 / 0.1290 (``scratch/kept.py``, ``docs/bench/2026-11-27b-h100-nvfp4-occupancy.json``)."""
    if x.device.type != "cuda":
        return 0
    return int((0.3 if columnwise else 0.45) * torch.cuda.get_device_properties(x.device).L2_cache_size)


def _near_l2(x: torch.Tensor) -> bool:
    """Whether CUDA ``x`` is at most 4 times its GPU's L2: the size up to which the quantize pass's stores are hinted
    ``evict_first`` (:func:`_store_eviction`), and up to which ``fast.group``'s amax pass keeps the end of the buffer
    in L2 for a columnwise operand."""
    return x.numel() * x.element_size() <= 4 * torch.cuda.get_device_properties(x.device).L2_cache_size


def _store_eviction(x: torch.Tensor, s: _Settings) -> str:
    """The L2 hint of the quantize kernels' data and scale stores (:func:`quantize_tile`).  ``evict_first`` (the
    written bytes leave L2 first; after a computed amax, before the input the amax pass kept there) when ``x`` is at
    most 4 times the GPU's L2; above that ``evict_last`` (the written bytes stay until whole: the scale sectors,
    which 4 to 8 tiles fill, and transposed rows that start inside a sector), except ``evict_first`` for the rowwise
    operand alone with a given amax or RHT and for both operands with RHT.

    H100, bfloat16, best of 2-3 in one process, the same bytes.  Without against ``evict_first`` (2026-11-27 sixth
    session, ``docs/bench/2026-11-27f-h100/store-hint/``): 8192 x 8192 rowwise 0.1081 -> 0.1039 ms, columnwise
    0.1161 -> 0.1118, both 0.1552 -> 0.1531, both with RHT 0.2135 -> 0.2080, given amax both 0.1085 -> 0.1041;
    [32768, 7168] (4.5 x the L2) given amax both 0.4070 -> 0.3789, both with RHT 0.7194 -> 0.7139.  Without against
    ``evict_last`` (eighth session, ``docs/bench/2026-11-27h-h100/``), computed amax: [32768, 7168] rowwise 0.3777 ->
    0.3774, columnwise 0.4066 -> 0.3930, both 0.5549 -> 0.5307, both in 16 x 16 tiles 0.5053 -> 0.4812; [16384,
    8192] columnwise 0.2303 -> 0.2248, both 0.3106 -> 0.3042.  ``evict_first`` against ``evict_last`` on [32768,
    7168]: given amax both 0.3782 -> 0.3700 and columnwise with RHT 0.4512 -> 0.4325, but given amax rowwise 0.2075
    -> 0.2192 and both with RHT 0.7096 -> 0.7182; at 8192 x 8192 ``evict_last`` lost everywhere (rowwise 0.1041 ->
    0.1083, columnwise 0.1083 -> 0.1116)."""
    if x.device.type != "cuda":
        return ""
    if _near_l2(x):
        return "evict_first"
    if s.columnwise:
        return "evict_first" if s.rht and s.rowwise else "evict_last"
    return "evict_first" if s.amax_source == "given" or s.rht else "evict_last"


def _as_words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous ``[R, C]`` tensor of 1-, 2- or 4-byte elements as ``[R, C / 2]`` words holding two each
    (int16, int32 or int64), element ``2i`` in the low half (little-endian)."""
    words = {1: torch.int16, 2: torch.int32, 4: torch.int64}[t.element_size()]
    if t.storage_offset() % 2:
        t = t.clone()
    return t.view(words)


def _kernel_bits(t: torch.Tensor | None, dummy: torch.Tensor) -> torch.Tensor:
    """uint32 random bits travel as int32 (the kernel reinterprets them); absent ones as a dummy pointer."""
    if t is None:
        return dummy
    return t.view(torch.int32) if t.dtype == torch.uint32 else t


def _amax_pass(
    x: torch.Tensor, s: _Settings, out: dict[str, torch.Tensor], tiling: _Tiling
) -> tuple[list[torch.Tensor], int]:
    """The first pass: the amax of each operand into ``out``'s int32 amax buffers (:func:`_tile_amax_pass`), or as
    per-program maxima of the flat pass.  Returns where the quantize pass reads each operand's amax bits, and how
    many there are (:func:`_operand_scales`)."""
    rows, cols = x.shape
    rule = _RULE_IDS[s.scale_rule]
    if _tile_amax_pass(s):
        amax = [out[f"{prefix}amax"] for prefix in ("", "columnwise_") if f"{prefix}amax" in out]
        q = tiling.quantize
        tiles = triton.cdiv(rows, q.rows) * triton.cdiv(cols, q.cols)
        # With RHT the tile pass holds the transform (222 registers for both operands, Triton 3.6 for sm_90): about
        # as many programs per SM as fit (H100, bfloat16 8192 x 8192, whole call: both 0.2235 -> 0.2146 ms at 2 rather
        # than 8, columnwise 0.1333 -> 0.1316 at 3; 4 was slower for both).
        per_sm = (2 if s.rowwise else 3) if s.rht and s.columnwise else 8
        jit(_nvfp4_amax_kernel)[(_programs(x, tiles, per_sm),)](
            x,
            amax[0],
            amax[-1],
            rows,
            cols,
            min(tiles, _kept_bytes(x, s.columnwise) // (q.rows * q.cols * x.element_size())),
            INPUT=_INPUT_DTYPES[x.dtype],
            ROWWISE=s.rowwise,
            COLUMNWISE=s.columnwise,
            ROW_AMAX=s.amax_scope == "row",
            RHT=s.rht and s.columnwise,
            RULE=rule,
            BM=q.rows,
            BK=q.cols,
            EVEN=rows % q.rows == 0 and cols % q.cols == 0,
            SANITIZE=x.device.type != "cuda",
            **_launch_options(x, q),
        )
        return amax, 1
    a = tiling.amax
    words = _as_words(x)
    n_words = words.numel()
    chunks = triton.cdiv(n_words, a.cols)
    programs = _programs(x, chunks, a.programs_per_sm)
    partial = torch.empty(programs, dtype=torch.int32, device=x.device)
    jit(_nvfp4_tensor_amax_kernel)[(programs,)](
        words,
        partial,
        n_words,
        min(chunks, _kept_bytes(x, s.columnwise) // (a.cols * words.element_size())) * a.cols,
        INPUT=_INPUT_DTYPES[x.dtype],
        RULE=rule,
        CHUNK=a.cols,
        EVEN=n_words % a.cols == 0,
        SANITIZE=x.device.type != "cuda",
        **_launch_options(x, a),
    )
    return [partial] * (s.rowwise + s.columnwise), programs


def _gluon_columnwise(x: torch.Tensor, s: _Settings) -> types.ModuleType | None:
    """``fast.quant.nvfp4_gluon``, whose kernel quantizes the columnwise operand alone (its docstring: the H100
    figures), where it applies: a CUDA tensor of bfloat16 or float16, ``usage="columnwise"``, round to nearest, the
    per-tensor amax, TE's scale rule, 1x16 blocks, no RHT, whole 128 x 64 tiles, and a Triton with Gluon; else None
    (the Triton kernel)."""
    covered = s._replace(
        usage="columnwise", block="1x16", amax_scope="tensor", rht=False, rounding="rne", scale_rule="te"
    )
    if x.device.type != "cuda" or x.dtype not in (torch.bfloat16, torch.float16) or s != covered:
        return None
    try:
        from fast.quant import nvfp4_gluon
    except ImportError:  # Triton before 3.5
        return None
    rows, cols = x.shape
    return nvfp4_gluon if rows % nvfp4_gluon.ROWS == 0 and cols % nvfp4_gluon.COLS == 0 else None


def _quantize_pass(
    x: torch.Tensor,
    s: _Settings,
    out: dict[str, torch.Tensor],
    random_bits: torch.Tensor | None,
    columnwise_random_bits: torch.Tensor | None,
    sources: list[torch.Tensor],
    n_sources: int,
    tiling: _Tiling,
) -> None:
    """The second pass: scales and codes of each operand from the int32 amax bits in ``sources`` (the operands' in
    order, ``n_sources`` each: :func:`_amax_pass`'s, or the given amaxes), which the kernel writes into ``out``."""
    rows, cols = x.shape
    dummy = out.get("amax", out.get("columnwise_amax"))
    q = tiling.quantize
    variant = {
        "INPUT": _INPUT_DTYPES[x.dtype],
        "TILE_2D": s.block == "16x16",
        "ROW_AMAX": s.amax_scope == "row",
        "ROUNDING": 0 if s.rounding == "rne" else 2,
        "RANDOM_BITS": 0 if random_bits is None else _RANDOM_DTYPES[random_bits.dtype],
        "RULE": _RULE_IDS[s.scale_rule],
        "ZERO_ENC": s.zero_scale == "zero",
        "EVEN": rows % q.rows == 0 and cols % q.cols == 0,
        "SANITIZE": x.device.type != "cuda",
        "SOURCES": triton.next_power_of_2(n_sources),
        "STORE_EVICTION": _store_eviction(x, s),
    }
    if not s.columnwise:
        tiles = triton.cdiv(rows, q.rows) * triton.cdiv(cols // 16, q.cols // 16)
        jit(_nvfp4_rowwise_kernel)[(_programs(x, tiles, q.programs_per_sm),)](
            _as_words(x),
            dummy if random_bits is None else _as_words(random_bits),
            out["data"],
            out["scales"],
            out["amax"],
            out["tensor_scale"],
            sources[0],
            n_sources,
            rows,
            cols,
            **variant,
            BR=q.rows,
            NB=q.cols // 16,
            V=8 // x.element_size(),
            **_launch_options(x, q),
        )
        return
    gluon_kernel = _gluon_columnwise(x, s)
    if gluon_kernel is not None:
        constexprs = {name: variant[name] for name in ("INPUT", "ZERO_ENC", "STORE_EVICTION")}
        gluon_kernel.quantize_columnwise(x, out, sources[0], n_sources, constexprs)
        return
    tiles = triton.cdiv(rows, q.rows) * triton.cdiv(cols, q.cols)
    jit(_nvfp4_quantize_kernel)[(_programs(x, tiles, q.programs_per_sm),)](
        x,
        _kernel_bits(random_bits, dummy),
        _kernel_bits(columnwise_random_bits, dummy),
        *(out.get(f"{p}{n}", dummy) for p in ("", "columnwise_") for n in ("data", "scales", "amax", "tensor_scale")),
        *(sources if s.rowwise else [dummy, *sources]),
        n_sources,
        rows,
        cols,
        **variant,
        ROWWISE=s.rowwise,
        COLUMNWISE=True,
        RHT=s.rht,
        COLUMNWISE_RANDOM_BITS=0 if columnwise_random_bits is None else _RANDOM_DTYPES[columnwise_random_bits.dtype],
        SAME_AMAX=s.amax_source == "computed",
        BM=q.rows,
        BK=q.cols,
        STAGES=q.stages,
        # Capped: ragged tiles (two copies of the body), and the columnwise operand alone (stochastic rounding takes
        # 159-167 registers uncapped, 128 without spills under the cap of 4 programs; Triton 3.6 for sm_90).
        **_launch_options(x, q, resident=not variant["EVEN"] or not s.rowwise),
    )


def _quantize_triton(
    x: torch.Tensor,
    s: _Settings,
    random_bits: torch.Tensor | None,
    columnwise_random_bits: torch.Tensor | None,
    given: list[torch.Tensor],
    tiling: _Tiling | None = None,
) -> dict[str, torch.Tensor]:
    """Both passes with the Triton kernels, or the quantize pass alone from the ``given`` amaxes (arguments checked,
    ``x`` contiguous); ``tiling`` overrides the launch shapes (the benchmarks' sweeps)."""
    out = _outputs(x, s, given)
    wide_random = any(b is not None and b.dtype == torch.uint32 for b in (random_bits, columnwise_random_bits))
    tiling = tiling or _tiling(s, x.device, (x.shape[0], x.shape[1]), x.dtype, wide_random)
    with _interpreter_errstate(x):
        if given:
            sources, n_sources = [amax.detach().view(torch.int32) for amax in given], 1
        else:
            sources, n_sources = _amax_pass(x, s, out, tiling)
        _quantize_pass(x, s, out, random_bits, columnwise_random_bits, sources, n_sources, tiling)
    for prefix in ("", "columnwise_"):
        if f"{prefix}amax" in out:
            out[f"{prefix}amax"] = out[f"{prefix}amax"].view(torch.float32)
    return out


# %% Torch path


def _full(like: torch.Tensor, value: float) -> torch.Tensor:
    return torch.full_like(like, value, dtype=torch.float32)


def _torch_hadamard_16(values: torch.Tensor) -> torch.Tensor:
    """:func:`hadamard_16_columns` with torch ops on the rows of float32 ``[R, C]`` (16-element chunks of each row)."""
    rows, cols = values.shape
    lane = torch.arange(16, device=values.device)
    signs = torch.where(((RHT_SIGN_MASK >> lane) & 1) != 0, -0.25, 0.25).to(torch.float32)
    v = values.reshape(rows, cols // 16, 16) * signs
    for h in (1, 2, 4, 8):
        pairs = v.reshape(rows, cols // 16, 16 // (2 * h), 2, h)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        v = torch.stack([a + b, a - b], dim=-2)
    bits = v.reshape(rows, cols).view(torch.int32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    quiet = (bits | 0x400000) & -65536
    return torch.where((bits & 0x7FFFFFFF) > _F32_INF, quiet, rounded).view(torch.float32)


def _e4m3_values(codes: torch.Tensor) -> torch.Tensor:
    """float32 value of E4M3 codes (uint8), from the bit fields (0x7F/0xFF NaN)."""
    c = codes.to(torch.int32)
    exponent, mantissa = (c >> 3) & 15, c & 7
    normal = (((exponent + 120) << 23) | (mantissa << 20)).view(torch.float32)
    value = torch.where(exponent == 0, mantissa.to(torch.float32) * 2.0**-9, normal)
    value = torch.where((c & 0x80) != 0, -value, value)
    return torch.where((c & 0x7F) == 0x7F, torch.full_like(value, float("nan")), value)


def _torch_operand(
    values: torch.Tensor, random_bits: torch.Tensor | None, given_amax: torch.Tensor | None, s: _Settings
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(data, scales, amax, tensor_scale)`` of one float32 operand ``[R, C]`` with torch ops; ``given_amax``
    (float32 ``[1]``) replaces the operand's amax (a copy of it is returned)."""
    rows, cols = values.shape
    magnitude = values.view(torch.int32) & 0x7FFFFFFF
    if s.scale_rule == "te":
        magnitude = magnitude.masked_fill(magnitude > _F32_INF, 0)
    if given_amax is not None:
        amax = given_amax.clone()
    else:
        amax_bits = magnitude.amax(dim=1) if s.amax_scope == "row" else magnitude.amax().reshape(1)
        amax = amax_bits.view(torch.float32)
    blocks = magnitude.reshape(rows, cols // 16, 16).amax(dim=2)
    if s.block == "16x16":
        blocks = blocks.reshape(rows // 16, 16, cols // 16).amax(dim=1).repeat_interleave(16, dim=0)
    block_amax = blocks.view(torch.float32)
    if s.scale_rule == "te":  # torch.fmin is TE's fminf: it drops a NaN operand (a given NaN or negative amax)
        encode = torch.fmin(_full(amax, 2688.0) / amax, _full(amax, _FLT_MAX))
        encode = torch.where((amax == 0) | (encode == 0), _full(amax, 1.0), encode)
        tensor_scale = _full(encode, 1.0) / encode
        target = torch.fmin(block_amax * (encode * _full(encode, _SIXTH)).reshape(-1, 1), _full(block_amax, _FLT_MAX))
        codes = cast_fp8(target.contiguous(), format="float8_e4m3fn", overflow="saturate")["codes"]
        block_scale = _e4m3_values(codes)
        enc = torch.fmin(
            _full(block_scale, 1.0) / (block_scale * tensor_scale.reshape(-1, 1)), _full(block_scale, _FLT_MAX)
        )
        if s.zero_scale == "zero":
            enc = torch.where(block_scale == 0, _full(enc, 0.0), enc)
    else:
        if s.scale_rule == "torchao":
            tensor_scale = amax / _full(amax, 2688.0)
            block_scaled = block_amax / _full(block_amax, 6.0)
        else:
            tensor_scale = amax * _full(amax, _INV_2688)
            block_scaled = block_amax * _full(block_amax, _SIXTH)
        ratio = block_scaled / tensor_scale.reshape(-1, 1)
        clamped = torch.clamp(ratio, _TORCHAO_FLOOR, _E4M3_MAX)  # NaN stays NaN
        codes = cast_fp8(clamped.contiguous(), format="float8_e4m3fn", overflow="saturate")["codes"]
        block_scale = _e4m3_values(codes)
        enc = (_full(tensor_scale, 1.0) / tensor_scale).reshape(-1, 1) / block_scale
    scaled = (values.reshape(rows, cols // 16, 16) * enc[:, :, None]).reshape(rows, cols).contiguous()
    q = cast_fp4(scaled, format="float4_e2m1fn", rounding=s.rounding, nan="max", random_bits=random_bits)["codes"]
    return pack_nibbles(q)["packed"], codes, amax, tensor_scale.reshape(amax.shape)


def _quantize_torch(
    x: torch.Tensor,
    s: _Settings,
    random_bits: torch.Tensor | None,
    columnwise_random_bits: torch.Tensor | None,
    given: list[torch.Tensor],
) -> dict[str, torch.Tensor]:
    values = x.to(torch.float32)
    out: dict[str, torch.Tensor] = {}
    operands = []
    if s.rowwise:
        operands.append(("", values, random_bits))
    if s.columnwise:
        operand = values.t().contiguous()
        operands.append(("columnwise_", _torch_hadamard_16(operand) if s.rht else operand, columnwise_random_bits))
    for (prefix, operand, bits), given_amax in zip(operands, given or [None] * len(operands), strict=True):
        data, scales, amax, tensor_scale = _torch_operand(operand, bits, given_amax, s)
        out.update(
            {
                f"{prefix}data": data,
                f"{prefix}scales": scales,
                f"{prefix}amax": amax,
                f"{prefix}tensor_scale": tensor_scale,
            }
        )
    return out


# %% Argument checks


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_choice(name: str, value: object, allowed: tuple[Any, ...]) -> None:
    if not any(type(value) is type(choice) and value == choice for choice in allowed):
        raise ValueError(f"Got {name}={value!r}, but {name} must be one of {list(allowed)}")


def _check_settings(s: _Settings) -> None:
    _check_choice("usage", s.usage, USAGES)
    _check_choice("block", s.block, BLOCKS)
    _check_choice("amax_scope", s.amax_scope, AMAX_SCOPES)
    _check_choice("rht", s.rht, (False, True))
    _check_choice("rounding", s.rounding, ROUNDINGS)
    _check_choice("scale_rule", s.scale_rule, SCALE_RULES)
    _check_choice("zero_scale", s.zero_scale, ZERO_SCALES)
    _check_choice("amax_source", s.amax_source, AMAX_SOURCES)
    if s.amax_source == "given" and s.amax_scope == "row":
        raise ValueError(
            "Got amax_source='given' and amax_scope='row', but a given amax is per tensor "
            "(TE's quantize_with_amax does not support row-scaled NVFP4); use amax_scope='tensor'"
        )
    if s.amax_scope == "row":
        for name, value, allowed in (
            ("rht", s.rht, False),
            ("block", s.block, "1x16"),
            ("rounding", s.rounding, "rne"),
        ):
            if value != allowed:
                raise ValueError(
                    f"Got amax_scope='row' and {name}={value!r}, but the row-scaled variant needs {name}={allowed!r} "
                    "(TE's row_scaled_nvfp4 supports no RHT, 2D blocks or stochastic rounding)"
                )
        if s.usage == "columnwise":
            raise ValueError(
                "Got amax_scope='row' and usage='columnwise', but the row-scaled variant needs the rowwise operand "
                "(TE's row_scaled_nvfp4); use usage='both'"
            )
    if s.scale_rule != "te":
        for name, value, allowed in (
            ("block", s.block, "1x16"),
            ("rht", s.rht, False),
            ("rounding", s.rounding, "rne"),
            ("amax_scope", s.amax_scope, "tensor"),
            ("zero_scale", s.zero_scale, "flt_max"),
        ):
            if value != allowed:
                raise ValueError(
                    f"Got scale_rule={s.scale_rule!r} and {name}={value!r}, but torchao's nvfp4_quantize has "
                    f"{name}={allowed!r} only"
                )


def _check_x(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    if x.dtype not in _INPUT_DTYPES:
        allowed = [_dtype_name(d) for d in _INPUT_DTYPES]
        raise TypeError(f"Got x.dtype={_dtype_name(x.dtype)}, but x must be one of {allowed}")
    shape = tuple(x.shape)
    if x.dim() != 2:
        raise ValueError(f"Got x.shape={shape}, but x must be 2-D [M, K]; reshape the leading dimensions into M")
    if x.numel() == 0:
        raise ValueError(f"Got x.shape={shape}, but x must not be empty: NVFP4 needs at least one 16x16 tile")
    if shape[0] % 16 or shape[1] % 16:
        raise ValueError(
            f"Got x.shape={shape}, but M and K must be multiples of 16 (TE's NVFP4 quantizer); pad x with zeros"
        )
    return x


def _check_random_bits(
    name: str, bits: object, rounding: str, needed: bool, shape: tuple[int, int], x: torch.Tensor
) -> None:
    if rounding != "stochastic" or not needed:
        if bits is not None:
            why = f"rounding={rounding!r}" if rounding != "stochastic" else "usage, which leaves this operand out"
            raise ValueError(f"Got {name} with {why}, but {name} is only for stochastic rounding of its operand")
        return
    if bits is None:
        raise ValueError(
            f"Got rounding='stochastic' and no {name}, but stochastic rounding needs {name}: "
            f"a uint8 or uint32 tensor of shape {shape}"
        )
    if not isinstance(bits, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(bits).__name__}, but {name} must be a torch.Tensor")
    if bits.dtype not in _RANDOM_DTYPES:
        raise TypeError(f"Got {name}.dtype={_dtype_name(bits.dtype)}, but {name} must be uint8 or uint32")
    if tuple(bits.shape) != shape:
        raise ValueError(f"Got {name}.shape={tuple(bits.shape)}, but {name} must have shape {shape}")
    if bits.device != x.device:
        raise ValueError(f"Got {name} on {bits.device}, but {name} must be on x's device ({x.device})")


def _check_amax(name: str, amax: object, amax_source: str, needed: bool, x: torch.Tensor) -> None:
    if amax_source != "given" or not needed:
        if amax is not None:
            why = f"amax_source={amax_source!r}" if amax_source != "given" else "usage, which leaves this operand out"
            raise ValueError(f"Got {name} with {why}, but {name} is only for amax_source='given' and its operand")
        return
    if amax is None:
        raise ValueError(
            f"Got amax_source='given' and no {name}, but a given amax needs {name}: a float32 tensor of shape (1,)"
        )
    if not isinstance(amax, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(amax).__name__}, but {name} must be a torch.Tensor")
    if amax.dtype != torch.float32:
        raise TypeError(f"Got {name}.dtype={_dtype_name(amax.dtype)}, but {name} must be float32")
    if tuple(amax.shape) != (1,):
        raise ValueError(f"Got {name}.shape={tuple(amax.shape)}, but {name} must have shape (1,)")
    if amax.device != x.device:
        raise ValueError(f"Got {name} on {amax.device}, but {name} must be on x's device ({x.device})")


# %% Public function


def nvfp4(
    x: torch.Tensor,
    *,
    usage: str = "both",
    block: str = "1x16",
    amax_scope: str = "tensor",
    rht: bool = False,
    rounding: str = "rne",
    scale_rule: str = "te",
    zero_scale: str = "flt_max",
    amax_source: str = "computed",
    random_bits: torch.Tensor | None = None,
    columnwise_random_bits: torch.Tensor | None = None,
    amax: torch.Tensor | None = None,
    columnwise_amax: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Quantize a float32/bfloat16/float16 matrix to NVFP4: rowwise and/or columnwise operands.

    Contract
    --------
    ``quant.nvfp4`` (``specs/quant/nvfp4.yaml``): per operand (``x``, and ``x.T`` or its random
    Hadamard transform with ``rht``), the amax (NaN ignored under ``te``), the tensor scale
    (``te``: ``S_dec = fl32(1 / S_enc)``, ``S_enc = min(fl32(2688 / amax), FLT_MAX)`` or 1 for amax
    0 / Inf; torchao: ``amax / 2688``), E4M3 block scales over 1x16 blocks or 16x16 tiles, encode
    scales (``zero_scale`` decides a block scale that rounds to 0 under ``te``) and E2M1 codes of
    ``fl32(v * enc)``, rounded to nearest even or stochastically with ``random_bits`` /
    ``columnwise_random_bits``.  ``amax_source="given"``: the per-tensor amaxes are ``amax`` /
    ``columnwise_amax`` (float32 ``[1]`` on ``x``'s device, any value: 0, Inf, NaN, negative follow
    the rule's arithmetic; a block above it saturates its scale to 448 and its elements to ±6), copied
    into the ``amax`` outputs, and the Triton path reads ``x`` once.

    Source
    ------
    TransformerEngine@d0067d0 ``common/cast/nvfp4`` (kernels), ``reference_nvfp4.py``,
    ``test_cast_nvfp4_transpose.cu``, ``NVFP4Quantizer::quantize_with_amax``; torchao
    ``nvfp4_quantize`` (``per_tensor_scale``); see the spec for which value follows which.

    Encoding
    --------
    ``data`` uint8 ``[M, K/2]`` (low nibble first), ``scales`` uint8 E4M3 ``[M, K/16]``, ``amax`` and
    ``tensor_scale`` float32 ``[1]`` (or ``[M]`` for ``amax_scope="row"``); ``columnwise_*`` the
    same for ``x.T`` (``[K, M/2]``, ``[K, M/16]``, ``[1]`` or ``[K]``).  Only the outputs of the
    operands ``usage`` names are returned, on ``x``'s device.

    Edge cases
    ----------
    As ``reference.quant.nvfp4``: amax 0 or Inf gives ``S_enc = 1``; NaN elements give +6 (0x7), ±Inf
    ±6, -0.0 0x8; torchao's rules give NaN scales for amax 0 or NaN.

    The implementation (Triton kernels or torch ops) is chosen per call by ``QCONFORM_FAST_PATH``.
    Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16 tensor and random bits are
    uint8 or uint32 tensors; ``ValueError`` for unknown or unsupported parameters (as the
    reference), an ``x`` that is not 2-D, empty or not a multiple of 16 in both dims, random bits
    missing, superfluous, of the wrong shape or on another device, and given amaxes missing,
    superfluous, not of shape ``(1,)`` or on another device (``TypeError`` unless float32 tensors);
    ``RuntimeError`` where a forced Triton path cannot run.
    """
    s = _Settings(usage, block, amax_scope, rht, rounding, scale_rule, zero_scale, amax_source)
    _check_settings(s)
    _check_x(x)
    rows, cols = x.shape
    _check_random_bits("random_bits", random_bits, rounding, s.rowwise, (rows, cols), x)
    _check_random_bits("columnwise_random_bits", columnwise_random_bits, rounding, s.columnwise, (cols, rows), x)
    _check_amax("amax", amax, amax_source, s.rowwise, x)
    _check_amax("columnwise_amax", columnwise_amax, amax_source, s.columnwise, x)
    given = [t for t in (amax, columnwise_amax) if t is not None]
    x = x.contiguous()
    if random_bits is not None:
        random_bits = random_bits.contiguous()
    if columnwise_random_bits is not None:
        columnwise_random_bits = columnwise_random_bits.contiguous()
    run: Callable[..., dict[str, torch.Tensor]] = (
        _quantize_triton if selected_path(x.device) == "triton" else _quantize_torch
    )
    return run(x, s, random_bits, columnwise_random_bits, given)


# %% Benchmark


def bench(
    shape: tuple[int, int] = (8192, 8192), *, dtype: torch.dtype = torch.bfloat16, usage: str = "rowwise", **params: Any
) -> dict[str, float]:
    """Median time of :func:`nvfp4` on a random CUDA matrix, beside a device-to-device copy.

    Bytes moved: the input read twice (amax pass and quantize pass) plus every output written once.
    Returns ``ms``, ``gb_per_s``, ``copy_gb_per_s`` and ``fraction_of_copy``.
    """
    from triton.testing import do_bench

    x = (torch.randn(shape, device="cuda") * 4).to(dtype)
    out = nvfp4(x, usage=usage, **params)
    ms = do_bench(lambda: nvfp4(x, usage=usage, **params), return_mode="median")
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    moved = 2 * x.numel() * x.element_size() + sum(t.numel() * t.element_size() for t in out.values())
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
    """Check the Triton kernels against the torch path on an irregular shape, then time them on CUDA."""
    device_ = "cuda" if torch.cuda.is_available() else "cpu"
    if device_ == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn((208, 176), generator=generator) * 3).to(torch.bfloat16).to(device_)
    for usage in USAGES:
        for block in BLOCKS:
            for rht in (False, True):
                os.environ[PATH_ENV] = "triton"
                kernel = nvfp4(x, usage=usage, block=block, rht=rht)
                os.environ[PATH_ENV] = "torch"
                torch_path = nvfp4(x, usage=usage, block=block, rht=rht)
                bad = {k: int((kernel[k].view(torch.uint8) != torch_path[k].view(torch.uint8)).sum()) for k in kernel}
                print(f"usage={usage} block={block} rht={rht}: mismatching bytes {bad}")
    os.environ.pop(PATH_ENV, None)
    if device_ == "cuda":
        for usage in ("rowwise", "both"):
            print(usage, bench(usage=usage))


if __name__ == "__main__":
    _main()
