"""A stand-in for a vendor's runtime: the FP8 cast a vendor library would expose.

It is ml_dtypes' ``astype`` (round to nearest even, never saturating) plus an optional saturation step and
one NaN code per sign (ml_dtypes' E5M2 NaN is 0x7e, the OCP all-ones code is 0x7f: ``docs/findings.md``), the
way a real runtime wraps a hardware conversion.  The qconform plugin in ``__init__.py`` wraps this module; in
a real plugin this is the vendor's own package.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__version__ = "0.1.0"

FORMATS = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def to_fp8(x: np.ndarray, format: str, saturate: bool) -> np.ndarray:
    """FP8 codes (uint8) of float32 ``x`` in ``format``; ``saturate`` clamps overflow and +-Inf to +-max.

    Overflow is judged after rounding: a value that rounds beyond the largest finite code overflows.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    fp8 = getattr(ml_dtypes, format)
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        out = x.astype(fp8)
    if saturate:
        back = out.astype(np.float32)
        overflow = ~np.isnan(x) & (np.isnan(back) | np.isinf(back))
        largest = np.array(ml_dtypes.finfo(fp8).max, dtype=fp8)
        clamped = np.where(np.signbit(x), -largest, largest).astype(fp8)
        out = np.where(overflow, clamped, out)
    codes = out.view(np.uint8)
    if not format.endswith("fnuz"):  # FNUZ formats have the one NaN 0x80 already
        nan = np.where(np.signbit(x), 0xFF, 0x7F).astype(np.uint8)
        codes = np.where(np.isnan(out.astype(np.float32)), nan, codes)
    return codes
