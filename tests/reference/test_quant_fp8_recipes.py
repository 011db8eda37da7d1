"""``reference.quant.fp8`` / ``fp8_block`` and ``reference.dequant.fp8``: hand-computed anchors, TE's edge cases,
and second oracles written here with torch (float32 division and multiply, ``clamp`` then ``Tensor.to(float8)``,
the TE Python references' recipe) and with plain Python loops over blocks and histories.

The torch oracle clamps to ±fp8_max before casting, as TE's Python references do, so that non-saturating
casts (E5M2 in every torch version) cannot turn overflow into Inf; NaN elements are compared as "some NaN
code", since the contract leaves the sign of a NaN product free.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reference.dequant import fp8_block as dequant_block
from reference.dequant import fp8_tensor as dequant_tensor
from reference.quant import fp8_block, fp8_delayed, fp8_tensor
from reference.quant.fp8 import scale_from_amax

F32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)
BF16_MAX = 3.3895313892515355e38
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
TORCH_FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
FORMATS = tuple(FP8_MAX)


def bits(*patterns: int) -> np.ndarray:
    return np.array(patterns, dtype=np.uint32).view(np.float32)


def random_input(shape: tuple[int, ...], seed: int, specials: bool = True) -> np.ndarray:
    """Normal values over several binades, with NaN, ±Inf, ±0 and subnormals sprinkled in."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, shape))).astype(F32)
    if specials and x.size:
        flat = x.reshape(-1)
        where = rng.integers(0, x.size, max(1, x.size // 50))
        flat[where] = rng.choice(
            bits(0x7FC00000, 0x7F802000, 0x80000000, 0x00000001, 0x7F800000, 0xFF800000), where.size
        )
    return x


def torch_codes(x: np.ndarray, scale: np.ndarray, format: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes of ``clamp(fl32(x * scale), ±max).to(format)`` by torch, and the NaN mask of the product."""
    product = torch.from_numpy(np.ascontiguousarray(x, dtype=F32)) * torch.from_numpy(np.asarray(scale, dtype=F32))
    fp8_max = FP8_MAX[format]
    codes = product.clamp(-fp8_max, fp8_max).to(TORCH_FP8[format]).view(torch.uint8).numpy()
    return codes, torch.isnan(product).numpy()


def assert_codes(got: np.ndarray, expected: np.ndarray, nan: np.ndarray, format: str) -> None:
    """Equal codes where the product is a number; a NaN code (0x7F/0xFF, any sign) where it is NaN."""
    __tracebackhide__ = True
    assert got.shape == expected.shape
    assert np.array_equal(got[~nan], expected[~nan])
    assert np.all((got[nan] & 0x7F) == 0x7F)


# %% The scale rule


@pytest.mark.parametrize(
    ("amax", "kwargs", "scale"),
    [
        (448.0, {}, 1.0),
        (3.0, {}, float(F32(448) / F32(3))),  # 149.33333
        (3.0, {"power_2_scale": True}, 128.0),
        (0.0, {}, 1.0),  # amax 0: scale 1, not Inf
        (math.inf, {}, 1.0),
        (math.nan, {}, 1.0),
        (math.inf, {"power_2_scale": True}, 1.0),  # the kernel; TE's Python reference gives 0 here
        (0.0, {"epsilon": 1e-4}, float(F32(448) / F32(1e-4))),
        (2e-5, {"epsilon": 1e-4}, float(F32(448) / F32(1e-4))),
        (1e-40, {}, FLT_MAX),  # 448 / subnormal overflows: value_for_inf
        (1e-40, {"value_for_inf": BF16_MAX}, BF16_MAX),
        (1e-40, {"power_2_scale": True}, 2.0**127),
        (1.3e-36, {}, FLT_MAX),  # a normal amax whose quotient still overflows
        (FLT_MAX, {}, float(F32(448) / F32(FLT_MAX))),
    ],
)
def test_scale_from_amax(amax: float, kwargs: dict, scale: float) -> None:
    args = {"power_2_scale": False, "epsilon": 0.0, "value_for_inf": FLT_MAX, **kwargs}
    got = scale_from_amax(np.array([amax], dtype=F32), 448.0, **args)
    assert got.view(np.uint32)[0] == np.array([scale], dtype=F32).view(np.uint32)[0]


def test_scale_from_amax_against_torch_division() -> None:
    """Every finite positive amax of a sweep of float32 patterns: torch's float32 division, then the inf rule."""
    amax = np.random.default_rng(3).integers(1, 0x7F800000, 1 << 16, dtype=np.uint64).astype(np.uint32).view(F32)
    for fp8_max in FP8_MAX.values():
        expected = torch.tensor(fp8_max, dtype=torch.float32) / torch.from_numpy(amax)
        expected = torch.where(torch.isinf(expected), torch.tensor(FLT_MAX), expected).numpy()
        got = scale_from_amax(amax, fp8_max, power_2_scale=False, epsilon=0.0, value_for_inf=FLT_MAX)
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
        pow2 = scale_from_amax(amax, fp8_max, power_2_scale=True, epsilon=0.0, value_for_inf=FLT_MAX)
        assert np.array_equal(pow2, np.exp2(np.floor(np.log2(expected.astype(np.float64)))).astype(F32))


# %% Current scaling


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("power_2_scale", [False, True])
@pytest.mark.parametrize("shape", [(7, 33), (2, 5, 9), (40,)])
def test_fp8_tensor_against_torch(format: str, power_2_scale: bool, shape: tuple[int, ...]) -> None:
    x = random_input(shape, seed=len(shape))
    out = fp8_tensor(x, format=format, power_2_scale=power_2_scale, x_dtype="float32")
    finite = np.abs(x[~np.isnan(x)])
    assert out["amax"][0] == finite.max()
    amax = torch.tensor(out["amax"][0])
    scale = torch.tensor(1.0) if torch.isinf(amax) else torch.tensor(FP8_MAX[format]) / amax
    if power_2_scale:
        scale = torch.tensor(2.0 ** math.floor(math.log2(scale.item())))
    assert out["scale"][0] == scale.item()
    assert out["scale_inv"][0] == (torch.tensor(1.0) / scale).item()
    codes, nan = torch_codes(x, out["scale"], format)
    assert_codes(out["data"], codes, nan, format)
    assert np.array_equal(out["columnwise_data"], np.moveaxis(out["data"], -1, 0))


def test_fp8_tensor_signalling_nan_is_ignored_by_the_amax() -> None:
    """float16 0x7C01 widens to the float32 signalling NaN 0x7F802000, which NumPy's fmax reduction mishandles."""
    x = np.zeros((2, 61, 116), dtype=np.float16)
    x.reshape(-1)[[14, 101]] = 1.0
    x.view(np.uint16).reshape(-1)[[27, 103]] = 0x7C01
    out = fp8_tensor(x, format="float8_e4m3fn", x_dtype="float16", usage="rowwise")
    assert out["amax"][0] == 1.0 and out["scale"][0] == 448.0
    assert out["data"].reshape(-1)[14] == 0x7E and out["data"].reshape(-1)[27] & 0x7F == 0x7F


def test_fp8_tensor_empty_and_usage() -> None:
    empty = fp8_tensor(np.zeros((0, 3), dtype=F32), format="float8_e4m3fn", epsilon=1e-4)
    assert empty["amax"][0] == 0 and empty["scale"][0] == F32(448) / F32(1e-4)
    assert empty["data"].shape == (0, 3) and empty["columnwise_data"].shape == (3, 0)
    x = random_input((3, 4), seed=1)
    assert set(fp8_tensor(x, format="float8_e5m2", usage="rowwise")) == {"amax", "scale", "scale_inv", "data"}
    assert "data" not in fp8_tensor(x, format="float8_e5m2", usage="columnwise")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"format": "float8_e4m3fnuz"}, ValueError, "format='float8_e4m3fnuz'"),
        ({"format": "float8_e4m3fn", "epsilon": math.nan}, ValueError, "epsilon=nan"),
        ({"format": "float8_e4m3fn", "x_dtype": "bfloat16"}, ValueError, "not bfloat16 values"),
        ({"format": "float8_e4m3fn", "inf_scale": "bfloat16_max"}, ValueError, "inf_scale='bfloat16_max'"),
    ],
)
def test_fp8_tensor_errors(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        fp8_tensor(np.array([[1.1]], dtype=F32), **kwargs)


# %% Delayed scaling


def delayed_oracle(history: list[float], amax: float, old: float, *, algo: str, fused: bool, margin: int):
    """TE ``kernel`` / ``kernel_bulk`` transcribed with Python floats, after the atomic max into history[0]."""
    as_int = lambda v: int(np.array([v], dtype=F32).view(np.int32)[0])  # noqa: E731
    history = list(history)
    if as_int(history[0]) < as_int(amax):
        history[0] = amax
    last = history[0]
    if fused and last == 0:
        return history, old if not math.isinf(old) else FLT_MAX
    rolled = [0.0, *history[2:], last] if len(history) > 1 else [0.0]
    chosen = max([0.0] + [h for h in history if h == h]) if algo == "max" else last
    if math.isfinite(chosen) and chosen > 0:
        with np.errstate(over="ignore"):
            new = float(F32(math.ldexp(FP8_MAX["float8_e4m3fn"], -margin)) / F32(chosen))
    else:
        new = old
    return rolled, FLT_MAX if math.isinf(new) else new


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("margin", [0, 2])
def test_fp8_delayed_update_against_the_kernel_transcription(algo: str, fused: bool, margin: int) -> None:
    rng = np.random.default_rng(margin + 2 * fused)
    pool = [0.0, -0.0, 1.0, 5.0, -2.0, math.inf, 1e-40, 3e-39, 1e30, 0.25]
    for _ in range(200):
        length = int(rng.integers(1, 6))
        history = [float(rng.choice(pool)) for _ in range(length)]
        x = np.array([[float(rng.choice([0.0, 0.5, 7.0, math.nan, -3.0]))]], dtype=F32)
        old = float(rng.choice([1.0, 2.0, math.inf, 0.0]))
        out = fp8_delayed(
            x,
            np.array(history, dtype=F32),
            np.array([old], dtype=F32),
            format="float8_e4m3fn",
            amax_compute_algo=algo,
            margin=margin,
            update="fused" if fused else "unfused",
        )
        amax = 0.0 if math.isnan(x[0, 0]) else abs(float(x[0, 0]))
        rolled, new = delayed_oracle(history, amax, old, algo=algo, fused=fused, margin=margin)
        assert out["amax_history"].tolist() == [float(F32(v)) for v in rolled]
        assert out["scale"][0] == F32(new), (history, x, old)


def test_fp8_delayed_chained_steps_follow_the_history() -> None:
    """Three steps with amax 4, 8, 2 on a history of 2: the scale follows max over the last two amaxes."""
    history, scale = np.zeros(2, dtype=F32), np.ones(1, dtype=F32)
    scales = []
    for amax in (4.0, 8.0, 2.0):
        out = fp8_delayed(np.array([amax], dtype=F32), history, scale, format="float8_e4m3fn")
        history, scale = out["amax_history"], out["scale"]
        scales.append(float(scale[0]))
    assert scales == [112.0, 56.0, 56.0]
    assert history.tolist() == [0.0, 2.0]


# %% Blockwise


def block_oracle(x: np.ndarray, format: str, block: str, power_2_scale: bool, value_for_inf: float):
    """Python loops over 128-blocks: amax, scale via torch division, cast via torch clamp + to(fp8)."""
    m, k = x.shape
    rows = (1, 128) if block == "1x128" else (128, 128)
    out = {}
    for name, (bm, bk) in (("row", rows), ("col", rows[::-1])):
        scales = np.ones((-(-m // bm), -(-k // bk)), dtype=F32)
        for i in range(scales.shape[0]):
            for j in range(scales.shape[1]):
                tile = x[i * bm : (i + 1) * bm, j * bk : (j + 1) * bk]
                tile = np.abs(tile[~np.isnan(tile)])
                amax = float(tile.max()) if tile.size else 0.0
                if amax == 0 or math.isinf(amax):
                    continue
                scale = (torch.tensor(FP8_MAX[format]) / torch.tensor(amax, dtype=torch.float32)).item()
                scale = value_for_inf if math.isinf(scale) else scale
                if power_2_scale:
                    scale = 2.0 ** math.floor(math.log2(float(F32(scale))))
                scales[i, j] = scale
        expanded = np.repeat(np.repeat(scales, bm, 0), bk, 1)[:m, :k]
        out[name] = (scales, *torch_codes(x, expanded, format))
    return out


@pytest.mark.parametrize("block", ["1x128", "128x128"])
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("power_2_scale", [True, False])
def test_fp8_block_against_loops(block: str, format: str, power_2_scale: bool) -> None:
    x = random_input((131, 260), seed=7)
    x[:128, 128:256] = 0  # a zero block
    x[5, 3] = 3e4  # one outlier in a block
    x[130, :] = np.nan  # an all-NaN row (tail of the column blocks)
    x[129, 257] = 1e-40  # a subnormal in a ragged tail
    out = fp8_block(x, format=format, block=block, power_2_scale=power_2_scale, x_dtype="float32")
    oracle = block_oracle(x, format, block, power_2_scale, FLT_MAX)
    row_scales, row_codes, nan = oracle["row"]
    col_scales, col_codes, col_nan = oracle["col"]
    assert_codes(out["data"], row_codes, nan, format)
    assert_codes(out["columnwise_data"], np.ascontiguousarray(col_codes.T), col_nan.T, format)
    inverse = lambda s: (torch.tensor(1.0) / torch.from_numpy(s)).numpy()  # noqa: E731
    if block == "1x128":
        assert out["scale_inv"].shape == (3, 132) and out["columnwise_scale_inv"].shape == (2, 260)
        assert np.array_equal(out["scale_inv"][:, :131], inverse(row_scales).T)
        assert np.array_equal(out["columnwise_scale_inv"][:, :260], inverse(col_scales))
        assert out["scale_inv_padding"][:, 131:].all() and not out["scale_inv_padding"][:, :131].any()
    else:
        assert np.array_equal(out["columnwise_data"], out["data"].T)
        assert out["scale_inv"].shape == (2, 4) and out["columnwise_scale_inv"].shape == (3, 4)
        assert np.array_equal(out["scale_inv"][:, :3], inverse(row_scales))
        assert np.array_equal(out["columnwise_scale_inv"][:, :2], inverse(row_scales).T)
    zero_block_inverse = out["scale_inv"][1, 0] if block == "1x128" else out["scale_inv"][0, 1]
    assert zero_block_inverse == 1.0


def test_fp8_block_value_for_inf_is_the_input_dtype_max() -> None:
    tiny = bits(0x00080000).reshape(1, 1)  # 2^-130, a bfloat16 and float32 value
    for x_dtype, expected in (("bfloat16", BF16_MAX), ("float32", FLT_MAX)):
        out = fp8_block(tiny, format="float8_e4m3fn", power_2_scale=False, x_dtype=x_dtype, usage="rowwise")
        assert out["scale_inv"][0, 0] == F32(1) / F32(expected)
    pow2 = fp8_block(tiny, format="float8_e4m3fn", x_dtype="bfloat16", usage="columnwise")
    assert pow2["columnwise_scale_inv"][0, 0].view(np.uint32) == 0x00400000  # 2^-127


def test_fp8_block_shapes_for_empty_and_batched_inputs() -> None:
    for shape in [(0, 5), (5, 0), (0, 0)]:
        out = fp8_block(np.zeros(shape, dtype=F32), format="float8_e4m3fn")
        assert out["data"].shape == shape and out["columnwise_data"].shape == shape[::-1]
        assert out["scale_inv"].size == 0 and out["columnwise_scale_inv"].size == 0
    x = random_input((2, 3, 130), seed=5)
    batched = fp8_block(x, format="float8_e4m3fn", block="128x128")
    flat = fp8_block(x.reshape(6, 130), format="float8_e4m3fn", block="128x128")
    assert batched["columnwise_data"].shape == (130, 2, 3)
    assert np.array_equal(batched["columnwise_data"].reshape(130, 6), flat["columnwise_data"])
    one = fp8_block(x[0, 0], format="float8_e4m3fn")
    assert one["data"].shape == (130,) and one["scale_inv"].shape == (2, 4)


# %% Dequantization


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
def test_dequant_tensor_against_torch(format: str, out_dtype: str) -> None:
    codes = np.arange(256, dtype=np.uint8)
    for scale in (0.1, 3.0, 1e-30, 7e33):
        got = dequant_tensor(codes, np.array([scale], dtype=F32), format=format, out_dtype=out_dtype)["x"]
        values = torch.from_numpy(codes).view(TORCH_FP8[format]).float() * torch.tensor(scale, dtype=torch.float32)
        expected = values.to(getattr(torch, out_dtype)).float().numpy()
        assert np.array_equal(got, expected, equal_nan=True)
        number = ~np.isnan(expected)
        assert np.array_equal(np.signbit(got[number]), np.signbit(expected[number]))  # -0 stays -0


@pytest.mark.parametrize("block", ["1x128", "128x128"])
def test_dequant_block_inverts_the_quantizer_within_fp8_precision(block: str) -> None:
    x = random_input((130, 257), seed=11, specials=False)
    q = fp8_block(x, format="float8_e4m3fn", block=block)
    for operand, data, scale in (
        ("rowwise", q["data"], q["scale_inv"]),
        ("columnwise", q["columnwise_data"], q["columnwise_scale_inv"]),
    ):
        y = dequant_block(data, scale, format="float8_e4m3fn", block=block, operand=operand)["x"]
        assert y.shape == x.shape
        # E4M3 keeps 3 mantissa bits: relative error <= 2^-4 in the normal range, absolute below it.
        assert np.all(np.abs(y - x) <= np.maximum(np.abs(x) * 2.0**-4, 2.0**-9 * scale.max()))


def test_dequant_block_reads_no_padding_and_checks_the_layout() -> None:
    data = np.full((3, 2), 0x38, dtype=np.uint8)
    scale = np.array([[2.0, 4.0, 8.0, np.nan]], dtype=F32)
    assert dequant_block(data, scale, format="float8_e4m3fn")["x"].tolist() == [[2.0, 2.0], [4.0, 4.0], [8.0, 8.0]]
    with pytest.raises(ValueError, match=r"scale_inv.shape=\(3, 1\).*must have shape \[1, 4\]"):
        dequant_block(data, scale.reshape(-1)[:3].reshape(3, 1), format="float8_e4m3fn")
