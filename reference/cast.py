"""Casts from float32/float16 to narrow formats (contract family ``cast``).

Every result is computed with integer arithmetic on the float32 bit pattern of the input and
the bit-field widths of the target from :mod:`reference.formats`; no float operation ever
rounds.  float16 inputs are widened to float32 first (exact); bfloat16 values arrive as
float32.  The rounding core, :func:`_round_magnitude`, only needs ``exponent_bits``,
``mantissa_bits`` and ``bias``, so every signed narrow float (fp8, fp6, fp4) shares it; the
NaN, overflow and zero codes are what is specific to each format's encoding.

Rounding modes (``rounding`` of ``cast.fp8``, ``cast.fp6``, ``cast.fp4``)
-----------------------------------------------------------------------
The magnitude ``|x|`` is a 24-bit significand times a power of two.  Fitting it to the target
drops the ``s`` lowest significand bits (``s = 23 - mantissa_bits`` in the target's normal range,
one more per binade below it in the target's subnormal range); ``d`` is the value of the
dropped bits, ``0 <= d < 2**s``.  The kept code is then

- ``rne``: rounded to nearest, ties to the even code;
- ``rtz``: truncated (the magnitude rounds toward zero);
- ``stochastic``: rounded up iff ``floor(d * 2**k / 2**s) + r >= 2**k``, where ``r`` is the
  element's ``k``-bit random number (``k = 8`` for ``uint8`` ``random_bits``, ``32`` for
  ``uint32``); for ``s < k`` the product ``d * 2**(k - s)`` is exact.  This adds ``k`` random
  bits aligned to the top of the dropped field and keeps the carry: a value ``f`` of the way
  from one code to the next rounds up with probability ``floor(f * 2**k) / 2**k`` (``f``
  itself when ``f`` has at most ``k`` bits), so an exact value (``d == 0``) never moves.
  With ``k = 8`` it is TransformerEngine's software stochastic rounding
  ``q = floor((|x| + u*step) / step)`` with ``u = byte / 256``, evaluated exactly; TE evaluates
  it in float32, which agrees wherever that sum is exact (for every bfloat16 input, but not for
  a float32 ``|x|`` below the smallest subnormal step, where the sum can round up to a step).

In every mode overflow is decided **after** rounding, from the code the magnitude rounds to,
and then the overflow policy applies.  IEEE 754 ``roundTowardZero`` would turn every finite
overflow into the largest finite value; here that is what ``overflow="saturate"`` does, while
under ``"nonsaturating"`` a truncated code beyond the largest finite one still overflows (to
Inf or NaN).  ml_dtypes' ``ConvertImpl<..., kSaturate=false, kTruncate=true>``
(jax-ml/ml_dtypes@00b4fab ``ml_dtypes/include/float8.h``, C++ only) does the same: it skips the
rounding step, and its overflow check on the truncated bits still returns ``infinity()`` (the
NaN of the fn/fnuz formats).
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice
from reference.formats import FloatFormat, get_format

__all__ = [
    "E8M0_ROUNDINGS",
    "E8M0_ZERO_POLICIES",
    "FP4_FORMATS",
    "FP6_FORMATS",
    "FP8_FORMATS",
    "INT_DTYPES",
    "INT_MODES",
    "NAN_POLICIES",
    "OVERFLOW_POLICIES",
    "ROUNDINGS",
    "e8m0",
    "fp4",
    "fp6",
    "fp8",
    "int_",
]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
"""Targets of ``cast.fp8`` (and of ``decode.fp8``)."""
FP6_FORMATS: tuple[str, ...] = ("float6_e2m3fn", "float6_e3m2fn")
"""Targets of ``cast.fp6`` / ``decode.fp6`` (OCP MX element formats, no Inf or NaN codes)."""
FP4_FORMATS: tuple[str, ...] = ("float4_e2m1fn",)
"""Targets of ``cast.fp4`` / ``decode.fp4``."""

OVERFLOW_POLICIES: tuple[str, ...] = ("saturate", "nonsaturating")
"""What a finite value that rounds beyond the largest finite code, or an infinity, becomes."""
ROUNDINGS: tuple[str, ...] = ("rne", "rtz", "stochastic")
"""Rounding of ``cast.fp8`` / ``fp6`` / ``fp4``; see the module docstring."""
NAN_POLICIES: tuple[str, ...] = ("max", "signed_max", "negative_zero")
"""What NaN becomes in the formats without a NaN code (fp6, fp4)."""
E8M0_ROUNDINGS: tuple[str, ...] = ("floor", "ceil", "nearest_up")
"""Rounding of ``cast.e8m0`` to a power of two."""
E8M0_ZERO_POLICIES: tuple[str, ...] = ("min", "nan")
"""What zero and negative inputs of ``cast.e8m0`` become."""
INT_DTYPES: tuple[str, ...] = ("int8", "int4", "uint4")
"""Targets of ``cast.int``."""
INT_MODES: tuple[str, ...] = ("rne_clamp", "truncate_wrap", "rne_wrap", "rna_wrap")
"""Rounding and range handling of ``cast.int``."""

_FLOAT32 = get_format("float32")
_F32_INF = 0x7F80_0000
_F32_MAGNITUDE = 0x7FFF_FFFF
_RANDOM_BITS_DTYPES = (np.uint8, np.uint32)
_INT_RANGES = {"int8": (8, -128, 127), "int4": (4, -8, 7), "uint4": (4, 0, 15)}
_MAX_SHIFT = 30
"""Right shifts of a 24-bit significand are clipped here: by then RNE and RTZ give 0 anyway."""
_MAX_STOCHASTIC_SHIFT = 60
"""The same for stochastic rounding, computed in int64: ``d << 32`` is below ``2**56``."""
_INT_CLAMP_BITS = 0x4700_0000
"""float32 bits of 2**15: ``rne_clamp`` clamps larger magnitudes here first (beyond every range)."""
_CHUNK = 1 << 16
"""Elements per pass: the temporaries of one chunk stay in cache, which triples throughput."""


def fp8(
    x: np.ndarray, *, format: str, overflow: str, rounding: str = "rne", random_bits: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Round float32/float16 values to FP8 codes.

    Contract
    --------
    ``cast.fp8``: ``codes = round_format(x)``, elementwise, where ``round_format`` rounds the exact
    value of ``x`` to a value representable in ``format`` -- the nearest (ties to the even code),
    toward zero, or stochastically with ``random_bits`` (``rounding``, see the module docstring)
    -- across normal and subnormal targets, and overflow is decided **after** rounding: a value
    overflows when it rounds to a magnitude above the largest finite one.  ``overflow`` chooses
    what overflow and ±Inf give:

    - ``"saturate"``: ±max finite;
    - ``"nonsaturating"``: ±Inf where the format has it (e5m2), else NaN (e4m3fn: with the sign;
      the fnuz formats: their single NaN 0x80).

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0, §5 (conversion, saturation
    modes).  ``"nonsaturating"`` is ml_dtypes' ``astype`` and torch <= 2.12 eager
    ``Tensor.to(float8_e4m3fn)``; ``"saturate"`` is torch >= 2.13 eager e4m3fn
    (pytorch/pytorch#177870, #178817) and torch.compile casts.  torch eager e5m2 and both fnuz
    formats are ``"nonsaturating"`` in every version seen (torch 2.13: e4m3fnuz 248.0 is a tie
    that rounds to even 256 and overflows to 0x80).  The fnuz formats follow ml_dtypes
    (``float8_e4m3fnuz``, ``float8_e5m2fnuz``).  ``rtz`` and ``stochastic``: see the module docstring.

    Encoding
    --------
    One code per ``uint8``: ``S.EEEE.MMM`` (e4m3fn bias 7, e4m3fnuz bias 8) or ``S.EEEEE.MM``
    (e5m2 bias 15, e5m2fnuz bias 16), all fields from :func:`reference.formats.get_format`.
    ``random_bits`` (stochastic rounding only): one ``uint8`` or ``uint32`` per element of ``x``.

    Edge cases
    ----------
    - ±0 keep their sign: 0.0 -> 0x00, -0.0 -> 0x80, except in the fnuz formats, which have no
      negative zero: -0.0 and every negative value that rounds to zero give 0x00.
    - NaN (any payload) -> e4m3fn and e5m2: the NaN with every mantissa bit set and the input's
      sign, 0x7F/0xFF (as torch and TransformerEngine; ml_dtypes gives 0x7E/0xFE for e5m2);
      fnuz: 0x80.
    - Largest finite codes: e4m3fn 0x7E (448), e5m2 0x7B (57344), e4m3fnuz 0x7F (240), e5m2fnuz
      0x7F (57344).  RNE boundaries: e4m3fn 464 rounds to 448, anything larger overflows;
      e5m2 61440 is a tie that goes to even Inf; e4m3fnuz 248 and e5m2fnuz 61440 likewise go
      to even 256 / 65536 and overflow.
    - Overflow and ±Inf: ``saturate`` -> ±max finite; ``nonsaturating`` -> 0x7F/0xFF (e4m3fn,
      NaN), 0x7C/0xFC (e5m2, Inf), 0x80 (fnuz, NaN, whatever the sign).
    - ``rtz``: e4m3fn 479.99 gives 448 and 480 overflows; ``stochastic`` likewise overflows only
      where it rounds up past the largest finite code.
    - float32 subnormal inputs are rounded like any other value (all give ±0 under ``rne``).

    Raises ``TypeError`` unless ``x`` is a float32 or float16 ``numpy.ndarray`` (float64 is
    refused: narrowing it through float32 would round twice) and unless ``random_bits``, when
    given, is a ``uint8`` or ``uint32`` ``numpy.ndarray``; ``ValueError`` for an unknown ``format``,
    ``overflow`` or ``rounding``, for ``random_bits`` of another shape than ``x``, and for
    ``random_bits`` given without ``rounding="stochastic"`` or missing with it.
    """
    _check_float_input(x)
    check_choice("format", format, FP8_FORMATS)
    check_choice("overflow", overflow, OVERFLOW_POLICIES)
    fmt = get_format(format)
    nan_code = fmt.sign_mask if fmt.nan == "fnuz" else fmt.magnitude_mask
    return {
        "codes": _encode(
            x,
            fmt,
            rounding=rounding,
            random_bits=random_bits,
            overflow_code=fmt.max_finite_code if overflow == "saturate" else _overflow_code(fmt),
            nan_codes=(nan_code, nan_code | fmt.sign_mask),
        )
    }


def fp6(
    x: np.ndarray, *, format: str, rounding: str = "rne", nan: str = "max", random_bits: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Round float32/float16 values to FP6 codes (MX E2M3 or E3M2), always saturating.

    Contract
    --------
    ``cast.fp6``: ``codes = round_format(x)`` as in :func:`fp8` (``rounding`` ``rne``, ``rtz`` or
    ``stochastic``), where finite overflow and ±Inf saturate to ±max finite, since the format
    has no Inf or NaN code; ``nan`` chooses what NaN becomes:

    - ``"max"``: +max whatever the NaN's sign (ONNX's float4/float6 documentation;
      TransformerEngine's software stochastic rounding treats NaN as +max for E2M1);
    - ``"signed_max"``: ±max with the NaN's sign;
    - ``"negative_zero"``: +NaN -> -0 (0x20), -NaN -> +0 (0x00): ml_dtypes ``astype``, whose
      ``quiet_NaN()`` of these types is the -0 pattern with the sign bit flipped by a negative
      NaN's sign.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (FP6 E2M3: bias 1, max 7.5; E3M2: bias 3, max 28;
    no Inf/NaN; conversion from NaN implementation-defined).  ml_dtypes ``float6_e2m3fn`` and
    ``float6_e3m2fn`` ``astype`` is ``rounding="rne", nan="negative_zero"``.

    Encoding
    --------
    One code per ``uint8`` in the low 6 bits: ``S.EE.MMM`` (e2m3) or ``S.EEE.MM`` (e3m2); bits 6
    and 7 are zero.  ``random_bits`` as in :func:`fp8`.

    Edge cases
    ----------
    - ±0 keep their sign: -0.0 -> 0x20.
    - Finite overflow and ±Inf -> ±max: 0x1F / 0x3F (7.5 for e2m3, 28 for e3m2); under ``rne``
      e2m3 7.75 is a tie that goes to even 8 and saturates to 7.5, the same code.
    - NaN -> per ``nan``: ``max`` 0x1F; ``signed_max`` 0x1F / 0x3F; ``negative_zero`` 0x20 / 0x00.

    Raises as :func:`fp8`, with ``ValueError`` for an unknown ``nan`` policy.
    """
    _check_float_input(x)
    check_choice("format", format, FP6_FORMATS)
    return {"codes": _encode_saturating(x, get_format(format), rounding, nan, random_bits)}


def fp4(
    x: np.ndarray, *, format: str, rounding: str = "rne", nan: str = "max", random_bits: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Round float32/float16 values to FP4 E2M1 codes, always saturating.

    Contract
    --------
    ``cast.fp4``: as :func:`fp6` for ``float4_e2m1fn`` (the only format), whose magnitudes are
    0, 0.5, 1, 1.5, 2, 3, 4, 6.  Under ``rne`` 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2,
    2.5 -> 2, 3.5 -> 4, 5 -> 4 (ties to the even code); values above 5 give 6, 7 and beyond
    included (7 is a tie that goes to even 8, which saturates).

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (FP4 E2M1: bias 1, no Inf/NaN).  PTX
    ``cvt.rn.satfinite.e2m1x2.f32`` (TransformerEngine NVFP4, round to nearest) and
    ``cvt.rs.satfinite.e2m1x4.f32`` (stochastic; TransformerEngine's software fallback of it is
    ``rounding="stochastic"`` with ``uint8`` random bits, see the module docstring).  ml_dtypes ``float4_e2m1fn``
    ``astype`` is ``rounding="rne", nan="negative_zero"``; torchao's ``_f32_to_floatx_unpacked``
    rounds like ``rne`` and leaves NaN undefined.

    Encoding
    --------
    One code per ``uint8`` in the low 4 bits, ``S.EE.M``: codes 0..7 are the magnitudes above,
    8..15 their negatives (8 is -0).  Packing two codes per byte is the contract ``pack.nibbles``.

    Edge cases
    ----------
    As :func:`fp6`: -0.0 -> 0x8; overflow and ±Inf -> 0x7 / 0xF; NaN -> ``max`` 0x7,
    ``signed_max`` 0x7 / 0xF, ``negative_zero`` 0x8 / 0x0.

    Raises as :func:`fp6`.
    """
    _check_float_input(x)
    check_choice("format", format, FP4_FORMATS)
    return {"codes": _encode_saturating(x, get_format(format), rounding, nan, random_bits)}


def e8m0(x: np.ndarray, *, rounding: str, zero: str, overflow: str) -> dict[str, np.ndarray]:
    """Round float32/float16 values to E8M0 scale bytes (powers of two).

    Contract
    --------
    ``cast.e8m0``: with ``E`` the float32 exponent field and ``M`` the mantissa field of ``|x|``,
    the byte is ``E + up`` (value ``2**(byte - 127)``), where ``up`` is set when ``M`` reaches a
    threshold that depends on ``rounding``:

    - ``"floor"``: never (``2**floor(log2|x|)``, the MX spec's shared-exponent rule);
    - ``"ceil"``: ``M != 0`` (round toward +Inf: cuBLAS / TransformerEngine "RCEIL", PTX
      ``cvt.rp``);
    - ``"nearest_up"``: ``M >= 0x400000``, the guard bit (round to nearest, ties up:
      ``1.5 * 2**e -> 2**(e+1)``).

    For float32 subnormals (``E == 0``, below ``2**-126``) both ``ceil`` and ``nearest_up`` need
    ``M > 0x400000``: values up to ``2**-127`` give byte 0 (``2**-127``, the smallest) and values in
    ``(2**-127, 2**-126)`` give byte 1 (``2**-126``).  For ``nearest_up`` that is what torch and
    ml_dtypes do (torch: round up iff the guard bit is set and either a lower bit is set or the
    input is normal, i.e. ties to even with the implicit bit as the last kept bit, so every
    normal tie goes up and the subnormal tie ``2**-127`` stays); the exact nearest power of two
    below ``1.5 * 2**-127`` would be ``2**-127``.  A byte above 254 (a rounding carry
    out of ``2**127``, or ±Inf) is overflow: ``overflow="saturate"`` gives 0xFE (``2**127``),
    ``"nonsaturating"`` gives 0xFF (NaN).  NaN gives 0xFF always.  ``zero`` decides what zero and
    negative values give, since E8M0 has neither:

    - ``"min"``: the sign is ignored (``-2.0 -> 0x80``) and ±0 give 0x00 (``2**-127``);
    - ``"nan"``: ±0 and every negative value (``-0.0`` and ``-Inf`` included) give 0xFF.

    Positive values at or below ``2**-127`` give 0x00 under both.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.4 (E8M0: bias 127, ``2**-127 .. 2**127``, 0xFF NaN, no
    zero or sign).  torch 2.13 ``Tensor.to(torch.float8_e8m0fnu)`` (c10 ``Float8_e8m0fnu.h``) is
    ``rounding="nearest_up", zero="min", overflow="nonsaturating"``; ml_dtypes 0.6
    ``float8_e8m0fnu`` ``astype`` is ``rounding="nearest_up", zero="nan", overflow="nonsaturating"``;
    TransformerEngine's ``float_to_e8m0`` software fallback (``common/util/ptx_arch_spec.cuh``;
    Blackwell runs PTX ``cvt.rp.satfinite.ue8m0x2.f32`` instead, not checked here) is
    ``rounding="ceil", zero="min", overflow="saturate"``, like torchao's RCEIL scale rule applied
    to a value.

    Encoding
    --------
    One unsigned byte per element; ``codes`` is ``uint8`` with the shape of ``x``.

    Edge cases
    ----------
    - 1.0 -> 0x7F; 1.5 -> 0x80 (``nearest_up``, ``ceil``) or 0x7F (``floor``); 0.75 -> 0x7F
      (``nearest_up``).
    - ``2**127`` -> 0xFE; ``nearest_up`` from ``1.5 * 2**127`` (``ceil`` from just above
      ``2**127``) and +Inf -> 0xFE (``saturate``) or 0xFF (``nonsaturating``).
    - NaN -> 0xFF; -Inf -> 0xFF under ``zero="nan"``, else as +Inf.

    Raises ``TypeError`` unless ``x`` is a float32 or float16 ``numpy.ndarray``, and ``ValueError``
    for an unknown ``rounding``, ``zero`` or ``overflow``.
    """
    _check_float_input(x)
    check_choice("rounding", rounding, E8M0_ROUNDINGS)
    check_choice("zero", zero, E8M0_ZERO_POLICIES)
    check_choice("overflow", overflow, OVERFLOW_POLICIES)
    # ``up`` iff M >= threshold; index 0: float32 subnormals, 1: normals (and Inf/NaN).
    thresholds = {"floor": (1 << 23, 1 << 23), "ceil": (0x40_0001, 1), "nearest_up": (0x40_0001, 0x40_0000)}
    subnormal_threshold, normal_threshold = thresholds[rounding]
    overflow_byte = 0xFE if overflow == "saturate" else 0xFF
    bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.int32)
    out = np.empty(bits.shape, dtype=np.uint8)
    for start in range(0, bits.size, _CHUNK):
        chunk = bits[start : start + _CHUNK]
        magnitude = chunk & _F32_MAGNITUDE
        exponent = magnitude >> _FLOAT32.mantissa_bits
        mantissa = magnitude & ((1 << _FLOAT32.mantissa_bits) - 1)
        byte = exponent + (mantissa >= np.where(exponent == 0, subnormal_threshold, normal_threshold))
        np.copyto(byte, overflow_byte, where=byte > 0xFE)
        not_a_scale = magnitude > _F32_INF
        if zero == "nan":
            not_a_scale |= chunk <= 0  # the int32 view: +0.0 is 0, every negative (-0.0 too) is below
        byte |= not_a_scale.view(np.uint8) * np.uint8(0xFF)  # arithmetic, not a branch per element
        out[start : start + _CHUNK] = byte
    return {"codes": out.reshape(x.shape)}


def int_(x: np.ndarray, *, dtype: str, mode: str) -> dict[str, np.ndarray]:
    """Round float32/float16 values to int8, int4 or uint4, as two's complement bit patterns.

    Contract
    --------
    ``cast.int``: elementwise, ``mode`` chooses the rounding and the range handling:

    - ``"rne_clamp"``: round half to even to an integer, then clamp to the range of ``dtype``
      (int8 -128..127, int4 -8..7, uint4 0..15); ±Inf give the bounds and NaN gives 0;
    - ``"truncate_wrap"``: truncate toward zero, then wrap modulo ``2**bits`` (two's complement);
      NaN and ±Inf give 0 (a declared choice: C and NumPy leave them undefined);
    - ``"rne_wrap"``: round half to even, then wrap modulo ``2**bits``; NaN and ±Inf give 0;
    - ``"rna_wrap"``: round half away from zero, then wrap modulo ``2**bits``; NaN and ±Inf give 0.

    Source
    ------
    ``rne_clamp``: ONNX ``QuantizeLinear`` to (u)int8/(u)int4 (``np.rint`` then clip; zero point 0,
    scale 1).  ``truncate_wrap``: ml_dtypes ``astype(int4)`` / ``astype(uint4)`` and NumPy
    ``astype(np.int8)`` wherever those are defined (finite magnitudes below ``2**63``: NumPy
    converts through int64 first), which is also what ONNX's reference ``Cast`` to int4 does.
    ``rne_wrap``: ONNX's text for Cast to int4 / uint4 (onnx/onnx@f7546912001bc31e92a238b17068a21b373d882e
    ``docs/docsgen/source/technical/int4.md``: "rounding to the nearest-integer (with ties to even) ... and
    truncating").  ``rna_wrap``: onnxruntime 1.32.0's CPU Cast to int4 / uint4 (2.5 -> 3, -0.5 -> -1).
    The wrap of the exact integer is its low bits, so magnitudes of ``2**27`` and more (multiples of 16)
    give 0 for 4-bit targets, as NaN and ±Inf do (the x86 conversion's INT_MIN, wrapped).

    Encoding
    --------
    ``codes`` is ``uint8`` holding the bit pattern: int8 the byte (-1 -> 0xFF); int4 the low
    4 bits (-8 -> 0x8, -1 -> 0xF); uint4 the value 0..15.  Under ``truncate_wrap`` int4 and
    uint4 give the same bits (wrapping depends on the width only); view the bytes as ``int8``
    (int8) or sign-extend the nibble (int4) to read values.

    Edge cases
    ----------
    - ``rne_clamp``: 2.5 -> 2, 3.5 -> 4, -8.5 -> -8 (int4), 127.5 -> 127 (clamped), -0.5 -> 0.
    - ``truncate_wrap``: 7.6 -> 7, 8.0 -> -8 (int4 0x8), -9.0 -> 7, 255.9 -> -1 (int8 0xFF),
      -0.99 -> 0; magnitudes from ``2**31`` up are multiples of 256 and give 0.
    - ``rne_wrap``: 2.5 -> 2, 7.5 -> 8 -> -8 (int4 0x8), -8.5 -> -8, 15.5 -> 16 -> 0 (uint4).
    - ``rna_wrap``: 2.5 -> 3, -0.5 -> -1 (int4 0xF), 7.5 -> -8 (int4 0x8).

    Raises ``TypeError`` unless ``x`` is a float32 or float16 ``numpy.ndarray``, and ``ValueError``
    for an unknown ``dtype`` or ``mode``.
    """
    _check_float_input(x)
    check_choice("dtype", dtype, INT_DTYPES)
    check_choice("mode", mode, INT_MODES)
    width, lowest, highest = _INT_RANGES[dtype]
    bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.int32)
    out = np.empty(bits.shape, dtype=np.uint8)
    for start in range(0, bits.size, _CHUNK):
        chunk = bits[start : start + _CHUNK]
        magnitude = chunk & _F32_MAGNITUDE
        negative = chunk >> 31  # 0 or -1: (i ^ negative) - negative is i or -i, without a branch
        if mode == "rne_clamp":
            exponent, significand = _fields(np.minimum(magnitude, _INT_CLAMP_BITS))
            integer = _round_shifted(significand, _FLOAT32.bias + _FLOAT32.mantissa_bits - exponent, "rne", None)
            value = np.clip((integer ^ negative) - negative, lowest, highest)
            np.copyto(value, 0, where=magnitude > _F32_INF)
        else:
            exponent, significand = _fields(magnitude)
            # |x| = significand * 2**(exponent - 150); only the integer part's low 8 bits matter.
            left = np.clip(exponent - (_FLOAT32.bias + _FLOAT32.mantissa_bits), 0, 8)
            right = np.clip(_FLOAT32.bias + _FLOAT32.mantissa_bits - exponent, 0, _MAX_SHIFT)
            integer = (significand << left) >> right
            if mode != "truncate_wrap":  # |x| < 2**23 has dropped bits to round; above, it is an integer
                shift = np.maximum(right, 1)
                if mode == "rne_wrap":
                    rounded = _round_shifted(significand, shift, "rne", None)
                else:
                    rounded = (significand + (1 << (shift - 1))) >> shift
                integer = np.where(right > 0, rounded, integer)
            value = (integer ^ negative) - negative
        out[start : start + _CHUNK] = value & ((1 << width) - 1)
    return {"codes": out.reshape(x.shape)}


# -- shared pieces ------------------------------------------------------------------------------------
def _check_float_input(x: np.ndarray) -> None:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a numpy.ndarray of dtype float32 or float16")
    if x.dtype == np.float64:
        raise TypeError(
            "Got x.dtype=float64, but x must be float32 or float16: float64 is refused because narrowing it "
            "to a narrow float through float32 rounds twice; convert to float32 first"
        )
    if x.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise TypeError(
            f"Got x.dtype={x.dtype}, but x must be float32 or float16 (pass bfloat16 values as float32); "
            "convert to float32 first"
        )


def _check_random_bits(random_bits: np.ndarray | None, rounding: str, x: np.ndarray) -> None:
    """``rounding`` is known; ``random_bits`` must come with ``"stochastic"`` and only with it.

    ``TypeError`` unless it is a ``uint8`` or ``uint32`` ``numpy.ndarray``; ``ValueError`` unless its
    shape is ``x.shape``.
    """
    if rounding != "stochastic":
        if random_bits is not None:
            raise ValueError(
                f"Got random_bits with rounding={rounding!r}, but random_bits is only for rounding='stochastic'"
            )
        return
    if random_bits is None:
        raise ValueError(
            "Got rounding='stochastic' and no random_bits, but stochastic rounding needs random_bits: "
            "a uint8 or uint32 array of x's shape"
        )
    check_array("random_bits", random_bits, _RANDOM_BITS_DTYPES)
    if random_bits.shape != x.shape:
        raise ValueError(
            f"Got random_bits.shape={random_bits.shape} and x.shape={x.shape}, but random_bits must have x's shape"
        )


def _overflow_code(fmt: FloatFormat) -> int:
    """Positive code of non-saturating overflow: Inf where the format has it, else its NaN."""
    if fmt.has_inf:
        return ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits
    return fmt.sign_mask if fmt.nan == "fnuz" else fmt.magnitude_mask


def _encode_saturating(
    x: np.ndarray, fmt: FloatFormat, rounding: str, nan: str, random_bits: np.ndarray | None
) -> np.ndarray:
    """Codes of a format without Inf and NaN codes (fp6, fp4): overflow saturates, NaN per ``nan``."""
    check_choice("nan", nan, NAN_POLICIES)
    top, negative_top = fmt.max_finite_code, fmt.max_finite_code | fmt.sign_mask
    nan_codes = {"max": (top, top), "signed_max": (top, negative_top), "negative_zero": (fmt.sign_mask, 0)}[nan]
    return _encode(x, fmt, rounding=rounding, random_bits=random_bits, overflow_code=top, nan_codes=nan_codes)


def _encode(
    x: np.ndarray,
    fmt: FloatFormat,
    *,
    rounding: str,
    random_bits: np.ndarray | None,
    overflow_code: int,
    nan_codes: tuple[int, int],
) -> np.ndarray:
    """Codes of ``x`` in ``fmt`` (uint8, the shape of ``x``).

    ``overflow_code`` is the unsigned code of overflow and ±Inf (the sign is added to it): the
    largest finite code or the one right after it (Inf or NaN), so a minimum applies it;
    ``nan_codes`` are the whole codes of a positive and a negative NaN.
    """
    assert fmt.max_finite_code <= overflow_code <= fmt.max_finite_code + 1
    check_choice("rounding", rounding, ROUNDINGS)
    _check_random_bits(random_bits, rounding, x)
    bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.int32)
    randoms = None if random_bits is None else np.ascontiguousarray(random_bits).reshape(-1)
    out = np.empty(bits.shape, dtype=np.uint8)
    for start in range(0, bits.size, _CHUNK):
        chunk = bits[start : start + _CHUNK]
        magnitude = chunk & _F32_MAGNITUDE
        code = _round_magnitude(magnitude, fmt, rounding, None if randoms is None else randoms[start : start + _CHUNK])
        np.minimum(code, overflow_code, out=code)  # arithmetic, not a branch per element
        # An arithmetic shift brings float32 bit 31 (the sign) down to the format's sign bit.
        sign = (chunk >> (_FLOAT32.bits - fmt.bits)) & fmt.sign_mask
        if not fmt.has_negative_zero:
            sign *= code != 0
        code |= sign
        nan = magnitude > _F32_INF
        if nan.any():
            code[nan] = np.where(chunk[nan] < 0, nan_codes[1], nan_codes[0])
        out[start : start + _CHUNK] = code
    return out.reshape(x.shape)


def _fields(magnitude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exponent field (1 for subnormals) and 24-bit significand of float32 magnitudes.

    ``|x| = significand * 2**(exponent - 150)`` for every finite input, subnormals included.
    """
    exponent = np.maximum(magnitude >> _FLOAT32.mantissa_bits, 1)
    return exponent, magnitude - ((exponent - 1) << _FLOAT32.mantissa_bits)


def _round_magnitude(
    magnitude: np.ndarray, fmt: FloatFormat, rounding: str, random_bits: np.ndarray | None
) -> np.ndarray:
    """Round float32 magnitudes (int32 bit patterns, sign cleared) to unsigned codes of ``fmt``.

    The result is the code of the rounded magnitude, counting on past the largest finite code
    when the value overflows (callers clamp it to their overflow code).  ±Inf and NaN
    inputs give codes above every finite one.  Valid for signed targets with fewer mantissa
    bits than float32 and at most 8 exponent bits (fp8, fp6, fp4, bf16).

    With ``e`` the float32 exponent field (fp32 subnormals: ``e = 1`` and no implicit bit),
    ``s`` the 24-bit significand and ``t = e - 127 + bias`` the target's exponent field:

    - normal target (``t >= 1``): ``code = (t - 1) << M  +  round(s >> (23 - M))``; the implicit
      bit of ``s`` adds the remaining ``1 << M``, and a rounding carry moves into the
      exponent field, as it must;
    - subnormal target (``t <= 0``): ``code = round(s >> (23 - M + 1 - t))`` counts multiples
      of the smallest subnormal; rounding up to ``1 << M`` gives the smallest normal code.
    """
    exponent, significand = _fields(magnitude)
    target_exponent = exponent - (_FLOAT32.bias - fmt.bias)
    shift = _FLOAT32.mantissa_bits - fmt.mantissa_bits + np.maximum(1 - target_exponent, 0)
    rounded = _round_shifted(significand, shift, rounding, random_bits)
    return rounded + (np.maximum(target_exponent - 1, 0) << fmt.mantissa_bits)


def _round_shifted(
    significand: np.ndarray, shift: np.ndarray, rounding: str, random_bits: np.ndarray | None
) -> np.ndarray:
    """``significand / 2**shift`` rounded to an integer (``significand < 2**24``, ``shift >= 0``).

    ``rne`` adds ``2**(shift-1) - 1`` plus the lowest kept bit before shifting, so an exact half
    rounds to the even neighbour; ``rtz`` shifts; ``stochastic`` rounds up iff
    ``((d << k) >> shift) + r >= 2**k`` for the dropped bits ``d`` and ``k``-bit randoms ``r``.
    """
    if rounding == "rne":
        shift = np.minimum(shift, _MAX_SHIFT)
        return (significand + ((1 << shift) >> 1) - 1 + ((significand >> shift) & 1)) >> shift
    if rounding == "rtz":
        return significand >> np.minimum(shift, _MAX_SHIFT)
    assert random_bits is not None  # checked by _check_random_bits
    width = random_bits.dtype.itemsize * 8
    wide, shift = significand.astype(np.int64), np.minimum(shift, _MAX_STOCHASTIC_SHIFT)
    kept = wide >> shift
    dropped = wide - (kept << shift)
    return kept + (((dropped << width) >> shift) + random_bits >= (1 << width))
