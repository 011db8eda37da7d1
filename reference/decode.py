"""Decoding of narrow float codes to float32 values (contract family ``decode``).

Every decoder is a table lookup: :attr:`reference.formats.FloatFormat.decode_table` holds the
value of every code, derived from the format's bit fields, and every value of these formats is
exact in float32.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from reference._checks import check_array, check_choice, check_codes
from reference.cast import FP4_FORMATS, FP6_FORMATS, FP8_FORMATS
from reference.formats import FloatFormat, get_format

__all__ = ["e8m0", "fp4", "fp6", "fp8"]

_F32_QUIET_NAN_BITS = 0x7FC0_0000
_F32_SIGN_BIT = 0x8000_0000


def fp8(codes: np.ndarray, *, format: str) -> dict[str, np.ndarray]:
    """Exact float32 value of every FP8 code.

    Contract
    --------
    ``decode.fp8``: ``values = table[codes]``, elementwise, where ``table`` holds the value of
    each of the 256 codes of ``format``: ``(-1)**S * 2**(E - bias) * 1.M`` for normal codes and
    ``(-1)**S * 2**(1 - bias) * 0.M`` for subnormal ones.  Every FP8 value is exact in float32.

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0, §4 (E4M3 and E5M2 encodings);
    ml_dtypes ``float8_e4m3fnuz`` / ``float8_e5m2fnuz`` for the fnuz formats.  The table is
    :attr:`reference.formats.FloatFormat.decode_table`, derived from the bit fields.

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element: ``S.EEEE.MMM`` (e4m3fn bias 7, e4m3fnuz bias 8)
    or ``S.EEEEE.MM`` (e5m2 bias 15, e5m2fnuz bias 16).  ``values`` is float32 with the shape of
    ``codes``.

    Edge cases
    ----------
    - 0x00 -> +0.0 and 0x80 -> -0.0 (e4m3fn, e5m2); in the fnuz formats 0x80 is their NaN.
    - NaN codes (e4m3fn 0x7F/0xFF; e5m2 0x7D-0x7F/0xFD-0xFF; fnuz 0x80) -> the float32 quiet NaN
      with the code's top bit as its sign: bits 0x7FC00000 or 0xFFC00000 (no payload is carried).
    - e5m2 0x7C/0xFC -> ±Inf; the other formats have no infinity.

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` ``numpy.ndarray``, and ``ValueError``
    for an unknown ``format``.
    """
    check_array("codes", codes, (np.uint8,))
    check_choice("format", format, FP8_FORMATS)
    return {"values": _table(get_format(format))[codes]}


def fp6(codes: np.ndarray, *, format: str) -> dict[str, np.ndarray]:
    """Exact float32 value of every FP6 code (MX E2M3 or E3M2).

    Contract
    --------
    ``decode.fp6``: ``values = table[codes]`` over the 64 codes of ``format``, as :func:`fp8`;
    every code is a finite number.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (E2M3 bias 1, max 7.5; E3M2 bias 3, max 28).

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element in the low 6 bits (``S.EE.MMM`` or ``S.EEE.MM``).

    Edge cases
    ----------
    - 0x20 -> -0.0; 0x1F -> 7.5 (e2m3) or 28.0 (e3m2); 0x3F their negatives.
    - A byte above 63 is not a code: ``ValueError`` naming it (one library reads its top bits
      as a sign, another masks them; the contract refuses them).

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` ``numpy.ndarray``, and ``ValueError``
    for an unknown ``format`` or a byte above 63.
    """
    return {"values": _decode_small(codes, format, FP6_FORMATS)}


def fp4(codes: np.ndarray, *, format: str) -> dict[str, np.ndarray]:
    """Exact float32 value of every FP4 E2M1 code.

    Contract
    --------
    ``decode.fp4``: ``values = table[codes]`` over the 16 codes of ``float4_e2m1fn``:
    0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0..7 and their negatives for 8..15.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (E2M1 bias 1, no Inf/NaN).

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element in the low 4 bits (``S.EE.M``); two codes per
    byte are unpacked by ``unpack.nibbles`` first.

    Edge cases
    ----------
    - 0x8 -> -0.0; 0x7 -> 6.0, 0xF -> -6.0.
    - A byte above 15 is not a code: ``ValueError`` naming it.

    Raises as :func:`fp6`, for bytes above 15.
    """
    return {"values": _decode_small(codes, format, FP4_FORMATS)}


def e8m0(codes: np.ndarray) -> dict[str, np.ndarray]:
    """Float32 value of every E8M0 scale byte: ``2**(b - 127)``.

    Contract
    --------
    ``decode.e8m0``: ``values = 2**(codes - 127)`` for bytes 0..254, NaN for 0xFF.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.4; torchao ``mx_formats`` decode (0 -> ``2**-127``).

    Encoding
    --------
    ``codes`` is ``uint8`` (all 256 bytes are valid); ``values`` is float32 with its shape.

    Edge cases
    ----------
    - 0x00 -> ``2**-127``, the float32 subnormal 0x00400000 (E8M0 has no zero); 0x7F -> 1.0;
      0xFE -> ``2**127``.
    - 0xFF -> the float32 quiet NaN 0x7FC00000.

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` ``numpy.ndarray``.
    """
    check_array("codes", codes, (np.uint8,))
    return {"values": _table(get_format("float8_e8m0fnu"))[codes]}


def _decode_small(codes: np.ndarray, format: str, formats: tuple[str, ...]) -> np.ndarray:
    check_array("codes", codes, (np.uint8,))
    check_choice("format", format, formats)
    fmt = get_format(format)
    check_codes("codes", codes, fmt.bits)
    return _table(fmt)[codes]


@cache
def _table(fmt: FloatFormat) -> np.ndarray:
    """The float32 value of every code of ``fmt`` (read-only), NaNs as canonical quiet NaNs.

    A NaN takes the sign of the code's top bit in signed formats, and is positive in unsigned ones.
    """
    bits = fmt.decode_table.astype(np.float32).view(np.uint32)
    codes = np.arange(1 << fmt.bits, dtype=np.uint32)
    signs = np.where(codes & fmt.sign_mask, _F32_SIGN_BIT, 0).astype(np.uint32)
    nan = fmt.is_nan(codes)
    bits[nan] = _F32_QUIET_NAN_BITS | signs[nan]
    table = bits.view(np.float32)
    table.flags.writeable = False
    return table
