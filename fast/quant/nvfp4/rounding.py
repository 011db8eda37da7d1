"""NVFP4 rounding device functions: E2M1 codes (nearest even, stochastic), the E4M3 block scale, the correctly
rounded reciprocal and bfloat16 rounding, each with an interpreted twin where Triton's interpreter emulates the
compiled instruction wrongly (``fast._triton.device_modes``)."""

from __future__ import annotations

from fast._triton import (
    device,
    device_modes,
    fp8_code,
    round_to_code,
    tl,
)
from fast.quant.nvfp4.settings import E4M3_MAX_CONSTEXPR

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
    """:func:`e2m1_pairs` as two :func:`_e2m1_rne_raw` and a nibble pack (the interpreter cannot run PTX)."""
    return (_e2m1_rne_raw(low) + (_e2m1_rne_raw(high) << 4)).to(tl.uint8)


@device_modes(interpreted=_e2m1_pairs_interpreted)
def e2m1_pairs(low, high):
    """uint8 ``code(low) | code(high) << 4``: :func:`e2m1_rne` of float32 products ``v = x * enc`` (a product makes
    every NaN the positive canonical one), two elements per instruction in float16x2 arithmetic.

    Per pair: the float32 bits are rounded to odd at float16's precision (``b | ((b + 0x1FFF) & 0x2000)`` sets bit 13
    where bits 0-12 are not all zero, as the add carries into it; ``cvt.rz.f16x2.f32`` then drops bits 0-12), so ``h``
    is ``v`` where ``v`` is a float16 and otherwise whichever of its two float16 neighbours has an odd last bit: ``h``
    equals an E2M1 midpoint (0.25, 0.75, ..., 5, all of them float16 values with an even last bit) only if ``v`` does,
    and lies on the same side of every other E2M1 midpoint and grid value, so rounding ``h`` to E2M1 is rounding ``v``
    (no double rounding; ``|v|`` below ``2**-14`` gives code 0 either way, beyond 65504 the clamp). Then, as
    ``fast.quant.mx.rounding.e2m1_pairs``:
    ``c = min(|h|, 6)`` (NaN -> 6), ``m = 2**-5 * 2**e`` with ``2**e`` the binade of
    ``max(c, 1)`` (1, 2 or 4: E2M1's step is ``2**(e - 1)``), ``t = c * 2**-14 + m`` (one ``fma``) rounds to nearest
    even at ``m``'s last place, which is the step times ``2**-14``, and ``t - m`` is the rounded value times ``2**-14``,
    whose float16 bits 9-11 are the magnitude code; shifted up by 3 beside ``h``'s sign, each half holds its nibble in
    the top of its byte 1 (the low nibble zero); ``prmt`` gathers those bytes, a product by 17 (``y + (y << 4)``, no
    carries) puts each pair's two nibbles in one byte and a last ``prmt`` gathers those.
    The sticky bit is an add and an and-or, not a ``setp`` and a predicated ``or`` (the same bytes, faster; see
    ``docs/performance.md``).
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
    """:func:`e2m1_stochastic` by ``fast._triton.round_to_code`` (the interpreter cannot run PTX)."""
    bits = scaled.to(tl.int32, bitcast=True)
    return round_to_code(bits, bits, random, 1, 1, 28, 8, True, 7, 7, 7, 2, RANDOM_BITS)


@device_modes(interpreted=_e2m1_stochastic_interpreted)
def e2m1_stochastic(scaled, random, RANDOM_BITS: tl.constexpr):
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
    the floor.  The code is in the low bits of ``2**16``'s float32 bits: far fewer instructions than the generic
    integer rounding.  32-bit random
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
    """:func:`e4m3_scale` by :func:`_e4m3_rne` (integer arithmetic)."""
    return _e4m3_rne(target)


@device_modes(interpreted=_e4m3_scale_interpreted)
def e4m3_scale(target):
    """``(code, value)`` of :func:`_e4m3_rne`, by the hardware: ``cvt.rn.satfinite.e4m3x2.f32``
    (``fast._triton.fp8_code``: nearest even, saturating at +-448, NaN -> 0x7F, float32 subnormals -> +-0, all of
    them :func:`_e4m3_rne`'s codes) and the exact conversion of the code back to float32."""
    code = fp8_code(target, False)
    return code, code.to(tl.float8e4nv, bitcast=True).to(tl.float32)


@device
def _reciprocal_interpreted(d):
    return tl.div_rn(full_like(d, 1.0), d)


@device_modes(interpreted=_reciprocal_interpreted)
def reciprocal_rn(d):
    """``fl32(1 / d)``, correctly rounded (IEEE, subnormals kept): ``rcp.rn.f32``, the same value as ``div.rn.f32``
    of 1 in fewer instructions; interpreted, ``tl.div_rn``."""
    return tl.inline_asm_elementwise("rcp.rn.f32 $0, $1;", "=r,r", [d], dtype=tl.float32, is_pure=True, pack=1)


@device
def full_like(t, value):
    """A float32 tensor of ``t``'s shape filled with ``value`` (``t * 0 + value`` would turn Inf into NaN).  A select of
    ``value`` either way, rather than ``tl.full``: it takes ``t``'s layout in a Gluon kernel too
    (``fast.quant.nvfp4.gluon``), where ``tl.full`` has none; the compiled code is the same."""
    return tl.where(t == t, value, value)


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
    normal = tl.minimum(rounded, E4M3_MAX_CONSTEXPR)
    shifted = a + 24576.0
    is_normal = a >= 0.015625
    value = tl.where(is_normal, normal, shifted - 24576.0)
    code = tl.where(is_normal, (normal.to(tl.int32, bitcast=True) >> 20) - 960, shifted.to(tl.int32, bitcast=True) & 15)
    signed = (value.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return tl.where(v != v, 0x7F, code | ((sign >> 24) & 0x80)), tl.where(v != v, v, signed)


@device
def _bfloat16_rne_interpreted(v):
    """:func:`bfloat16_rne` in integer arithmetic (the interpreter's bfloat16 conversions flush subnormals)."""
    bits = v.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # -65536 is 0xFFFF0000
    quiet = (bits | 0x400000) & -65536
    return tl.where((bits & 0x7FFFFFFF) > 0x7F800000, quiet, rounded).to(tl.float32, bitcast=True)


@device_modes(interpreted=_bfloat16_rne_interpreted)
def bfloat16_rne(v):
    """float32 ``v`` rounded to bfloat16 (nearest even, subnormals kept, overflow to Inf; NaN stays NaN, its payload
    and sign unspecified: every later step treats all NaNs alike), as float32: the hardware conversion
    (``cvt.rn.bf16x2.f32``) and back, where the integer rounding took six instructions an element."""
    return v.to(tl.bfloat16).to(tl.float32)
