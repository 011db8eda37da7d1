"""``reference.quant.qdq`` and ``reference.dequant.qdq`` (contracts ``quant.qdq``, ``dequant.qdq``) against
independent float64 models of the ONNX formulas, on every float16 x (all 65,536 patterns) and a spread of
scales: integer outputs are ``clip(rint(fl32(x / s)) + zp)`` computed element by element in Python; blocked
layouts against an explicit loop; float8 / FP4 outputs against ``reference.cast`` of the float32 quotient;
dequantization ``precision="output"`` against one rounding of the exact float64 product of the rounded
factors, and ``"float32"`` against two roundings."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from reference._opmath import to_dtype
from reference.cast import fp8
from reference.dequant import qdq as dequantize
from reference.quant import qdq as quantize
from reference.quant.qdq import INTEGER_RANGES

ALL_F16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(256, 256)
SCALES = (1.0, 0.5, 1.1, 3.0, 1e-3, 7.0e4)


def _int_model(x: np.ndarray, scale: float, zp: int, dtype: str, nan: str) -> np.ndarray:
    bits, low, high = INTEGER_RANGES[dtype]
    with np.errstate(invalid="ignore", over="ignore"):  # signaling NaN patterns; quotients beyond float32
        q = (x.astype(np.float64) / np.float64(np.float32(scale))).astype(np.float32).astype(np.float64)
    out = np.empty(x.shape, np.int64)
    for index, value in np.ndenumerate(q):
        if np.isnan(value):
            out[index] = zp if nan == "zero_point" else low
        elif np.isinf(value):
            out[index] = high if value > 0 else low
        else:
            out[index] = min(max(int(np.rint(value)) + zp, low), high)
    return out & ((1 << bits) - 1)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4", "uint4", "int16", "uint16"])
@pytest.mark.parametrize("scale", SCALES)
def test_integer_outputs_round_half_even_then_add_the_zero_point_and_saturate(dtype, scale):
    bits, low, high = INTEGER_RANGES[dtype]
    zp = high // 3 if low == 0 else -(high // 3)
    nan = "minimum" if scale > 1 else "zero_point"
    codes = np.array([[zp & ((1 << bits) - 1)]], np.uint16 if bits == 16 else np.uint8)
    name = "y_zero_point16" if bits == 16 else "y_zero_point"
    got = quantize(ALL_F16, np.array([[scale]], np.float32), **{name: codes}, output_dtype=dtype, nan=nan)
    assert np.array_equal(got["y16" if bits == 16 else "y"], _int_model(ALL_F16, scale, zp, dtype, nan))


def test_reciprocal_multiply_moves_a_tie_that_true_divide_keeps():
    x, scale, zp = np.array([[8.25]], np.float32), np.array([[1.1]], np.float32), np.zeros((1, 1), np.uint8)
    divide = quantize(x, scale, zp, output_dtype="uint8", division="true_divide")["y"]
    multiply = quantize(x, scale, zp, output_dtype="uint8", division="reciprocal_multiply")["y"]
    assert (int(divide[0, 0]), int(multiply[0, 0])) == (8, 7)  # 7.5 ties to even 8; 7.4999995 rounds to 7


@pytest.mark.parametrize(("axis", "block_size"), [(0, 2), (1, 3), (1, 1)])
def test_blocked_scales_cover_blocks_along_axis_with_a_short_last_block(axis, block_size):
    rng = np.random.default_rng(axis * 10 + block_size)
    x = rng.normal(0, 50, (5, 7)).astype(np.float32)
    shape = (-(-5 // block_size), 7) if axis == 0 else (5, -(-7 // block_size))
    scale = rng.uniform(0.5, 4, shape).astype(np.float32)
    zp = rng.integers(0, 256, shape).astype(np.uint8)
    got = quantize(x, scale, zp, output_dtype="uint8", granularity="blocked", axis=axis, block_size=block_size)["y"]
    for (i, j), value in np.ndenumerate(x):
        s = (i // block_size, j) if axis == 0 else (i, j // block_size)
        want = min(max(int(np.rint(np.float32(value / scale[s]))) + int(zp[s]), 0), 255)
        assert got[i, j] == want, (i, j)


@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"])
@pytest.mark.parametrize("saturate", [True, False])
def test_float8_outputs_cast_the_float32_quotient(format, saturate):
    scale = np.array([[1.1]], np.float32)
    got = quantize(ALL_F16, scale, output_dtype=format, saturate=saturate)["y"]
    with np.errstate(invalid="ignore"):
        quotient = (ALL_F16.astype(np.float32) / scale).astype(np.float32)
    want = fp8(quotient, format=format, overflow="saturate" if saturate else "nonsaturating")["codes"]
    assert np.array_equal(got, want)


def test_fp4_nan_gives_six_as_float4_md_says():
    x = np.array([[np.nan, -np.nan, np.inf, -7.0]], np.float32)
    assert quantize(x, np.ones((1, 1), np.float32), output_dtype="float4_e2m1fn")["y"].tolist() == [[7, 7, 7, 0xF]]


@pytest.mark.parametrize("output_dtype", ["float16", "bfloat16"])
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_dequantize_precision_output_rounds_once_and_float32_twice(output_dtype):
    codes = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    scale = np.array([[1.0 + 2.0**-11 + 2.0**-20]], np.float32)
    zp = np.array([[300]], np.uint16)
    kwargs = {"x16": codes, "x_zero_point16": zp, "input_dtype": "uint16", "output_dtype": output_dtype}
    once = dequantize(scale, **kwargs, precision="output")["y"]
    twice = dequantize(scale, **kwargs, precision="float32")["y"]
    d = codes.astype(np.float64) - 300
    if output_dtype == "float16":
        a, s = d.astype(np.float16).astype(np.float64), np.float64(np.float16(scale[0, 0]))
        want_once = (a * s).astype(np.float16).astype(np.float32)  # float64 product exact: one rounding
        want_twice = (d * np.float64(scale[0, 0])).astype(np.float32).astype(np.float16).astype(np.float32)
    else:
        bf = ml_dtypes.bfloat16
        a, s = d.astype(bf).astype(np.float64), np.float64(scale[0, 0].astype(bf))
        want_once = (a * s).astype(bf).astype(np.float32)
        want_twice = to_dtype((d * np.float64(scale[0, 0])).astype(np.float32), "bfloat16")
    assert np.array_equal(once.view(np.uint32), want_once.view(np.uint32))
    assert np.array_equal(twice.view(np.uint32), want_twice.view(np.uint32))
    assert not np.array_equal(once, twice)  # the two variants differ on these inputs


def test_quant_then_dequant_round_trips_every_uint8_code():
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    scale, zp = np.array([[0.25]], np.float32), np.array([[128]], np.uint8)
    y = dequantize(scale, x=codes, x_zero_point=zp, input_dtype="uint8")["y"]
    assert np.array_equal(quantize(y, scale, zp, output_dtype="uint8")["y"], codes)
