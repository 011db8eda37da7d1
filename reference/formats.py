"""The traits table: every scalar format qconform knows, declared once.

Each format is a row of bit-field facts (exponent and mantissa widths, bias, what the
all-ones exponent means).  Everything else -- the largest finite value, the smallest
subnormal, the value of every code -- is derived from those facts, never typed in.

Sources
-------
- OCP 8-bit Floating Point Specification (OFP8) rev 1.0: E4M3 ("fn": no infinity, NaN is
  S.1111.111) and E5M2 (IEEE-like).
- OCP Microscaling Formats (MX) v1.0: E2M3, E3M2, E2M1 (no Inf/NaN) and E8M0 (unsigned,
  0xFF is NaN, no zero).
- The "fnuz" formats (one NaN at 0x80, no negative zero) follow ml_dtypes' definitions
  (``ml_dtypes/include/float8.h``), where they come from Graphcore's proposal.
- IEEE 754 binary16 and binary32; bfloat16 is binary32 with 16 mantissa bits dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

__all__ = ["FORMATS", "FloatFormat", "NanEncoding", "get_format"]

NanEncoding = Literal["ieee", "fn", "fnuz", "all_ones", "none"]
"""What the codes with an all-ones exponent (or the code 0x80) mean.

- ``ieee``: all-ones exponent with mantissa 0 is +-Inf, any other mantissa is NaN.
- ``fn`` (finite): only the all-ones exponent *and* all-ones mantissa is NaN; no Inf.
- ``fnuz`` (finite, unsigned zero): the single code sign=1, rest 0 (0x80) is NaN; no Inf,
  no negative zero.
- ``all_ones``: an unsigned format whose all-ones code is NaN (E8M0).
- ``none``: every code is a finite number (the MX FP6/FP4 element formats).
"""


@dataclass(frozen=True)
class FloatFormat:
    """Bit-field description of one binary floating-point format.

    ``signed`` formats spend their top bit on the sign; ``has_subnormals`` is False only
    for E8M0, whose exponent field 0 means 2**-bias rather than a subnormal range.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    nan: NanEncoding
    signed: bool = True
    has_subnormals: bool = True

    # -- bit fields -------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width of one code in bits."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def sign_mask(self) -> int:
        return (1 << (self.bits - 1)) if self.signed else 0

    @property
    def magnitude_mask(self) -> int:
        """Mask of the exponent and mantissa fields together."""
        return (1 << (self.exponent_bits + self.mantissa_bits)) - 1

    @property
    def has_inf(self) -> bool:
        return self.nan == "ieee"

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.nan != "fnuz"

    # -- decoding ---------------------------------------------------------------------
    def decode(self, code: int) -> float:
        """Exact value of ``code`` as a Python float (NaN for NaN codes)."""
        if not 0 <= code < (1 << self.bits):
            raise ValueError(f"Got code={code}, but {self.name} codes are 0..{(1 << self.bits) - 1}")
        if self._is_nan_code(code):
            return math.nan
        negative = bool(code & self.sign_mask)
        magnitude = code & self.magnitude_mask
        exponent_field = magnitude >> self.mantissa_bits
        mantissa = magnitude & ((1 << self.mantissa_bits) - 1)
        if self.nan == "ieee" and exponent_field == (1 << self.exponent_bits) - 1:
            value = math.inf
        elif exponent_field == 0 and self.has_subnormals:
            value = math.ldexp(mantissa, 1 - self.bias - self.mantissa_bits)
        else:
            significand = (1 << self.mantissa_bits) | mantissa
            value = math.ldexp(significand, exponent_field - self.bias - self.mantissa_bits)
        return -value if negative else value

    def _is_nan_code(self, code: int) -> bool:
        all_ones_exponent = (code & self.magnitude_mask) >> self.mantissa_bits == (1 << self.exponent_bits) - 1
        mantissa = code & ((1 << self.mantissa_bits) - 1)
        if self.nan == "ieee":
            return all_ones_exponent and mantissa != 0
        if self.nan == "fn":
            return (code & self.magnitude_mask) == self.magnitude_mask
        if self.nan == "fnuz":
            return code == self.sign_mask
        if self.nan == "all_ones":
            return code == (1 << self.bits) - 1
        return False

    @cached_property
    def decode_table(self) -> np.ndarray:
        """float64 value of every code, indexed by code (exact: every value fits).

        Only for formats of at most 16 bits; float32 limits are derived from its fields.
        """
        if self.bits > 16:
            raise ValueError(f"Got format={self.name!r}, but decode tables exist only for formats of <= 16 bits")
        return np.array([self.decode(c) for c in range(1 << self.bits)], dtype=np.float64)

    def is_nan(self, codes: np.ndarray) -> np.ndarray:
        """Boolean mask of the NaN codes in an integer array of codes."""
        return np.isnan(self.decode_table[np.asarray(codes, dtype=np.int64)])

    # -- derived limits -----------------------------------------------------------------
    @cached_property
    def finite_magnitudes(self) -> np.ndarray:
        """Sorted distinct non-negative finite values (float64), zero first if present."""
        table = self.decode_table
        finite = table[np.isfinite(table)]
        return np.unique(np.abs(finite))

    @cached_property
    def max_finite_code(self) -> int:
        """The positive code of the largest finite value, from the NaN/Inf encoding rule."""
        top_exponent, full_mantissa = (1 << self.exponent_bits) - 1, (1 << self.mantissa_bits) - 1
        if self.nan == "ieee":
            return ((top_exponent - 1) << self.mantissa_bits) | full_mantissa
        if self.nan == "fn":
            return (top_exponent << self.mantissa_bits) | (full_mantissa - 1)
        if self.nan == "all_ones":
            return (1 << self.bits) - 2
        return (top_exponent << self.mantissa_bits) | full_mantissa

    @cached_property
    def max_finite(self) -> float:
        return self.decode(self.max_finite_code)

    @cached_property
    def min_normal(self) -> float:
        return math.ldexp(1.0, 1 - self.bias) if self.has_subnormals else math.ldexp(1.0, -self.bias)

    @cached_property
    def min_subnormal(self) -> float:
        """Smallest positive value (the min normal where there are no subnormals)."""
        if not self.has_subnormals or self.mantissa_bits == 0:
            return self.min_normal
        return math.ldexp(1.0, 1 - self.bias - self.mantissa_bits)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("float8_e4m3fn", 4, 3, 7, "fn"),
        FloatFormat("float8_e5m2", 5, 2, 15, "ieee"),
        FloatFormat("float8_e4m3fnuz", 4, 3, 8, "fnuz"),
        FloatFormat("float8_e5m2fnuz", 5, 2, 16, "fnuz"),
        FloatFormat("float6_e2m3fn", 2, 3, 1, "none"),
        FloatFormat("float6_e3m2fn", 3, 2, 3, "none"),
        FloatFormat("float4_e2m1fn", 2, 1, 1, "none"),
        FloatFormat("float8_e8m0fnu", 8, 0, 127, "all_ones", signed=False, has_subnormals=False),
        FloatFormat("float16", 5, 10, 15, "ieee"),
        FloatFormat("bfloat16", 8, 7, 127, "ieee"),
        FloatFormat("float32", 8, 23, 127, "ieee"),
    )
}


def get_format(name: str) -> FloatFormat:
    """Look a format up by its ml_dtypes-style name, with a clear error for unknown names."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"Got format={name!r}, but the known formats are {sorted(FORMATS)}") from None
