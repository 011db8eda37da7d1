"""Casts from float32/float16 to narrow float formats (contract family ``cast``).

Every result is computed with integer arithmetic on the float32 bit pattern of the input and
the bit-field widths of the target from :mod:`reference.formats`; no float operation ever
rounds.  The rounding core, :func:`_round_magnitude`, only needs ``exponent_bits``,
``mantissa_bits`` and ``bias``, so other signed narrow formats can reuse it; the NaN and
overflow codes are what is specific to each format's encoding.
"""

from __future__ import annotations

import numpy as np

from reference.formats import FloatFormat, get_format

__all__ = ["FP8_FORMATS", "OVERFLOW_POLICIES", "fp8"]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
"""Targets of ``cast.fp8`` (and of ``decode.fp8``)."""

OVERFLOW_POLICIES: tuple[str, ...] = ("saturate", "nonsaturating")
"""What a finite value that rounds beyond the largest finite code, or an infinity, becomes."""

_FLOAT32 = get_format("float32")
_MAX_SHIFT = 30
"""Right shifts are clipped here: a significand below 2**24 shifted by >= 25 rounds to 0 anyway."""
_CHUNK = 1 << 16
"""Elements per pass: the temporaries of one chunk stay in cache, which triples throughput."""


def fp8(x: np.ndarray, *, format: str, overflow: str) -> dict[str, np.ndarray]:
    """Round float32/float16 values to FP8 codes, round-to-nearest-even.

    Contract
    --------
    ``cast.fp8``: ``codes = RNE_format(x)``, elementwise, where ``RNE_format`` rounds the exact
    value of ``x`` to the nearest value representable in ``format`` (ties to the code with an
    even mantissa) across normal and subnormal targets, and overflow is decided **after**
    rounding: a value overflows when it rounds to a magnitude above the largest finite one.
    ``overflow`` chooses what overflow and ±Inf give:

    - ``"saturate"``: ±max finite;
    - ``"nonsaturating"``: ±Inf where the format has it (e5m2), else NaN with the sign (e4m3fn).

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0, §5 (conversion, saturation
    modes).  ``"nonsaturating"`` is ml_dtypes' ``astype`` and torch <= 2.12 eager
    ``Tensor.to(float8_e4m3fn)``; ``"saturate"`` is torch >= 2.13 eager e4m3fn
    (pytorch/pytorch#177870, #178817) and torch.compile casts.  torch eager e5m2 is
    ``"nonsaturating"`` in every version.

    Encoding
    --------
    One code per ``uint8``: ``S.EEEE.MMM`` (e4m3fn, bias 7) or ``S.EEEEE.MM`` (e5m2, bias 15),
    all fields from :func:`reference.formats.get_format`.  float16 inputs are widened to
    float32 (exact); bfloat16 values arrive as float32.

    Edge cases
    ----------
    - ±0 keep their sign: 0.0 -> 0x00, -0.0 -> 0x80; values below half the smallest subnormal
      give a zero of their sign, exactly half of it is a tie that goes to (even) zero.
    - NaN (any payload) -> the NaN with all mantissa bits set and the input's sign: 0x7F/0xFF
      for both formats (as torch and TransformerEngine; ml_dtypes gives 0x7E/0xFE for e5m2).
    - e4m3fn: 464.0 is the midpoint of 448 and (unrepresentable) 480 and rounds to 448 (0x7E);
      anything larger overflows.  e5m2: 61440.0 is the midpoint of 57344 and Inf and overflows.
    - Overflow and ±Inf: ``saturate`` -> 0x7E/0xFE (e4m3fn), 0x7B/0xFB (e5m2);
      ``nonsaturating`` -> 0x7F/0xFF (e4m3fn, NaN), 0x7C/0xFC (e5m2, Inf).
    - float32 subnormal inputs are rounded like any other value (all give ±0 here).

    Raises ``TypeError`` unless ``x`` is a float32 or float16 ``numpy.ndarray`` (float64 is
    refused: narrowing it to fp8 through float32 would round twice), and ``ValueError`` for
    an unknown ``format`` or ``overflow``.
    """
    _check_float_input(x)
    fmt = fp8_format(format)
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"Got overflow={overflow!r}, but overflow must be one of {list(OVERFLOW_POLICIES)}")
    return {"codes": _round_float32(x, fmt, overflow_code=_overflow_code(fmt, overflow), nan_code=_nan_code(fmt))}


def fp8_format(name: str) -> FloatFormat:
    """The traits of an FP8 target, with a ``ValueError`` naming ``format`` otherwise."""
    if name not in FP8_FORMATS:
        raise ValueError(f"Got format={name!r}, but format must be one of {list(FP8_FORMATS)}")
    return get_format(name)


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


def _overflow_code(fmt: FloatFormat, overflow: str) -> int:
    """Positive code that finite overflow and ±Inf give under ``overflow``."""
    if overflow == "saturate":
        return fmt.max_finite_code
    return _inf_code(fmt) if fmt.has_inf else _nan_code(fmt)


def _nan_code(fmt: FloatFormat) -> int:
    """Positive NaN code with every exponent and mantissa bit set (IEEE-like and "fn" formats)."""
    return fmt.magnitude_mask


def _inf_code(fmt: FloatFormat) -> int:
    """Positive infinity: all-ones exponent, zero mantissa."""
    return ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits


def _round_float32(x: np.ndarray, fmt: FloatFormat, *, overflow_code: int, nan_code: int) -> np.ndarray:
    """Codes of ``x`` in ``fmt`` (uint8), with the given positive overflow and NaN codes."""
    bits = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.int32)
    out = np.empty(bits.shape, dtype=np.uint8)
    for start in range(0, bits.size, _CHUNK):
        chunk = bits[start : start + _CHUNK]
        magnitude = chunk & _FLOAT32.magnitude_mask
        code = _round_magnitude(magnitude, fmt)
        np.copyto(code, overflow_code, where=code > fmt.max_finite_code)
        np.copyto(code, nan_code, where=magnitude > _inf_code(_FLOAT32))
        # An arithmetic shift brings float32 bit 31 (the sign) down to the format's sign bit.
        code |= (chunk >> (_FLOAT32.bits - fmt.bits)) & fmt.sign_mask
        out[start : start + _CHUNK] = code
    return out.reshape(x.shape)


def _round_magnitude(magnitude: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Round float32 magnitudes (int32 bit patterns, sign cleared) to unsigned codes of ``fmt``, RNE.

    The result is the code of the nearest representable magnitude, counting on past the
    largest finite code when the value overflows (callers compare it with the max finite
    code).  ±Inf and NaN inputs give codes above every finite one.  Valid for signed targets
    with fewer mantissa bits than float32 and at most 8 exponent bits (fp8, fp6, fp4, bf16).

    With ``e`` the float32 exponent field (fp32 subnormals: ``e = 1`` and no implicit bit),
    ``s`` the 24-bit significand and ``t = e - 127 + bias`` the target's exponent field:

    - normal target (``t >= 1``): ``code = (t - 1) << M  +  RNE(s >> (23 - M))``; the implicit
      bit of ``s`` adds the remaining ``1 << M``, and a rounding carry moves into the
      exponent field, as it must;
    - subnormal target (``t <= 0``): ``code = RNE(s >> (23 - M + 1 - t))`` counts multiples
      of the smallest subnormal; rounding up to ``1 << M`` gives the smallest normal code.

    ``RNE(s >> k)`` adds ``2**(k-1) - 1`` plus the lowest kept bit before shifting, so an exact
    half rounds to the even neighbour.
    """
    mantissa_bits = fmt.mantissa_bits
    exponent = np.maximum(magnitude >> _FLOAT32.mantissa_bits, 1)
    significand = magnitude - ((exponent - 1) << _FLOAT32.mantissa_bits)
    target_exponent = exponent - (_FLOAT32.bias - fmt.bias)
    shift = np.minimum(_FLOAT32.mantissa_bits - mantissa_bits + np.maximum(1 - target_exponent, 0), _MAX_SHIFT)
    rounded = (significand + ((1 << shift) >> 1) - 1 + ((significand >> shift) & 1)) >> shift
    return rounded + (np.maximum(target_exponent - 1, 0) << mantissa_bits)
