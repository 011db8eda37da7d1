"""``reference.cast.e8m0`` against torch 2.13, ml_dtypes, TransformerEngine's rule and a float64 model.

Each oracle is one parameter set, with no remaining difference on any input tried (every
bfloat16 and float16 pattern, random float32 patterns, powers of two, their midpoints 1.5*2**e
with neighbours, the float32 subnormals around 2**-127):

- torch ``Tensor.to(float8_e8m0fnu)``: ``rounding="nearest_up", zero="min", overflow="nonsaturating"``;
- ml_dtypes ``astype(float8_e8m0fnu)``: ``rounding="nearest_up", zero="nan", overflow="nonsaturating"``;
- TransformerEngine ``float_to_e8m0`` (its software fallback, written out below from
  ``common/util/ptx_arch_spec.cuh``): ``rounding="ceil", zero="min", overflow="saturate"``.

Named deviation (tested below): for float32 subnormals in ``(2**-127, 1.5 * 2**-127)``
``nearest_up`` gives 2**-126 (byte 1), as torch and ml_dtypes do, although 2**-127 is nearer.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
import torch

from reference import cast, decode
from reference.cast import E8M0_ROUNDINGS, E8M0_ZERO_POLICIES, OVERFLOW_POLICIES


def scale_set() -> np.ndarray:
    """Powers of two 2**-149 .. 2**127, 1.5 times each, one float32 ulp either side, subnormals, specials."""
    exponents = np.arange(-149, 128, dtype=np.float64)
    points = np.concatenate([2.0**exponents, 1.5 * 2.0 ** exponents[exponents < 127], [1.5 * 2.0**127]]).astype(
        np.float32
    )
    inf = np.float32(np.inf)
    around = np.concatenate([points, np.nextafter(points, inf), np.nextafter(points, -inf)])
    subnormals = np.arange(0, 1 << 23, 4099, dtype=np.uint32).view(np.float32)
    specials = np.array([0x0040_0000, 0x0040_0001, 0x005F_FFFF, 0x0060_0000, 0x007F_FFFF, 0x7F7F_FFFF], np.uint32)
    nans = np.array([0x7F80_0000, 0x7FC0_0000, 0x7F80_0001], dtype=np.uint32)
    magnitudes = np.concatenate([around, subnormals, specials.view(np.float32), nans.view(np.float32)])
    return np.concatenate([magnitudes, -magnitudes])


SCALES = scale_set()


def e8m0(x: np.ndarray, rounding: str, zero: str, overflow: str) -> np.ndarray:
    return cast.e8m0(x, rounding=rounding, zero=zero, overflow=overflow)["codes"]


def torch_cast(x: np.ndarray) -> np.ndarray:
    tensor = torch.from_numpy(x.astype(np.float32) if x.dtype == np.float16 else x)
    return tensor.to(torch.float8_e8m0fnu).view(torch.uint8).numpy()


def ml_cast(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)


def transformer_engine(x: np.ndarray) -> np.ndarray:
    """TE ``float_to_e8m0`` fallback: NaN -> 0xFF, ±Inf -> 0xFE, ±0 -> 0, else the exponent byte of the
    float32 bits (``bits >> 23`` kept to 8 bits, so the sign drops out), +1 when the mantissa is nonzero
    unless the byte is 0xFE or the input is a subnormal at or below 2**-127."""
    bits = x.astype(np.float32).view(np.uint32)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7F_FFFF
    up = (mantissa > 0) & (exponent != 0xFE) & ~((exponent == 0) & (mantissa <= 0x40_0000))
    byte = exponent + up
    byte = np.where((bits & 0x7FFF_FFFF) == 0, 0, byte)
    byte = np.where(np.isinf(x), 0xFE, byte)
    return np.where(np.isnan(x), 0xFF, byte).astype(np.uint8)


ORACLES: dict[str, tuple[tuple[str, str, str], Callable[[np.ndarray], np.ndarray]]] = {
    "torch": (("nearest_up", "min", "nonsaturating"), torch_cast),
    "ml_dtypes": (("nearest_up", "nan", "nonsaturating"), ml_cast),
    "transformer_engine": (("ceil", "min", "saturate"), transformer_engine),
}
"""Each oracle and the (rounding, zero, overflow) it implements."""


@pytest.mark.parametrize("oracle", sorted(ORACLES))
def test_oracle_on_wide_inputs(oracle: str, wide_x: np.ndarray, assert_codes_equal: Callable[..., None]) -> None:
    params, theirs = ORACLES[oracle]
    assert_codes_equal(e8m0(wide_x, *params), theirs(wide_x), wide_x, oracle)


@pytest.mark.parametrize("oracle", sorted(ORACLES))
def test_oracle_on_powers_of_two_midpoints_and_subnormals(oracle: str, assert_codes_equal: Callable[..., None]) -> None:
    params, theirs = ORACLES[oracle]
    assert_codes_equal(e8m0(SCALES, *params), theirs(SCALES), SCALES, oracle)


def float64_model(x: np.ndarray, rounding: str, zero: str, overflow: str) -> np.ndarray:
    """Exact model on values: e = floor(log2|x|) from frexp, then floor / ceil / ties-up nearest, clamped to bytes."""
    with np.errstate(invalid="ignore"):
        wide = x.astype(np.float64)
    magnitude = np.abs(np.where(np.isfinite(wide), wide, 1.0))
    fraction, exponent = np.frexp(np.where(magnitude > 0, magnitude, 1.0))  # magnitude = fraction * 2**exponent
    e = exponent - 1  # 2**e <= magnitude < 2**(e+1)
    exact = fraction == 0.5
    up = {"floor": np.zeros(e.shape, dtype=bool), "ceil": ~exact, "nearest_up": fraction >= 0.75}[rounding]
    byte = np.clip(e + up + 127, 0, 255)
    subnormal = magnitude < 2.0**-126  # ceil and nearest_up: above 2**-127 gives 2**-126 (see the deviation test)
    if rounding != "floor":
        byte = np.where(subnormal, (magnitude > 2.0**-127).astype(np.int64), byte)
    byte = np.where(byte > 254, 254 if overflow == "saturate" else 255, byte)
    byte = np.where(np.isinf(wide), 254 if overflow == "saturate" else 255, byte)
    byte = np.where(magnitude == 0, 0, byte)
    if zero == "nan":
        byte = np.where(np.signbit(wide) | (wide == 0), 255, byte)
    return np.where(np.isnan(wide), 255, byte).astype(np.uint8)


@pytest.mark.parametrize("overflow", OVERFLOW_POLICIES)
@pytest.mark.parametrize("zero", E8M0_ZERO_POLICIES)
@pytest.mark.parametrize("rounding", E8M0_ROUNDINGS)
def test_every_parameter_set_matches_the_float64_model(
    rounding: str, zero: str, overflow: str, assert_codes_equal: Callable[..., None]
) -> None:
    x = np.concatenate([SCALES, (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)])
    ours = e8m0(x, rounding, zero, overflow)
    assert_codes_equal(ours, float64_model(x, rounding, zero, overflow), x, "the float64 model")


def test_named_deviation_subnormal_nearest_up_rounds_up() -> None:
    """2**-127 * (1 + 2**-22) is nearer 2**-127 (byte 0) than 2**-126 (byte 1); torch, ml_dtypes and we give 1."""
    x = np.array([0x0040_0001, 0x005F_FFFF], dtype=np.uint32).view(np.float32)
    assert np.all(np.abs(x.astype(np.float64) - 2.0**-127) < np.abs(x.astype(np.float64) - 2.0**-126))
    np.testing.assert_array_equal(e8m0(x, "nearest_up", "min", "nonsaturating"), [1, 1])
    np.testing.assert_array_equal(torch_cast(x), [1, 1])
    np.testing.assert_array_equal(ml_cast(x), [1, 1])


ANCHORS = [
    # (x, floor, ceil, nearest_up) with zero="min", overflow="saturate"
    (1.0, 0x7F, 0x7F, 0x7F),
    (1.5, 0x7F, 0x80, 0x80),
    (1.4999999, 0x7F, 0x80, 0x7F),
    (0.75, 0x7E, 0x7F, 0x7F),
    (3.0, 0x80, 0x81, 0x81),
    (1.0000001, 0x7F, 0x80, 0x7F),
    (-2.0, 0x80, 0x80, 0x80),  # zero="min" ignores the sign
    (0.0, 0x00, 0x00, 0x00),
    (-0.0, 0x00, 0x00, 0x00),
    (2.0**-127, 0x00, 0x00, 0x00),
    (2.0**-140, 0x00, 0x00, 0x00),
    (2.0**-126, 0x01, 0x01, 0x01),
    (2.0**127, 0xFE, 0xFE, 0xFE),
    (3.4028234663852886e38, 0xFE, 0xFE, 0xFE),  # float32 max: saturated
    (float("inf"), 0xFE, 0xFE, 0xFE),
    (float("-inf"), 0xFE, 0xFE, 0xFE),
    (float("nan"), 0xFF, 0xFF, 0xFF),
]


@pytest.mark.parametrize(("value", "floor", "ceil", "nearest_up"), ANCHORS)
def test_anchor(value: float, floor: int, ceil: int, nearest_up: int) -> None:
    x = np.array([value], dtype=np.float32)
    for rounding, expected in (("floor", floor), ("ceil", ceil), ("nearest_up", nearest_up)):
        assert e8m0(x, rounding, "min", "saturate")[0] == expected, rounding


def test_nan_zero_policy_and_nonsaturating_overflow() -> None:
    x = np.array([0.0, -0.0, -1.0, -np.inf, 2.0**-149, np.inf, 2.0**127 * 1.5, 1.0], dtype=np.float32)
    np.testing.assert_array_equal(
        e8m0(x, "nearest_up", "nan", "nonsaturating"), [0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0xFF, 0xFF, 0x7F]
    )


@pytest.mark.parametrize("rounding", E8M0_ROUNDINGS)
def test_round_trip_through_decode(rounding: str) -> None:
    codes = np.arange(255, dtype=np.uint8)
    values = decode.e8m0(codes)["values"]
    for zero in E8M0_ZERO_POLICIES:
        np.testing.assert_array_equal(e8m0(values, rounding, zero, "nonsaturating"), codes)


def test_float16_input_equals_float32_widened() -> None:
    x16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    for rounding in E8M0_ROUNDINGS:
        np.testing.assert_array_equal(
            e8m0(x16, rounding, "nan", "saturate"), e8m0(x16.astype(np.float32), rounding, "nan", "saturate")
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rounding": "even"}, r"rounding='even', but rounding must be one of \['floor', 'ceil', 'nearest_up'\]"),
        ({"rounding": "rne"}, r"rounding='rne'"),
        ({"zero": "zero"}, r"zero='zero', but zero must be one of \['min', 'nan'\]"),
        (
            {"overflow": "satfinite"},
            r"overflow='satfinite', but overflow must be one of \['saturate', 'nonsaturating'\]",
        ),
    ],
)
def test_rejects_unknown_params(kwargs: dict[str, str], message: str) -> None:
    params = {"rounding": "ceil", "zero": "min", "overflow": "saturate", **kwargs}
    with pytest.raises(ValueError, match=message):
        cast.e8m0(np.ones(2, np.float32), **params)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8])
def test_rejects_other_dtypes(dtype: type) -> None:
    with pytest.raises(TypeError, match=rf"x\.dtype={np.dtype(dtype)}"):
        cast.e8m0(np.zeros(2, dtype=dtype), rounding="ceil", zero="min", overflow="saturate")


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3, 4)])
def test_output_shape_and_dtype(shape: tuple[int, ...]) -> None:
    codes = cast.e8m0(np.full(shape, 4.0, np.float32), rounding="floor", zero="min", overflow="saturate")["codes"]
    assert codes.shape == shape and codes.dtype == np.uint8 and np.all(codes == 0x81)


def test_crosses_chunk_boundaries() -> None:
    x = np.random.default_rng(3).standard_normal(200_003).astype(np.float32) * np.float32(1e3)
    whole = e8m0(x, "nearest_up", "nan", "saturate")
    pieces = [e8m0(part, "nearest_up", "nan", "saturate") for part in np.split(x, [1, 65_537, 131_075])]
    np.testing.assert_array_equal(whole, np.concatenate(pieces))
