"""The traits table: every scalar format qconform knows, declared once.

Each format is a row of bit-field facts (exponent and mantissa widths, bias, what the
all-ones exponent means), read from ``specs/formats.json``: the one declaration, which the
engine reads too (JSON because this package may use only NumPy and the standard library).
Everything else -- the largest finite value, the smallest subnormal, the value of every
code -- is derived from those facts, never typed in.

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

import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = ["FORMATS", "FloatFormat", "NanEncoding", "get_format", "load_formats"]

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


FORMATS_FILE = "formats.json"
"""The traits table's data file: ``specs/formats.json`` in the source tree, ``reference/formats.json`` in the
wheel (``pyproject.toml`` force-includes it).  The engine's ``conformance/formats.py`` reads the same file."""

_FIELDS = {
    "name": str,
    "exponent_bits": int,
    "mantissa_bits": int,
    "bias": int,
    "nan": str,
    "signed": bool,
    "has_subnormals": bool,
}
_NAN_ENCODINGS = ("ieee", "fn", "fnuz", "all_ones", "none")


def _formats_path() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / FORMATS_FILE, here.parent / "specs" / FORMATS_FILE):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no {FORMATS_FILE} next to the reference package or in specs/")


def _row(entry: dict[str, Any], where: str) -> FloatFormat:
    """One ``FloatFormat`` from one entry of the data file, every field present and of its type."""
    missing = [k for k in _FIELDS if k not in entry]
    if missing:
        raise ValueError(f"Got {where} without {missing}, but every format declares {list(_FIELDS)}")
    for key, kind in _FIELDS.items():
        value = entry[key]
        if type(value) is not kind:  # bool is an int subclass: compare the exact type
            raise ValueError(f"Got {where}.{key}={value!r}, but {key} must be a {kind.__name__}")
    if entry["nan"] not in _NAN_ENCODINGS:
        raise ValueError(f"Got {where}.nan={entry['nan']!r}, but nan must be one of {_NAN_ENCODINGS}")
    return FloatFormat(**{k: entry[k] for k in _FIELDS})


def load_formats(path: Path | None = None) -> dict[str, FloatFormat]:
    """Every format of the data file (``specs/formats.json`` unless ``path``), by name, in file order."""
    path = path or _formats_path()
    entries = json.loads(path.read_text())["formats"]
    table: dict[str, FloatFormat] = {}
    for i, entry in enumerate(entries):
        fmt = _row(entry, f"{path.name}: formats[{i}]")
        if fmt.name in table:
            raise ValueError(f"Got format {fmt.name!r} twice in {path.name}, but each format is declared once")
        table[fmt.name] = fmt
    return table


FORMATS: dict[str, FloatFormat] = load_formats()


def get_format(name: str) -> FloatFormat:
    """Look a format up by its ml_dtypes-style name, with a clear error for unknown names."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"Got format={name!r}, but the known formats are {sorted(FORMATS)}") from None
