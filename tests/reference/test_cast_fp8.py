"""``reference.cast.fp8``: argument checks, shapes and layouts, float16 vs float32 inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference.cast import FP8_FORMATS, OVERFLOW_POLICIES, fp8

EXAMPLES = settings(max_examples=50, deadline=None, derandomize=True)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.complex64, np.float64, np.longdouble])
def test_rejects_other_dtypes(dtype: type) -> None:
    x = np.zeros(3, dtype=dtype)
    with pytest.raises(TypeError, match=r"x\.dtype=.*float32 or float16.*convert to float32 first") as info:
        fp8(x, format="float8_e4m3fn", overflow="saturate")
    assert str(np.dtype(dtype)) in str(info.value)


def test_float64_message_says_why() -> None:
    with pytest.raises(TypeError, match="rounds twice"):
        fp8(np.ones(2), format="float8_e5m2", overflow="saturate")


def test_rejects_non_arrays() -> None:
    with pytest.raises(TypeError, match="x of type list"):
        fp8([1.0], format="float8_e5m2", overflow="saturate")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["float8_e4m3", "float8_e4m3b11fnuz", "e4m3fn", "float4_e2m1fn"])
def test_rejects_unknown_format(bad: str) -> None:
    allowed = "'float8_e4m3fn', 'float8_e5m2', 'float8_e4m3fnuz', 'float8_e5m2fnuz'"
    with pytest.raises(ValueError, match=rf"format='{bad}', but format must be one of \[{allowed}\]"):
        fp8(np.ones(2, np.float32), format=bad, overflow="saturate")


@pytest.mark.parametrize("bad", ["saturating", "nonsaturate", "", "clip"])
def test_rejects_unknown_overflow(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"overflow='{bad}'.*'saturate', 'nonsaturating'"):
        fp8(np.ones(2, np.float32), format="float8_e4m3fn", overflow=bad)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_output_shape_and_dtype(shape: tuple[int, ...], dtype: type) -> None:
    codes = fp8(np.full(shape, 1.0, dtype=dtype), format="float8_e4m3fn", overflow="saturate")["codes"]
    assert codes.shape == shape
    assert codes.dtype == np.uint8
    assert np.all(codes == 0x38)


def test_input_is_not_modified() -> None:
    x = np.array([1e6, -0.0, np.nan, 3.3], dtype=np.float32)
    before = x.copy()
    fp8(x, format="float8_e4m3fn", overflow="saturate")
    np.testing.assert_array_equal(x.view(np.uint32), before.view(np.uint32))


def test_crosses_chunk_boundaries() -> None:
    """Inputs longer than one internal chunk: each element depends on its own value only."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(200_003).astype(np.float32) * np.float32(300)
    whole = fp8(x, format="float8_e4m3fn", overflow="saturate")["codes"]
    parts = np.split(x, [1, 65_537, 131_075])
    pieces = np.concatenate([fp8(part, format="float8_e4m3fn", overflow="saturate")["codes"] for part in parts])
    np.testing.assert_array_equal(whole, pieces)


@EXAMPLES
@given(
    x=hnp.arrays(np.float16, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5), elements=st.floats(width=16)),
    name=st.sampled_from(FP8_FORMATS),
    overflow=st.sampled_from(OVERFLOW_POLICIES),
)
def test_float16_input_equals_float32_widened(x: np.ndarray, name: str, overflow: str) -> None:
    from_16 = fp8(x, format=name, overflow=overflow)["codes"]
    from_32 = fp8(x.astype(np.float32), format=name, overflow=overflow)["codes"]
    np.testing.assert_array_equal(from_16, from_32)


@EXAMPLES
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=3, max_side=6), elements=st.floats(width=32)),
    name=st.sampled_from(FP8_FORMATS),
)
def test_strided_views_equal_contiguous_copies(x: np.ndarray, name: str) -> None:
    view = x[::-1, ::2].swapaxes(0, -1)
    codes = fp8(view, format=name, overflow="nonsaturating")["codes"]
    np.testing.assert_array_equal(
        codes, fp8(np.ascontiguousarray(view), format=name, overflow="nonsaturating")["codes"]
    )


@EXAMPLES
@given(
    x=hnp.arrays(np.float32, st.integers(1, 20), elements=st.floats(width=32, allow_nan=False)),
    name=st.sampled_from(FP8_FORMATS),
    overflow=st.sampled_from(OVERFLOW_POLICIES),
)
def test_negation_flips_only_the_sign_bit(x: np.ndarray, name: str, overflow: str) -> None:
    """Except in the fnuz formats, where 0x00 (zero) and 0x80 (NaN) have no sign to flip."""
    codes = fp8(x, format=name, overflow=overflow)["codes"]
    flipped = codes ^ 0x80
    if name.endswith("fnuz"):
        flipped = np.where((codes & 0x7F) == 0, codes, flipped)
    np.testing.assert_array_equal(fp8(-x, format=name, overflow=overflow)["codes"], flipped)


@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz"])
def test_fnuz_has_no_negative_zero(name: str) -> None:
    tiny = np.float32(2.0**-30)
    x = np.array([-0.0, -tiny, 0.0, tiny], dtype=np.float32)
    for overflow in OVERFLOW_POLICIES:
        np.testing.assert_array_equal(fp8(x, format=name, overflow=overflow)["codes"], [0, 0, 0, 0])


def test_rounding_defaults_to_rne() -> None:
    x = np.array([1.0625, 1.1875, -0.0029296875], dtype=np.float32)
    default = fp8(x, format="float8_e4m3fn", overflow="saturate")["codes"]
    np.testing.assert_array_equal(default, fp8(x, format="float8_e4m3fn", overflow="saturate", rounding="rne")["codes"])
    np.testing.assert_array_equal(default, [0x38, 0x3A, 0x82])
