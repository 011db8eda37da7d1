"""``reference.cast.int_`` (contract ``cast.int``) against NumPy and ml_dtypes.

- ``rne_clamp``: ``np.clip(np.rint(x), lo, hi)`` (ONNX QuantizeLinear's arithmetic) on every
  non-NaN input; NaN gives 0 by declaration.
- ``truncate_wrap``: ml_dtypes ``astype(int4)`` / ``astype(uint4)`` and NumPy ``astype(np.int8)`` on
  every finite input below 2**63 in magnitude, where those casts are defined (NumPy converts
  through int64; beyond that, and for NaN and Inf, the result is platform-dependent, so the
  contract declares 0 there).

The output is the two's complement bit pattern in a uint8: compared here after masking the
oracle's integers to 8 or 4 bits.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

from reference.cast import INT_DTYPES, INT_MODES, int_

RANGES = {"int8": (-128, 127, 0xFF), "int4": (-8, 7, 0xF), "uint4": (0, 15, 0xF)}
"""(lowest, highest, bit mask) of each dtype."""
ML = {"int8": np.int8, "int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4}


def integer_boundaries() -> np.ndarray:
    """TestFloat-style: every integer and half-integer in [-300, 300], 2**j and 1.5 * 2**j up to 2**70,
    each with one float32 ulp either side, both signs."""
    points = np.concatenate([np.arange(0, 300.5, 0.5), 2.0 ** np.arange(71), 1.5 * 2.0 ** np.arange(71)]).astype(
        np.float32
    )
    inf = np.float32(np.inf)
    around = np.concatenate([points, np.nextafter(points, inf), np.nextafter(points, -inf)])
    return np.concatenate([around, -around])


BOUNDARIES = integer_boundaries()


def codes(x: np.ndarray, dtype: str, mode: str) -> np.ndarray:
    return int_(x, dtype=dtype, mode=mode)["codes"]


def as_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    return (values.astype(np.int64) & RANGES[dtype][2]).astype(np.uint8)


def check_rne_clamp(x: np.ndarray, dtype: str, assert_codes_equal: Callable[..., None]) -> None:
    lowest, highest, _ = RANGES[dtype]
    x = x[~np.isnan(x)]
    with np.errstate(over="ignore"):
        expected = as_bits(np.clip(np.rint(x.astype(np.float64)), lowest, highest), dtype)
    assert_codes_equal(codes(x, dtype, "rne_clamp"), expected, x, "np.clip(np.rint(x))")


def check_truncate_wrap(x: np.ndarray, dtype: str, assert_codes_equal: Callable[..., None]) -> None:
    with np.errstate(invalid="ignore"):
        x = x[np.abs(x.astype(np.float64)) < 2.0**63]  # NaN compares False: dropped too
    with warnings.catch_warnings(), np.errstate(invalid="ignore", over="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        theirs = x.astype(ML[dtype])
    assert_codes_equal(codes(x, dtype, "truncate_wrap"), as_bits(theirs, dtype), x, f"astype({dtype})")


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_rne_clamp_is_rint_then_clip(dtype: str, wide_x: np.ndarray, assert_codes_equal: Callable[..., None]) -> None:
    check_rne_clamp(wide_x, dtype, assert_codes_equal)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_rne_clamp_is_rint_then_clip_on_boundaries(dtype: str, assert_codes_equal: Callable[..., None]) -> None:
    check_rne_clamp(BOUNDARIES, dtype, assert_codes_equal)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_truncate_wrap_matches_numpy_and_ml_dtypes(
    dtype: str, wide_x: np.ndarray, assert_codes_equal: Callable[..., None]
) -> None:
    check_truncate_wrap(wide_x, dtype, assert_codes_equal)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_truncate_wrap_matches_numpy_and_ml_dtypes_on_boundaries(
    dtype: str, assert_codes_equal: Callable[..., None]
) -> None:
    check_truncate_wrap(BOUNDARIES, dtype, assert_codes_equal)


def check_round_wrap(x: np.ndarray, dtype: str, mode: str, assert_codes_equal: Callable[..., None]) -> None:
    """float64 model: rint (ties to even) or floor(|x| + 0.5) with the sign (ties away), both exact in float64
    for float32 x; then the exact integer's low bits (Python ints: no overflow). NaN and Inf are checked apart."""
    x = x[np.isfinite(x)]
    wide = x.astype(np.float64)
    rounded = np.rint(wide) if mode == "rne_wrap" else np.copysign(np.floor(np.abs(wide) + 0.5), wide)
    mask = RANGES[dtype][2]
    expected = np.array([int(v) & mask for v in rounded.tolist()], dtype=np.uint8)
    assert_codes_equal(codes(x, dtype, mode), expected, x, f"{mode} model")


@pytest.mark.parametrize("mode", ["rne_wrap", "rna_wrap"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_round_then_wrap_matches_a_float64_model(
    dtype: str, mode: str, wide_x: np.ndarray, assert_codes_equal: Callable[..., None]
) -> None:
    check_round_wrap(wide_x, dtype, mode, assert_codes_equal)
    check_round_wrap(BOUNDARIES, dtype, mode, assert_codes_equal)


@pytest.mark.parametrize("mode", INT_MODES)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_nan_and_infinities(dtype: str, mode: str) -> None:
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 3.4e38, -3.4e38], dtype=np.float32)
    lowest, highest, _ = RANGES[dtype]
    if mode == "rne_clamp":
        expected = as_bits(np.array([0, 0, highest, lowest, highest, lowest]), dtype)
    else:
        expected = np.zeros(6, dtype=np.uint8)  # NaN/Inf declared 0; 3.4e38 is a multiple of 256
    np.testing.assert_array_equal(codes(x, dtype, mode), expected)


def test_int4_and_uint4_wrap_to_the_same_bits(wide_x: np.ndarray) -> None:
    np.testing.assert_array_equal(codes(wide_x, "int4", "truncate_wrap"), codes(wide_x, "uint4", "truncate_wrap"))


ANCHORS = [
    # (dtype, mode, x, value): the code is value's two's complement bits
    ("int4", "rne_clamp", 2.5, 2),
    ("int4", "rne_clamp", 3.5, 4),
    ("int4", "rne_clamp", -8.5, -8),
    ("int4", "rne_clamp", 7.5, 7),
    ("int4", "rne_clamp", 7.6, 7),
    ("int4", "rne_clamp", 8.0, 7),
    ("int4", "rne_clamp", -9.0, -8),
    ("int4", "rne_clamp", -0.5, 0),
    ("int4", "rne_clamp", -0.0, 0),
    ("int4", "rne_clamp", -1.5, -2),
    ("int4", "truncate_wrap", 7.6, 7),
    ("int4", "truncate_wrap", 8.0, -8),
    ("int4", "truncate_wrap", -9.0, 7),
    ("int4", "truncate_wrap", 2.5, 2),
    ("int4", "truncate_wrap", -2.5, -2),
    ("int4", "truncate_wrap", -0.99, 0),
    ("int4", "truncate_wrap", 23.9, 7),
    ("uint4", "rne_clamp", 15.5, 15),
    ("uint4", "rne_clamp", 14.5, 14),
    ("uint4", "rne_clamp", -3.0, 0),
    ("uint4", "truncate_wrap", 16.5, 0),
    ("uint4", "truncate_wrap", -1.0, 15),
    ("int8", "rne_clamp", 127.5, 127),
    ("int8", "rne_clamp", 126.5, 126),
    ("int8", "rne_clamp", -128.5, -128),
    ("int8", "rne_clamp", 1e9, 127),
    ("int8", "truncate_wrap", 255.9, -1),
    ("int8", "truncate_wrap", 300.0, 44),
    ("int8", "truncate_wrap", -300.0, -44),
    ("int8", "truncate_wrap", 2.0**31, 0),
    ("int8", "truncate_wrap", 2.0**30 + 2.0**7, -128),
    ("int8", "truncate_wrap", 1.5e-45, 0),
]


@pytest.mark.parametrize(("dtype", "mode", "value", "expected"), ANCHORS)
def test_anchor(dtype: str, mode: str, value: float, expected: int) -> None:
    got = codes(np.array([value], dtype=np.float32), dtype, mode)
    assert got[0] == expected & RANGES[dtype][2]


@pytest.mark.parametrize("mode", INT_MODES)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_float16_input_equals_float32_widened(dtype: str, mode: str) -> None:
    x16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    np.testing.assert_array_equal(codes(x16, dtype, mode), codes(x16.astype(np.float32), dtype, mode))


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3, 4)])
def test_output_shape_and_dtype(shape: tuple[int, ...]) -> None:
    out = codes(np.full(shape, -1.0, np.float32), "int4", "rne_clamp")
    assert out.shape == shape and out.dtype == np.uint8 and np.all(out == 0xF)


def test_crosses_chunk_boundaries() -> None:
    x = np.random.default_rng(3).standard_normal(200_003).astype(np.float32) * np.float32(100)
    for mode in INT_MODES:
        whole = codes(x, "int8", mode)
        pieces = np.concatenate([codes(part, "int8", mode) for part in np.split(x, [1, 65_537, 131_075])])
        np.testing.assert_array_equal(whole, pieces)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": "int2"}, r"dtype='int2', but dtype must be one of \['int8', 'int4', 'uint4'\]"),
        ({"dtype": "uint8"}, r"dtype='uint8'"),
        ({"mode": "rtz_wrap"}, r"mode='rtz_wrap', but mode must be one of \['rne_clamp', 'truncate_wrap', 'rne_wrap',"),
    ],
)
def test_rejects_unknown_params(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        int_(np.ones(2, np.float32), **{"dtype": "int4", "mode": "rne_clamp", **kwargs})


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int8])
def test_rejects_other_dtypes(dtype: type) -> None:
    with pytest.raises(TypeError, match=rf"x\.dtype={np.dtype(dtype)}"):
        int_(np.zeros(2, dtype=dtype), dtype="int8", mode="truncate_wrap")
