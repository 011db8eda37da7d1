"""``reference.cast.fp6`` / ``cast.fp4`` (round to nearest even) against ml_dtypes, plus anchors and arguments.

ml_dtypes' ``astype`` to float6_e2m3fn, float6_e3m2fn and float4_e2m1fn is the parameter set
``rounding="rne", nan="negative_zero"``: equal codes on every input, NaN included.  The other NaN
policies differ from it on NaN inputs only (tested below).  The rounding modes ``rtz`` and
``stochastic`` are checked in ``test_cast_rounding.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference import cast
from reference.cast import FP4_FORMATS, FP6_FORMATS, NAN_POLICIES
from reference.formats import get_format

FORMATS = (*FP6_FORMATS, *FP4_FORMATS)


def ours(x: np.ndarray, name: str, nan: str = "max") -> np.ndarray:
    function = cast.fp6 if name in FP6_FORMATS else cast.fp4
    return function(x, format=name, nan=nan)["codes"]


def ml_cast(x: np.ndarray, name: str) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):  # ml_dtypes flags NaN and overflow
        return x.astype(getattr(ml_dtypes, name)).view(np.uint8)


@pytest.mark.parametrize("name", FORMATS)
def test_negative_zero_policy_matches_ml_dtypes(
    name: str, wide_x: np.ndarray, assert_codes_equal: Callable[..., None]
) -> None:
    assert_codes_equal(ours(wide_x, name, "negative_zero"), ml_cast(wide_x, name), wide_x, "ml_dtypes")


@pytest.mark.parametrize("source", FORMATS)
@pytest.mark.parametrize("name", FORMATS)
def test_negative_zero_policy_matches_ml_dtypes_on_boundaries(
    name: str, source: str, boundary_x: Callable[[str], np.ndarray], assert_codes_equal: Callable[..., None]
) -> None:
    x = boundary_x(source)
    assert_codes_equal(ours(x, name, "negative_zero"), ml_cast(x, name), x, "ml_dtypes")


@pytest.mark.parametrize("nan", NAN_POLICIES)
@pytest.mark.parametrize("name", FORMATS)
def test_nan_policies_differ_on_nan_only(name: str, nan: str, wide_x: np.ndarray) -> None:
    fmt = get_format(name)
    codes = ours(wide_x, name, nan)
    is_nan = np.isnan(wide_x)
    np.testing.assert_array_equal(codes[~is_nan], ours(wide_x[~is_nan], name, "negative_zero"))
    negative = np.signbit(wide_x[is_nan])
    top = fmt.max_finite_code
    expected = {
        "max": np.full(negative.shape, top),
        "signed_max": np.where(negative, top | fmt.sign_mask, top),
        "negative_zero": np.where(negative, 0, fmt.sign_mask),
    }[nan]
    np.testing.assert_array_equal(codes[is_nan], expected)


@pytest.mark.parametrize("name", FORMATS)
def test_codes_fit_the_format_and_saturate(name: str, wide_x: np.ndarray) -> None:
    fmt = get_format(name)
    codes = ours(wide_x, name)
    assert codes.dtype == np.uint8
    assert int(codes.max()) < 1 << fmt.bits
    big = np.abs(wide_x) > 2 * fmt.max_finite  # beyond every rounding boundary, Inf included
    expected = np.where(np.signbit(wide_x[big]), fmt.max_finite_code | fmt.sign_mask, fmt.max_finite_code)
    np.testing.assert_array_equal(codes[big], expected)


ANCHORS = [
    # (format, x, code with nan="max")
    ("float4_e2m1fn", 0.25, 0x0),  # tie 0 / 0.5 goes to even 0
    ("float4_e2m1fn", 0.2500001, 0x1),
    ("float4_e2m1fn", 0.75, 0x2),  # tie 0.5 / 1 goes to even 1
    ("float4_e2m1fn", 1.25, 0x2),  # tie 1 / 1.5 goes to even 1
    ("float4_e2m1fn", 1.75, 0x4),  # tie 1.5 / 2 goes to even 2
    ("float4_e2m1fn", 2.5, 0x4),
    ("float4_e2m1fn", 3.5, 0x6),
    ("float4_e2m1fn", 5.0, 0x6),  # tie 4 / 6 goes to even 4
    ("float4_e2m1fn", 5.0000005, 0x7),
    ("float4_e2m1fn", 6.0, 0x7),
    ("float4_e2m1fn", 7.0, 0x7),  # tie 6 / 8 goes to even 8, which saturates
    ("float4_e2m1fn", 1e6, 0x7),
    ("float4_e2m1fn", math.inf, 0x7),
    ("float4_e2m1fn", -math.inf, 0xF),
    ("float4_e2m1fn", -0.0, 0x8),
    ("float4_e2m1fn", -0.25, 0x8),
    ("float4_e2m1fn", -2.5, 0xC),
    ("float4_e2m1fn", math.nan, 0x7),
    ("float4_e2m1fn", -math.nan, 0x7),
    ("float6_e2m3fn", 0.125, 0x01),  # smallest subnormal
    ("float6_e2m3fn", 0.0625, 0x00),  # half of it: tie to even 0
    ("float6_e2m3fn", 0.1875, 0x02),
    ("float6_e2m3fn", 0.9375, 0x08),  # 7.5 subnormal steps: tie up into the smallest normal, 1.0
    ("float6_e2m3fn", 7.5, 0x1F),
    ("float6_e2m3fn", 7.75, 0x1F),
    ("float6_e2m3fn", -7.75, 0x3F),
    ("float6_e2m3fn", -0.0, 0x20),
    ("float6_e3m2fn", 0.0625, 0x01),
    ("float6_e3m2fn", 0.03125, 0x00),
    ("float6_e3m2fn", 1.125, 0x0C),  # tie 1 / 1.25 goes to even 1
    ("float6_e3m2fn", 28.0, 0x1F),
    ("float6_e3m2fn", 30.0, 0x1F),  # tie 28 / 32 goes to even 32, which saturates
    ("float6_e3m2fn", -1e9, 0x3F),
    ("float6_e3m2fn", math.nan, 0x1F),
]


@pytest.mark.parametrize(("name", "value", "code"), ANCHORS)
def test_anchor(name: str, value: float, code: int) -> None:
    x = np.array([value], dtype=np.float32)
    assert np.signbit(x[0]) == (math.copysign(1.0, value) < 0)
    assert ours(x, name)[0] == code


@settings(max_examples=50, deadline=None, derandomize=True)
@given(
    x=hnp.arrays(np.float16, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5), elements=st.floats(width=16)),
    name=st.sampled_from(FORMATS),
    nan=st.sampled_from(NAN_POLICIES),
)
def test_float16_input_equals_float32_widened(x: np.ndarray, name: str, nan: str) -> None:
    codes = ours(x, name, nan)
    assert codes.shape == x.shape
    np.testing.assert_array_equal(codes, ours(x.astype(np.float32), name, nan))


@pytest.mark.parametrize(
    ("function", "bad", "allowed"),
    [
        (cast.fp6, "float6_e2m3", "'float6_e2m3fn', 'float6_e3m2fn'"),
        (cast.fp6, "float4_e2m1fn", "'float6_e2m3fn', 'float6_e3m2fn'"),
        (cast.fp4, "float4_e2m1", "'float4_e2m1fn'"),
        (cast.fp4, "float6_e3m2fn", "'float4_e2m1fn'"),
    ],
)
def test_rejects_unknown_format(function: Callable[..., dict[str, np.ndarray]], bad: str, allowed: str) -> None:
    with pytest.raises(ValueError, match=rf"format='{bad}', but format must be one of \[{allowed}\]"):
        function(np.ones(2, np.float32), format=bad)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("bad", ["zero", "MAX", "nan", ""])
def test_rejects_unknown_nan_policy(name: str, bad: str) -> None:
    with pytest.raises(
        ValueError, match=rf"nan='{bad}', but nan must be one of \['max', 'signed_max', 'negative_zero'\]"
    ):
        ours(np.ones(2, np.float32), name, bad)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8])
@pytest.mark.parametrize("name", FORMATS)
def test_rejects_other_dtypes(name: str, dtype: type) -> None:
    with pytest.raises(TypeError, match=rf"x\.dtype={np.dtype(dtype)}"):
        ours(np.zeros(2, dtype=dtype), name)
