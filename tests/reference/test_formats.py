"""Invariants of the traits table, and its agreement with ml_dtypes (finfo and every code)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from reference.formats import FORMATS, FloatFormat, get_format

ALL = sorted(FORMATS)
TABLED = [name for name in ALL if FORMATS[name].bits <= 16]
ML_DTYPES = {
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
    "bfloat16": ml_dtypes.bfloat16,
    "float16": np.float16,
    "float32": np.float32,
}
"""The NumPy/ml_dtypes dtype of each format; the test below keeps it in step with FORMATS."""


def _ml_decode(name: str) -> np.ndarray:
    """float64 value of every code of ``name`` according to ml_dtypes/NumPy."""
    fmt = FORMATS[name]
    storage = np.uint8 if fmt.bits <= 8 else np.uint16
    with np.errstate(invalid="ignore"):  # ml_dtypes' bfloat16 flags NaN codes as "invalid" when widened
        return np.arange(1 << fmt.bits, dtype=storage).view(ML_DTYPES[name]).astype(np.float64)


def test_every_format_has_an_oracle_dtype() -> None:
    assert set(ML_DTYPES) == set(FORMATS)


@pytest.mark.parametrize("name", ALL)
def test_bit_fields_add_up(name: str) -> None:
    fmt = FORMATS[name]
    assert fmt.name == name
    assert fmt.bits == int(fmt.signed) + fmt.exponent_bits + fmt.mantissa_bits
    assert np.dtype(ML_DTYPES[name]).itemsize == (fmt.bits + 7) // 8
    assert fmt.sign_mask & fmt.magnitude_mask == 0
    assert fmt.sign_mask | fmt.magnitude_mask == (1 << fmt.bits) - 1
    assert fmt.sign_mask == (1 << (fmt.bits - 1) if fmt.signed else 0)
    assert 0 <= fmt.bias < 1 << fmt.exponent_bits


@pytest.mark.parametrize("name", ALL)
def test_limits_match_finfo(name: str) -> None:
    fmt = FORMATS[name]
    finfo = ml_dtypes.finfo(ML_DTYPES[name])
    assert fmt.min_normal == float(finfo.smallest_normal)
    assert fmt.min_subnormal == float(finfo.smallest_subnormal)
    if fmt.bits <= 16:  # float32 has no decode table, hence no table-derived max_finite
        assert fmt.max_finite == float(finfo.max)


@pytest.mark.parametrize("name", TABLED)
def test_derived_limits_are_consistent(name: str) -> None:
    fmt = FORMATS[name]
    table = fmt.decode_table
    assert table.shape == (1 << fmt.bits,)
    assert fmt.decode(fmt.max_finite_code) == fmt.max_finite
    assert fmt.max_finite_code & fmt.sign_mask == 0
    positive = fmt.finite_magnitudes[fmt.finite_magnitudes > 0]
    assert positive[0] == fmt.min_subnormal
    assert np.all(np.diff(fmt.finite_magnitudes) > 0)
    assert fmt.has_inf == bool(np.isinf(table).any())
    assert fmt.has_negative_zero == bool(np.any((table == 0) & np.signbit(table)))
    nan_codes = np.flatnonzero(fmt.is_nan(np.arange(1 << fmt.bits)))
    assert nan_codes.size == np.isnan(table).sum()
    assert (nan_codes.size == 0) == (fmt.nan == "none")


@pytest.mark.parametrize("name", TABLED)
def test_decode_table_matches_ml_dtypes(name: str) -> None:
    ours = FORMATS[name].decode_table
    theirs = _ml_decode(name)
    ours_nan, theirs_nan = np.isnan(ours), np.isnan(theirs)
    np.testing.assert_array_equal(ours_nan, theirs_nan)
    np.testing.assert_array_equal(ours[~ours_nan], theirs[~theirs_nan])
    np.testing.assert_array_equal(np.signbit(ours[~ours_nan]), np.signbit(theirs[~theirs_nan]))


def test_float32_fields_match_numpy() -> None:
    fmt = FORMATS["float32"]
    finfo = np.finfo(np.float32)
    assert fmt.decode(0x7F7F_FFFF) == float(finfo.max)
    assert fmt.decode(0x0000_0001) == float(finfo.smallest_subnormal)
    assert fmt.decode(0x8080_0000) == -float(finfo.smallest_normal)
    assert math.isinf(fmt.decode(0x7F80_0000))
    assert math.isnan(fmt.decode(0xFFC0_0000))
    with pytest.raises(ValueError, match="<= 16 bits"):
        _ = fmt.decode_table


def test_get_format_returns_the_row() -> None:
    assert isinstance(get_format("float8_e4m3fn"), FloatFormat)
    assert get_format("float8_e4m3fn") is FORMATS["float8_e4m3fn"]


def test_get_format_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"format='float8_e4m3'.*'float8_e4m3fn'"):
        get_format("float8_e4m3")


def test_decode_rejects_codes_out_of_range() -> None:
    with pytest.raises(ValueError, match="code=256"):
        get_format("float8_e5m2").decode(256)
