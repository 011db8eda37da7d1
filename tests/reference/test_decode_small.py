"""``reference.decode.fp6`` / ``fp4`` / ``e8m0`` against ml_dtypes and torch, and the cast/decode round trip."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference import cast, decode
from reference.cast import FP4_FORMATS, FP6_FORMATS, NAN_POLICIES
from reference.formats import get_format

SMALL = (*FP6_FORMATS, *FP4_FORMATS)
DECODE: dict[str, Callable[..., dict[str, np.ndarray]]] = {
    **dict.fromkeys(FP6_FORMATS, decode.fp6),
    **dict.fromkeys(FP4_FORMATS, decode.fp4),
}
CAST: dict[str, Callable[..., dict[str, np.ndarray]]] = {
    **dict.fromkeys(FP6_FORMATS, cast.fp6),
    **dict.fromkeys(FP4_FORMATS, cast.fp4),
}
BYTES = np.arange(256, dtype=np.uint8)


def all_codes(name: str) -> np.ndarray:
    return np.arange(1 << get_format(name).bits, dtype=np.uint8)


@pytest.mark.parametrize("name", SMALL)
def test_every_code_matches_ml_dtypes(name: str) -> None:
    codes = all_codes(name)
    ours = DECODE[name](codes, format=name)["values"]
    theirs = codes.view(getattr(ml_dtypes, name)).astype(np.float32)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))  # -0.0 included


@pytest.mark.parametrize("name", SMALL)
def test_every_code_round_trips(name: str) -> None:
    codes = all_codes(name)
    values = DECODE[name](codes, format=name)["values"]
    for rounding in ("rne", "rtz"):
        for nan in NAN_POLICIES:
            np.testing.assert_array_equal(CAST[name](values, format=name, rounding=rounding, nan=nan)["codes"], codes)


@pytest.mark.parametrize(("name", "first_bad"), [("float6_e2m3fn", 64), ("float6_e3m2fn", 64), ("float4_e2m1fn", 16)])
def test_bytes_beyond_the_code_width_are_refused(name: str, first_bad: int) -> None:
    """ml_dtypes reads such bytes as negative numbers; the contract refuses them and names the first one."""
    with pytest.raises(ValueError, match=rf"codes\[{first_bad}\]={first_bad}, but codes must hold"):
        DECODE[name](BYTES, format=name)
    grid = np.zeros((2, 3), dtype=np.uint8)
    grid[1, 2] = 0xFF
    with pytest.raises(ValueError, match=r"codes\[1, 2\]=255"):
        DECODE[name](grid, format=name)


def test_fp4_table() -> None:
    values = decode.fp4(all_codes("float4_e2m1fn"), format="float4_e2m1fn")["values"]
    magnitudes = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    np.testing.assert_array_equal(values, magnitudes + [-m for m in magnitudes])
    assert np.signbit(values[8])


@pytest.mark.parametrize(("name", "maximum"), [("float6_e2m3fn", 7.5), ("float6_e3m2fn", 28.0)])
def test_fp6_landmarks(name: str, maximum: float) -> None:
    values = decode.fp6(np.array([0x1F, 0x3F, 0x20, 0x01], dtype=np.uint8), format=name)["values"]
    np.testing.assert_array_equal(values[:3], [maximum, -maximum, -0.0])
    assert np.signbit(values[2])
    assert values[3] == get_format(name).min_subnormal


def test_e8m0_matches_ml_dtypes_and_torch() -> None:
    ours = decode.e8m0(BYTES)["values"]
    ml = BYTES.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    from_torch = torch.from_numpy(BYTES).view(torch.float8_e8m0fnu).to(torch.float32).numpy()
    for theirs in (ml, from_torch):
        np.testing.assert_array_equal(ours[:255].view(np.uint32), theirs[:255].view(np.uint32))
        assert np.isnan(theirs[255])
    assert ours.view(np.uint32)[255] == 0x7FC0_0000
    assert ours.view(np.uint32)[0] == 0x0040_0000  # 2**-127, a float32 subnormal
    np.testing.assert_array_equal(ours[:255], np.ldexp(1.0, np.arange(255) - 127).astype(np.float32))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(codes=hnp.arrays(np.uint8, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)), name=st.sampled_from(SMALL))
def test_shape_is_kept_and_values_are_elementwise(codes: np.ndarray, name: str) -> None:
    codes = np.asarray(codes & ((1 << get_format(name).bits) - 1))  # a 0-d array stays an array
    values = DECODE[name](codes, format=name)["values"]
    assert values.shape == codes.shape
    table = DECODE[name](all_codes(name), format=name)["values"]
    np.testing.assert_array_equal(values.view(np.uint32), table[codes].view(np.uint32))


def test_results_are_fresh_writable_arrays() -> None:
    for function, kwargs in ((decode.fp4, {"format": "float4_e2m1fn"}), (decode.e8m0, {})):
        values = function(np.arange(16, dtype=np.uint8), **kwargs)["values"]
        values[:] = 0
        assert function(np.arange(16, dtype=np.uint8), **kwargs)["values"][2] != 0


@pytest.mark.parametrize(
    ("function", "bad", "allowed"),
    [
        (decode.fp6, "float6_e2m3", r"\['float6_e2m3fn', 'float6_e3m2fn'\]"),
        (decode.fp6, "float4_e2m1fn", r"\['float6_e2m3fn', 'float6_e3m2fn'\]"),
        (decode.fp4, "float4_e2m1", r"\['float4_e2m1fn'\]"),
    ],
)
def test_rejects_unknown_format(function: Callable[..., dict[str, np.ndarray]], bad: str, allowed: str) -> None:
    with pytest.raises(ValueError, match=rf"format='{bad}', but format must be one of {allowed}"):
        function(np.zeros(2, dtype=np.uint8), format=bad)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.float32, np.bool_])
@pytest.mark.parametrize(
    ("function", "kwargs"),
    [(decode.fp6, {"format": "float6_e2m3fn"}), (decode.fp4, {"format": "float4_e2m1fn"}), (decode.e8m0, {})],
)
def test_rejects_other_dtypes(
    function: Callable[..., dict[str, np.ndarray]], kwargs: dict[str, str], dtype: type
) -> None:
    with pytest.raises(TypeError, match=rf"codes\.dtype={np.dtype(dtype)}, but codes must be uint8"):
        function(np.zeros(3, dtype=dtype), **kwargs)
    with pytest.raises(TypeError, match="codes of type list"):
        function([1, 2], **kwargs)
