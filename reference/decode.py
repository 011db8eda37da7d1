"""Decoding of narrow float codes to float32 values (contract family ``decode``)."""

from __future__ import annotations

from functools import cache

import numpy as np

from reference.cast import fp8_format
from reference.formats import FloatFormat

__all__ = ["fp8"]

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
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0, §4 (E4M3 and E5M2 encodings); the
    table is :attr:`reference.formats.FloatFormat.decode_table`, derived from the bit fields.

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element: ``S.EEEE.MMM`` (e4m3fn, bias 7) or
    ``S.EEEEE.MM`` (e5m2, bias 15).  ``values`` is float32 with the shape of ``codes``.

    Edge cases
    ----------
    - 0x00 -> +0.0 and 0x80 -> -0.0.
    - NaN codes (e4m3fn 0x7F/0xFF; e5m2 0x7D-0x7F/0xFD-0xFF) -> the float32 quiet NaN with the
      code's sign: bits 0x7FC00000 or 0xFFC00000 (no payload is carried).
    - e5m2 0x7C/0xFC -> ±Inf; e4m3fn has no infinity.

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` ``numpy.ndarray``, and ``ValueError``
    for an unknown ``format``.
    """
    if not isinstance(codes, np.ndarray):
        raise TypeError(f"Got codes of type {type(codes).__name__}, but codes must be a numpy.ndarray of dtype uint8")
    if codes.dtype != np.uint8:
        raise TypeError(f"Got codes.dtype={codes.dtype}, but codes must be uint8")
    return {"values": _fp8_table(fp8_format(format))[codes]}


@cache
def _fp8_table(fmt: FloatFormat) -> np.ndarray:
    """The 256 float32 values of ``fmt`` (read-only), NaNs as signed canonical quiet NaNs."""
    bits = fmt.decode_table.astype(np.float32).view(np.uint32)
    codes = np.arange(1 << fmt.bits, dtype=np.uint32)
    signs = np.where(codes & fmt.sign_mask, _F32_SIGN_BIT, 0).astype(np.uint32)
    nan = fmt.is_nan(codes)
    bits[nan] = _F32_QUIET_NAN_BITS | signs[nan]
    table = bits.view(np.float32)
    table.flags.writeable = False
    return table
