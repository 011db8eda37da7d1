"""``reference.decode.fp8`` against ml_dtypes, and the decode/cast round trip."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference import cast, decode
from reference.cast import FP8_FORMATS, OVERFLOW_POLICIES
from reference.formats import get_format

ML = {name: getattr(ml_dtypes, name) for name in FP8_FORMATS}
ALL_CODES = np.arange(256, dtype=np.uint8)


@pytest.mark.parametrize("name", FP8_FORMATS)
def test_all_codes_match_ml_dtypes(name: str) -> None:
    ours = decode.fp8(ALL_CODES, format=name)["values"]
    theirs = ALL_CODES.view(ML[name]).astype(np.float32)
    assert ours.dtype == np.float32
    nan = np.isnan(ours)
    np.testing.assert_array_equal(nan, np.isnan(theirs))
    np.testing.assert_array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))  # zero signs too


@pytest.mark.parametrize("name", FP8_FORMATS)
def test_nan_codes_decode_to_signed_quiet_nan(name: str) -> None:
    fmt = get_format(name)
    nan_codes = ALL_CODES[fmt.is_nan(ALL_CODES)]
    assert nan_codes.size > 0
    bits = decode.fp8(nan_codes, format=name)["values"].view(np.uint32)
    expected = np.where(nan_codes & 0x80, 0xFFC0_0000, 0x7FC0_0000).astype(np.uint32)
    np.testing.assert_array_equal(bits, expected)


def test_special_values() -> None:
    e4m3 = decode.fp8(np.array([0x00, 0x80, 0x7E, 0xFE, 0x01, 0x08], dtype=np.uint8), format="float8_e4m3fn")
    np.testing.assert_array_equal(e4m3["values"], [0.0, -0.0, 448.0, -448.0, 2**-9, 2**-6])
    assert np.signbit(e4m3["values"][1])
    e5m2 = decode.fp8(np.array([0x7C, 0xFC, 0x7B, 0x01], dtype=np.uint8), format="float8_e5m2")
    np.testing.assert_array_equal(e5m2["values"], [np.inf, -np.inf, 57344.0, 2**-16])


@pytest.mark.parametrize("overflow", OVERFLOW_POLICIES)
@pytest.mark.parametrize("name", FP8_FORMATS)
def test_every_exact_value_round_trips(name: str, overflow: str) -> None:
    fmt = get_format(name)
    finite = ALL_CODES[np.isfinite(fmt.decode_table)]
    values = decode.fp8(finite, format=name)["values"]
    np.testing.assert_array_equal(cast.fp8(values, format=name, overflow=overflow)["codes"], finite)


@pytest.mark.parametrize("name", FP8_FORMATS)
def test_nan_and_inf_codes_round_trip_nonsaturating(name: str) -> None:
    fmt = get_format(name)
    special = ALL_CODES[~np.isfinite(fmt.decode_table)]
    codes = cast.fp8(decode.fp8(special, format=name)["values"], format=name, overflow="nonsaturating")["codes"]
    assert np.all(fmt.is_nan(codes) == fmt.is_nan(special))
    np.testing.assert_array_equal(codes & 0x80, special & 0x80)
    inf = np.isinf(fmt.decode_table[special])
    np.testing.assert_array_equal(codes[inf], special[inf])


@settings(max_examples=50, deadline=None, derandomize=True)
@given(
    codes=hnp.arrays(np.uint8, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)),
    name=st.sampled_from(FP8_FORMATS),
)
def test_shape_is_kept_and_values_are_elementwise(codes: np.ndarray, name: str) -> None:
    values = decode.fp8(codes, format=name)["values"]
    assert values.shape == codes.shape
    table = decode.fp8(ALL_CODES, format=name)["values"]
    np.testing.assert_array_equal(values.view(np.uint32), table[codes].view(np.uint32))


def test_result_is_a_fresh_writable_array() -> None:
    values = decode.fp8(ALL_CODES, format="float8_e5m2")["values"]
    values[:] = 0
    again = decode.fp8(ALL_CODES, format="float8_e5m2")["values"]
    assert again[0x3C] == 1.0


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64, np.float32, np.bool_])
def test_rejects_other_dtypes(dtype: type) -> None:
    with pytest.raises(TypeError, match=rf"codes\.dtype={np.dtype(dtype)}, but codes must be uint8"):
        decode.fp8(np.zeros(3, dtype=dtype), format="float8_e4m3fn")


def test_rejects_non_arrays() -> None:
    with pytest.raises(TypeError, match="codes of type list"):
        decode.fp8([0x38], format="float8_e4m3fn")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["float8_e4m3b11fnuz", "float8_e8m0fnu", "fp8"])
def test_rejects_unknown_format(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"format='{bad}'.*'float8_e4m3fn', 'float8_e5m2', 'float8_e4m3fnuz'"):
        decode.fp8(ALL_CODES, format=bad)


@pytest.mark.parametrize(("name", "maximum"), [("float8_e4m3fnuz", 240.0), ("float8_e5m2fnuz", 57344.0)])
def test_fnuz_landmarks(name: str, maximum: float) -> None:
    values = decode.fp8(np.array([0x00, 0x7F, 0xFF, 0x40], dtype=np.uint8), format=name)["values"]
    np.testing.assert_array_equal(values, [0.0, maximum, -maximum, 1.0])
    assert not np.signbit(values[0])
    assert decode.fp8(np.array([0x80], dtype=np.uint8), format=name)["values"].view(np.uint32)[0] == 0xFFC0_0000
