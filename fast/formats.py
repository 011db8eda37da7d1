"""fast's one table of narrow float element formats: bit fields, special codes and derived limits.

Every format is signed (sign in the top bit) and described by its exponent and mantissa widths, its bias and which
codes are special; the largest finite code and value, the overflow and NaN codes follow from those (no limit is typed
in).  ``fast/`` keeps its own table (it never imports ``reference/``, whose ``reference/formats.py`` derives the same
traits independently); ``tests/meta/test_domains.py`` holds this table against the spec values and the traits.

Sources: OCP OFP8 Formats for Deep Learning v1.0 (E4M3FN, E5M2), OCP Microscaling Formats (MX) v1.0 §5.3 (FP6,
FP4: every code finite), jax-ml/ml_dtypes ``float8_e4m3fnuz`` / ``float8_e5m2fnuz`` (every magnitude code finite,
the single NaN ``0x80``, no negative zero).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["FORMATS", "SPECIALS", "FloatFormat"]

SPECIALS: tuple[str, ...] = ("ieee", "fn", "fnuz", "finite")
"""Which codes are special: ``ieee`` (top exponent: Inf if the mantissa is 0, else NaN), ``fn`` (only the all-ones
magnitude is NaN), ``fnuz`` (the negative-zero pattern is the only NaN), ``finite`` (every code is a number)."""


class FloatFormat(NamedTuple):
    """A signed narrow float format; every limit and special code is derived from the four fields."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: str

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def sign_mask(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def max_code(self) -> int:
        """Largest finite magnitude code: below the top exponent (``ieee``), below the all-ones NaN (``fn``), or all
        ones (``fnuz``, ``finite``)."""
        ones = self.sign_mask - 1
        if self.specials == "ieee":
            return ones - (1 << self.mantissa_bits)
        return ones - 1 if self.specials == "fn" else ones

    @property
    def max_value(self) -> float:
        """The value of :attr:`max_code`: ``2**(e - bias) * (1 + m / 2**mantissa_bits)``."""
        exponent, mantissa = self.max_code >> self.mantissa_bits, self.max_code & ((1 << self.mantissa_bits) - 1)
        return 2.0 ** (exponent - self.bias) * (1 + mantissa / (1 << self.mantissa_bits))

    @property
    def emax(self) -> int:
        """``floor(log2(max_value))``: the exponent of the largest binade."""
        return (self.max_code >> self.mantissa_bits) - self.bias

    @property
    def reciprocal_of_max(self) -> float:
        """``fl32(1 / max_value)``: the float32 division, correctly rounded (a Python float holding it)."""
        return float(np.float32(1.0) / np.float32(self.max_value))

    @property
    def nonsaturating_code(self) -> int:
        """Magnitude code of non-saturating overflow: Inf (``ieee``), the NaN (``fn``; ``fnuz``: ``0x80``, which any
        sign leaves alone), or the largest finite code where there is neither (``finite``: always saturating)."""
        if self.specials == "ieee":
            return ((1 << self.exponent_bits) - 1) << self.mantissa_bits
        if self.specials == "fn":
            return self.sign_mask - 1
        return self.sign_mask if self.specials == "fnuz" else self.max_code

    @property
    def nan_codes(self) -> tuple[int, int]:
        """Codes of a positive and a negative NaN (``finite`` formats have none: their largest code, for callers
        that replace NaN per a policy)."""
        if self.specials in ("ieee", "fn"):
            ones = self.sign_mask - 1
            return ones, ones | self.sign_mask
        if self.specials == "fnuz":
            return self.sign_mask, self.sign_mask
        return self.max_code, self.max_code

    @property
    def signed_zero(self) -> bool:
        """Whether ``-0`` has a code (not in ``fnuz``, where that pattern is the NaN)."""
        return self.specials != "fnuz"


FORMATS: dict[str, FloatFormat] = {
    "float8_e4m3fn": FloatFormat(4, 3, 7, "fn"),
    "float8_e5m2": FloatFormat(5, 2, 15, "ieee"),
    "float8_e4m3fnuz": FloatFormat(4, 3, 8, "fnuz"),
    "float8_e5m2fnuz": FloatFormat(5, 2, 16, "fnuz"),
    "float6_e2m3fn": FloatFormat(2, 3, 1, "finite"),
    "float6_e3m2fn": FloatFormat(3, 2, 3, "finite"),
    "float4_e2m1fn": FloatFormat(2, 1, 1, "finite"),
}
"""Every narrow float element format of ``fast/`` by its contract name."""
