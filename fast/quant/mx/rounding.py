"""MX rounding device functions: the E8M0 scale byte and its reciprocal, element codes (:func:`mx_code`), FP4 of
bfloat16 pairs in int32 words, and the NaN-aware block maxima, each with an interpreted twin where Triton's
interpreter emulates the compiled instruction wrongly (``fast._triton.device_modes``)."""

from __future__ import annotations

from fast._triton import device, device_modes, tl

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
    """:func:`e2m1_pairs` as two :func:`mx_code` (interpreted: integer arithmetic) of ``32 * v`` and a nibble pack."""
    low_code = mx_code(low * 32.0, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    high_code = mx_code(high * 32.0, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    return (low_code | (high_code << 4)).to(tl.uint8)


@device_modes(interpreted=_e2m1_pairs_interpreted)
def e2m1_pairs(low, high):
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
    """:func:`half_maxima` as integer maxima of the float32 magnitude bits of each half (``te``: NaN zeroed)."""
    low = (words << 16) & 0x7FFF0000
    high = words & 0x7FFF0000
    if EDGES == 0:
        low = tl.where(low > 0x7F800000, 0, low)
        high = tl.where(high > 0x7F800000, 0, high)
    if AXIS == 3:
        return _amax(_amax(low, 2), 0), _amax(_amax(high, 2), 0)
    return _amax(low, AXIS), _amax(high, AXIS)


@device_modes(interpreted=_half_maxima_interpreted)
def half_maxima(words, AXIS: tl.constexpr, EDGES: tl.constexpr):
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
    """:func:`e2m1_words` as float32 products and :func:`mx_code` (interpreted: integer arithmetic) of each half."""
    low = (words << 16).to(tl.float32, bitcast=True) * (reciprocal << 16).to(tl.float32, bitcast=True)
    high = (words & -65536).to(tl.float32, bitcast=True) * (reciprocal & -65536).to(tl.float32, bitcast=True)
    low_code = mx_code(low, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    high_code = mx_code(high, 1, 1, 0x7, 6.0, 28, 0x8, 4194304.0)
    return (low_code | (high_code << 4)).to(tl.uint8)


@device_modes(interpreted=_e2m1_words_interpreted)
def e2m1_words(words, reciprocal):
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
    """:func:`block_amax` as an integer max over float32 magnitude bits (NumPy's nanmax, the interpreter's float
    max, mishandles signalling NaNs); ``te`` zeroes NaN magnitudes first."""
    magnitude = value.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    if EDGES == 0:
        magnitude = tl.where(magnitude > 0x7F800000, 0, magnitude)
    if AXIS == 3:
        return _amax(_amax(magnitude, 2), 0)
    return _amax(magnitude, AXIS)


@device_modes(interpreted=_block_amax_interpreted)
def block_amax(value, AXIS: tl.constexpr, EDGES: tl.constexpr):
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
def reciprocal_pairs(low, high, ZERO_BITS: tl.constexpr):
    """int32 words of the bfloat16 reciprocals ``2**(127 - s)`` of scale bytes ``low`` (low half) and ``high``."""
    low_bits = mx_reciprocal(low, ZERO_BITS).to(tl.int32, bitcast=True) >> 16  # exact: 16 low bits are 0
    high_bits = mx_reciprocal(high, ZERO_BITS).to(tl.int32, bitcast=True) & -65536
    return low_bits | high_bits
