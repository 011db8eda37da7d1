"""The engine's view of the scalar formats, read from ``specs/formats.json``.

The data file holds bit-field facts only (exponent and mantissa widths, bias, NaN/Inf encoding,
signedness, subnormals); ``reference/formats.py`` reads the same file.  The engine derives here
what it needs of a format -- the value of every code (to print mismatches and compare values),
the NaN codes (NaN masks), the finite magnitudes and limits (boundary pools) -- without importing
the oracle: a bug in ``reference/`` must not also shape the cases and the comparison that judge it.
The derivation is vectorised over all codes, unlike the oracle's per-code ``decode``; a meta test
(``tests/meta/test_formats_agree.py``) holds both to the same bits.

NaN encodings (``nan``):

- ``ieee``: all-ones exponent with mantissa 0 is +-Inf, any other mantissa is NaN;
- ``fn``: only the all-ones exponent *and* mantissa is NaN; no Inf;
- ``fnuz``: the single code sign=1, rest 0 (0x80) is NaN; no Inf, no negative zero;
- ``all_ones``: an unsigned format whose all-ones code is NaN (E8M0);
- ``none``: every code is finite (the MX FP6/FP4 element formats).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMATS", "FormatTraits", "get_format", "load_formats"]

NAN_ENCODINGS = ("ieee", "fn", "fnuz", "all_ones", "none")
_FIELDS: dict[str, type] = {
    "name": str,
    "exponent_bits": int,
    "mantissa_bits": int,
    "bias": int,
    "nan": str,
    "signed": bool,
    "has_subnormals": bool,
}
MAX_TABLE_BITS = 16
"""Decode tables exist for formats of at most this many bits (float32's limits come from its fields)."""


@dataclass(frozen=True)
class FormatTraits:
    """One format's bit fields, and what the engine derives from them."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    nan: str
    signed: bool
    has_subnormals: bool

    @property
    def bits(self) -> int:
        """Total width of one code in bits."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @cached_property
    def _fields(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(codes, negative, exponent field, mantissa field)`` of every code."""
        if self.bits > MAX_TABLE_BITS:
            raise ValueError(
                f"Got format={self.name!r}, but decode tables exist only for formats of <= {MAX_TABLE_BITS} bits"
            )
        codes = np.arange(1 << self.bits, dtype=np.int64)
        negative = (codes >> (self.bits - 1)).astype(bool) if self.signed else np.zeros(codes.shape, dtype=bool)
        magnitude = codes & ((1 << (self.exponent_bits + self.mantissa_bits)) - 1)
        return codes, negative, magnitude >> self.mantissa_bits, magnitude & ((1 << self.mantissa_bits) - 1)

    @cached_property
    def nan_table(self) -> np.ndarray:
        """Boolean per code: is it a NaN code (read-only)."""
        codes, _, exponent, mantissa = self._fields
        top = (1 << self.exponent_bits) - 1
        if self.nan == "ieee":
            mask = (exponent == top) & (mantissa != 0)
        elif self.nan == "fn":
            mask = (exponent == top) & (mantissa == (1 << self.mantissa_bits) - 1)
        elif self.nan == "fnuz":
            mask = codes == (1 << (self.bits - 1))
        elif self.nan == "all_ones":
            mask = codes == (1 << self.bits) - 1
        else:
            mask = np.zeros(codes.shape, dtype=bool)
        mask.setflags(write=False)
        return mask

    @cached_property
    def decode_table(self) -> np.ndarray:
        """float64 value of every code, indexed by code (exact; NaN codes give NaN; read-only)."""
        _, negative, exponent, mantissa = self._fields
        normal = np.ldexp((1 << self.mantissa_bits) + mantissa, exponent - self.bias - self.mantissa_bits)
        if self.has_subnormals:
            subnormal = np.ldexp(mantissa, np.full(mantissa.shape, 1 - self.bias - self.mantissa_bits))
            normal = np.where(exponent == 0, subnormal, normal)
        values = np.where(negative, -normal, normal).astype(np.float64)
        if self.nan == "ieee":
            infinite = (exponent == (1 << self.exponent_bits) - 1) & (mantissa == 0)
            values[infinite] = np.where(negative[infinite], -np.inf, np.inf)
        values[self.nan_table] = np.nan
        values.setflags(write=False)
        return values

    def is_nan(self, codes: np.ndarray) -> np.ndarray:
        """Boolean mask of the NaN codes in an integer array of codes."""
        return self.nan_table[np.asarray(codes, dtype=np.int64)]

    @cached_property
    def finite_magnitudes(self) -> np.ndarray:
        """Sorted distinct non-negative finite values (float64), zero first if present."""
        table = self.decode_table
        return np.unique(np.abs(table[np.isfinite(table)]))

    @cached_property
    def max_finite(self) -> float:
        """The largest finite value (from the table, or for IEEE formats wider than a table, the fields)."""
        if self.bits <= MAX_TABLE_BITS:
            return float(self.finite_magnitudes[-1])
        if self.nan != "ieee":
            raise ValueError(f"Got format={self.name!r}, but only IEEE formats wider than 16 bits are derived")
        top = (1 << self.exponent_bits) - 2
        return math.ldexp((2 << self.mantissa_bits) - 1, top - self.bias - self.mantissa_bits)

    @cached_property
    def min_normal(self) -> float:
        """The smallest positive normal value (``2**-bias`` where exponent field 0 is not subnormal)."""
        return math.ldexp(1.0, (1 if self.has_subnormals else 0) - self.bias)

    @cached_property
    def min_subnormal(self) -> float:
        """Smallest positive value (the min normal where there are no subnormals)."""
        if not self.has_subnormals or self.mantissa_bits == 0:
            return self.min_normal
        return math.ldexp(1.0, 1 - self.bias - self.mantissa_bits)


def formats_path() -> Path:
    """``specs/formats.json`` shipped in the wheel (``conformance/specs``) or beside the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "specs" / "formats.json", here.parent / "specs" / "formats.json"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("no specs/formats.json next to the conformance package")


def load_formats(path: Path | None = None) -> dict[str, FormatTraits]:
    """Every format of the data file, by name, in file order; a clear error for a malformed entry."""
    path = path or formats_path()
    table: dict[str, FormatTraits] = {}
    for i, entry in enumerate(json.loads(path.read_text())["formats"]):
        where = f"{path.name}: formats[{i}]"
        if missing := [k for k in _FIELDS if k not in entry]:
            raise ValueError(f"Got {where} without {missing}, but every format declares {list(_FIELDS)}")
        for key, kind in _FIELDS.items():
            if type(entry[key]) is not kind:  # bool is an int subclass: compare the exact type
                raise ValueError(f"Got {where}.{key}={entry[key]!r}, but {key} must be a {kind.__name__}")
        if entry["nan"] not in NAN_ENCODINGS:
            raise ValueError(f"Got {where}.nan={entry['nan']!r}, but nan must be one of {NAN_ENCODINGS}")
        fields: dict[str, Any] = {k: entry[k] for k in _FIELDS}
        if fields["name"] in table:
            raise ValueError(f"Got format {fields['name']!r} twice in {path.name}, but each format is declared once")
        table[fields["name"]] = FormatTraits(**fields)
    return table


FORMATS: dict[str, FormatTraits] = load_formats()


def get_format(name: str) -> FormatTraits:
    """Look a format up by name, with a clear error for unknown names."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"Got format={name!r}, but the known formats are {sorted(FORMATS)}") from None
