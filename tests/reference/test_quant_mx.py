"""``reference.quant.mx`` and ``reference.dequant.mx``: hand-computed cases, torchao's golden bytes, and
second oracles written independently of the reference's integer arithmetic.

The oracles: scale bytes from ``math.frexp`` in float64 (the rules as formulas over ``log2``), elements
through ml_dtypes' casts (clamped first, since its FP8 casts do not saturate) and torch's FP8 casts,
block maxima with NumPy.  They cover finite inputs; NaN, Inf and scale-0 handling (``edges``) is
pinned by the hand-computed cases, each with its source.
"""

from __future__ import annotations

import math
import zlib

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.dequant.mx import mx as dequant
from reference.formats import get_format
from reference.layout import scale_swizzle, scale_unswizzle
from reference.quant.mx import BLOCKS, EDGES, MX_FORMATS, SCALE_RULES, mx, scale_bytes

VECTORS = "tests/vectors/torchao018_to_mx_h100.npz"
EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float6_e2m3fn": 2, "float6_e3m2fn": 4, "float4_e2m1fn": 2}
ML_DTYPES = {
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
    "float6_e3m2fn": ml_dtypes.float6_e3m2fn,
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
}


def f32(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def block(*head: float, size: int = 32) -> np.ndarray:
    """One row of ``size`` float32 values: ``head`` then zeros."""
    row = np.zeros(size, dtype=np.float32)
    row[: len(head)] = head
    return row


def rowwise(x: np.ndarray, **params: str) -> tuple[np.ndarray, np.ndarray]:
    """(data, logical scale [M, K/32]) of a rowwise call."""
    out = mx(x, usage="rowwise", **params)
    rows, cols = int(np.prod(x.shape[:-1])), x.shape[-1]
    return out["data_rowwise"], out["scale_rowwise"][:rows, : cols // 32]


# %% Scale rules by hand


@pytest.mark.parametrize(
    ("format", "rule", "amax", "byte", "why"),
    [
        ("float8_e4m3fn", "rceil", 448.0, 127, "TE: 448 * fl32(1/448) rounds to 1.0: no carry"),
        ("float8_e4m3fn", "rceil", 449.0, 128, "TE: just above 448 rounds up to 2^1"),
        ("float8_e4m3fn", "rceil", 150.0, 126, "pytorch/ao#2035: ceil(log2(150/448)) = -1"),
        ("float8_e4m3fn", "floor", 150.0, 126, "floor(log2 150) - 8 = -1"),
        ("float8_e4m3fn", "ceil", 150.0, 127, "ceil(log2 150) - 8 = 0: ceil differs from rceil here"),
        ("float8_e4m3fn", "floor", 511.0, 127, "floor(log2 511) = 8: the block max lands in [256, 512)"),
        ("float8_e4m3fn", "floor", 512.0, 128, "a power of two moves up"),
        ("float8_e4m3fn", "ceil", 256.0, 127, "ceil: a power of two stays"),
        ("float8_e4m3fn", "ceil", 257.0, 128, "ceil: anything above a power of two moves up"),
        ("float8_e4m3fn", "even", 480.0, 127, "even: 1.875 * 2^8 rounds to 1.875 at 3+1 bits, no carry"),
        ("float8_e4m3fn", "even", 496.0, 128, "even: 1.9375 * 2^8 carries to 2^9"),
        ("float8_e4m3fn", "floor", 0.0, 0, "a zero block gets scale 0 (2^-127)"),
        ("float8_e4m3fn", "rceil", 0.0, 0, "a zero block gets scale 0"),
        ("float8_e5m2", "floor", 57344.0, 127, "E5M2 emax 15"),
        ("float8_e5m2", "rceil", 57344.0, 127, "57344 * fl32(1/57344) = 1"),
        ("float6_e2m3fn", "rceil", 7.5, 127, "E2M3 max 7.5"),
        ("float6_e2m3fn", "rceil", 7.6, 128, ""),
        ("float6_e3m2fn", "floor", 28.0, 127, "E3M2 emax 4: floor(log2 28) = 4"),
        ("float4_e2m1fn", "floor", 6.0, 127, "E2M1 emax 2"),
        ("float4_e2m1fn", "floor", 7.9, 127, "floor keeps 7.9 at scale 1 (its elements saturate to 6)"),
        ("float4_e2m1fn", "rceil", 6.0, 127, "6 * fl32(1/6) rounds to 1.0"),
        ("float4_e2m1fn", "rceil", 6.01, 128, ""),
        ("float4_e2m1fn", "even", 6.0, 127, "even rounds amax at the element's 1 mantissa bit: 1.5 * 4 stays"),
        ("float4_e2m1fn", "even", 7.0, 128, "1.75 * 4 ties up to 2 * 4: carries"),
        ("float4_e2m1fn", "floor", 7.0, 127, "floor keeps it (7 saturates to 6)"),
    ],
)
def test_scale_rule_by_hand(format: str, rule: str, amax: float, byte: int, why: str) -> None:
    bits = np.array([amax], dtype=np.float32).view(np.uint32).astype(np.int64)
    for edges in EDGES:
        got = int(scale_bytes(bits, format=format, scale_rule=rule, edges=edges)[0])
        assert got == byte, f"{format} {rule} amax={amax} ({edges}): scale={got}, but should be {byte} ({why})"


@pytest.mark.parametrize("format", MX_FORMATS)
def test_rceil_multiply_and_divide_round_up_alike(format: str) -> None:
    """TE multiplies amax by fl32(1/max), torchao 0.18 divides by max: the rounded-up power of two is the same.

    The reciprocal is correctly rounded and above 1/max for every MX max, and a float32 amax is never within
    half an ulp above max * 2^j, so neither rounding can cross a power of two alone.  Checked once over every
    finite float32 amax for all five formats (2^31 inputs, 0 differences, 101 s); here on every bfloat16
    amax, random float32 ones and a window around each max * 2^j, the subnormal range included.  (torchao
    0.18's float32 log2 then differs from the round-up on some of these: test_quant_mx_torchao.py.)
    """
    windows = [(np.float32(get_format(format).max_finite) * np.float32(2.0**j)).view(np.uint32) for j in range(-133, 1)]
    around = (np.array(windows, dtype=np.int64)[:, None] + np.arange(-8, 9)).ravel()
    rng = np.random.default_rng(5)
    amax = np.concatenate(
        [np.arange(0, 0x7F81, dtype=np.int64) << 16, rng.integers(0, 0x7F800001, 1 << 16), around.clip(0, None)]
    )
    te = scale_bytes(amax, format=format, scale_rule="rceil", edges="te")
    with np.errstate(over="ignore"):
        divided = amax.astype(np.uint32).view(np.float32) / np.float32(get_format(format).max_finite)
    bits = divided.view(np.uint32).astype(np.int64)
    exponent, mantissa = bits >> 23, bits & 0x7F_FFFF
    round_up = np.clip(exponent + np.where(exponent == 0, mantissa > 0x40_0000, mantissa != 0), 0, 254)
    assert np.array_equal(te, round_up)


# %% Elements and edges by hand


def test_rceil_example_from_the_spec() -> None:
    x = np.stack([block(448.0, 1.0, -2.0, 0.5), block(449.0, 1.0, -2.0, 0.5)])
    data, scale = rowwise(x, format="float8_e4m3fn", scale_rule="rceil")
    assert scale.tolist() == [[127], [128]]
    assert data[0, :4].tolist() == [0x7E, 0x38, 0xC0, 0x30]
    assert data[1, :4].tolist() == [0x76, 0x30, 0xB8, 0x28]  # 224.5 -> 224, 0.5, -1, 0.25


def test_floor_saturates_the_block_max() -> None:
    """OCP floor: 480 has floor(log2) = 8, scale 2^0, and 480 saturates to 448 (RNE would tie 464 to 448 too)."""
    data, scale = rowwise(block(480.0, -500.0, 464.0, 1.0)[None], format="float8_e4m3fn", scale_rule="floor")
    assert scale.tolist() == [[127]]
    assert data[0, :4].tolist() == [0x7E, 0xFE, 0x7E, 0x38]


def test_zero_block_keeps_signed_zeros() -> None:
    x = block(-0.0, 0.0, -0.0)[None]
    for rule in SCALE_RULES:
        data, scale = rowwise(x, format="float8_e4m3fn", scale_rule=rule)
        assert scale.tolist() == [[0]]
        assert data[0, :3].tolist() == [0x80, 0x00, 0x80]


def test_one_outlier_block_flushes_the_rest() -> None:
    """One 1e4 outlier sets the scale (rceil: ceil(log2(1e4 / 448)) = 5); 0.001 / 32 is far below the smallest
    E4M3 subnormal; 1e4 / 32 = 312.5 rounds to 320 (0x7A), 1 / 32 is 0x10, -3 / 32 is 0x9C."""
    data, scale = rowwise(block(1.0e4, 0.001, 1.0, -3.0)[None], format="float8_e4m3fn", scale_rule="rceil")
    assert scale.tolist() == [[132]]
    assert data[0, :4].tolist() == [0x7A, 0x00, 0x10, 0x9C]


def test_scale_zero_reciprocal_per_edges() -> None:
    """A block of tiny values (amax 2^-126) gets scale 0; te and torchao multiply by 2^127, torchao 0.18 floor by
    2^126 (its float32 scale is clamped to the smallest normal) and its rceil by 1.0."""
    x = block(2.0**-126, -(2.0**-127))[None]
    expected = {
        ("te", "floor"): [0x40, 0xB8],  # 2.0, -1.0
        ("torchao", "floor"): [0x40, 0xB8],
        ("torchao_018", "floor"): [0x38, 0xB0],  # 1.0, -0.5
        ("torchao_018", "rceil"): [0x00, 0x80],  # x * 1.0: +0, -0
        ("te", "rceil"): [0x40, 0xB8],
    }
    for (edges, rule), codes in expected.items():
        data, scale = rowwise(x, format="float8_e4m3fn", scale_rule=rule, edges=edges)
        assert scale.tolist() == [[0]], (edges, rule)
        assert data[0, :2].tolist() == codes, (edges, rule)


def test_inf_and_nan_per_edges() -> None:
    """Row 0: Inf with finite values; row 1: NaN with finite values (E4M3, floor and rceil)."""
    x = np.stack([block(np.inf, 2.0**127, 1.0), block(np.nan, 2.0, -np.nan)])
    # te: Inf saturates the scale to 254 and itself to 448; NaN is ignored by the amax and gives 0x7F (both signs).
    data, scale = rowwise(x, format="float8_e4m3fn", scale_rule="floor", edges="te")
    assert scale[:, 0].tolist() == [254, 128 - 8]  # row 1: amax 2.0, exponent field 128
    assert data[0, :3].tolist() == [0x7E, 0x38, 0x00]  # Inf -> 448; 2^127 * 2^-127 = 1.0; 2^-127 -> 0
    assert data[1, :3].tolist() == [0x7F, 0x78, 0x7F]  # 2.0 * 2^7 = 256
    # torchao: NaN and Inf both give 0xFF; the elements are don't-care (written as 0).
    out = mx(x, format="float8_e4m3fn", scale_rule="floor", edges="torchao")
    assert out["scale_rowwise"][:2, 0].tolist() == [255, 255]
    assert out["data_rowwise_dont_care"].all() and not out["data_rowwise"].any()
    # torchao 0.18: NaN -> 0xFF; Inf -> the exponent field's arithmetic (255 - 8 = 247) under floor, 254 under rceil.
    for rule, inf_byte in (("floor", 247), ("ceil", 247), ("even", 247), ("rceil", 254)):
        data, scale = rowwise(x, format="float8_e4m3fn", scale_rule=rule, edges="torchao_018")
        assert scale[:, 0].tolist() == [inf_byte, 255], rule
        assert data[0, 0] == 0x7E, rule  # Inf saturates
    data, scale = rowwise(x, format="float4_e2m1fn", scale_rule="floor", edges="torchao_018")
    assert scale[0, 0] == 255 - 2


def test_all_nan_block_under_te_has_amax_zero() -> None:
    x = np.full((1, 32), np.nan, dtype=np.float32)
    data, scale = rowwise(x, format="float4_e2m1fn", scale_rule="rceil", edges="te")
    assert scale.tolist() == [[0]]
    assert (data == 0x77).all()  # +6 (code 7) twice per byte: FP4 has no NaN


def test_fp4_packs_low_nibble_first() -> None:
    data, _ = rowwise(block(1.0, -6.0, 3.0, 0.0, 0.5)[None], format="float4_e2m1fn", scale_rule="floor")
    assert data.shape == (1, 16)
    assert data[0, :3].tolist() == [0xF2, 0x05, 0x01]


def test_fp6_one_code_per_byte() -> None:
    data, _ = rowwise(block(7.5, -7.5, 0.125)[None], format="float6_e2m3fn", scale_rule="floor")
    assert data[0, :3].tolist() == [0x1F, 0x3F, 0x01]


# %% Shapes and layouts


def test_padded_scale_shapes_and_dont_care_padding() -> None:
    x = np.ones((3, 64), dtype=np.float32)
    out = mx(x, format="float8_e4m3fn", scale_rule="floor", usage="rowwise")
    assert out["scale_rowwise"].shape == (128, 4)
    assert out["scale_rowwise_dont_care"][:3, :2].sum() == 0
    assert out["scale_rowwise_dont_care"].sum() == 128 * 4 - 6
    x = np.ones((64, 40), dtype=np.float32)
    out = mx(x, format="float8_e4m3fn", scale_rule="floor", usage="columnwise")
    assert out["scale_columnwise"].shape == (4, 128)
    assert out["scale_columnwise_dont_care"].sum() == 4 * 128 - 2 * 40
    assert out["data_columnwise"].shape == (64, 40)


def test_leading_dimensions_are_flattened() -> None:
    x = np.random.default_rng(0).standard_normal((2, 16, 64)).astype(np.float32)
    flat = mx(x.reshape(32, 64), format="float4_e2m1fn", scale_rule="rceil", usage="both")
    nested = mx(x, format="float4_e2m1fn", scale_rule="rceil", usage="both")
    assert nested["data_rowwise"].shape == (2, 16, 32)
    for name in ("data_rowwise", "data_columnwise"):
        assert np.array_equal(nested[name].reshape(32, 32), flat[name])
    for name in ("scale_rowwise", "scale_columnwise"):
        assert np.array_equal(nested[name], flat[name])


def test_swizzled_scales_are_the_swizzle_of_the_compact_ones() -> None:
    x = np.random.default_rng(1).standard_normal((160, 96)).astype(np.float32) * 100
    compact = mx(x, format="float8_e5m2", scale_rule="ceil", usage="both")
    swizzled = mx(x, format="float8_e5m2", scale_rule="ceil", usage="both", scale_layout="swizzled")
    rows = compact["scale_rowwise"][:160, :3]
    assert np.array_equal(swizzled["scale_rowwise"], scale_swizzle(rows)["swizzled"])
    cols = compact["scale_columnwise"][:5, :96]
    expected = scale_swizzle(np.ascontiguousarray(cols.T))["swizzled"]  # [128, 8]
    assert swizzled["scale_columnwise"].shape == (8, 128)
    assert np.array_equal(swizzled["scale_columnwise"].reshape(expected.shape), expected)
    assert not swizzled["scale_rowwise_dont_care"].any()
    back = scale_unswizzle(swizzled["scale_rowwise"])["scale"]
    assert np.array_equal(back[:160, :3], rows) and not back[160:].any() and not back[:, 3:].any()


def test_2d_tiles_share_one_scale_and_both_copies_agree() -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((64, 96)) * np.exp2(rng.integers(-20, 20, (64, 1)))).astype(np.float32)
    out = mx(x, format="float6_e3m2fn", scale_rule="even", usage="both", blocks="2d")
    assert np.array_equal(out["data_rowwise"], out["data_columnwise"])
    rows = out["scale_rowwise"][:64, :3]
    cols = out["scale_columnwise"][:2, :96]
    tiles = rows[::32]
    assert np.array_equal(rows, np.repeat(tiles, 32, axis=0))
    assert np.array_equal(cols, np.repeat(tiles, 32, axis=1))
    # The tile scale is the scale of the tile's amax.
    amax = np.abs(x).reshape(2, 32, 3, 32).max(axis=(1, 3))
    expected = scale_bytes(amax.view(np.uint32).astype(np.int64), format="float6_e3m2fn", scale_rule="even", edges="te")
    assert np.array_equal(tiles, expected)


@pytest.mark.parametrize(
    ("shape", "params", "error", "match"),
    [
        ((2, 40), {}, ValueError, r"x.shape=\(2, 40\).*K % 32 == 0"),
        ((40, 32), {"usage": "columnwise"}, ValueError, r"M % 32 == 0"),
        ((32, 40), {"blocks": "2d"}, ValueError, r"2d blocks needs K % 32 == 0"),
        ((32, 33), {"usage": "columnwise", "format": "float4_e2m1fn"}, ValueError, "K must be even"),
        ((32,), {}, ValueError, "at least 2 dimensions"),
        ((0, 32), {}, ValueError, "must not be empty"),
        ((1, 32), {"scale_rule": "nearest"}, ValueError, "scale_rule='nearest'"),
        ((1, 32), {"edges": "cuda"}, ValueError, "edges='cuda'"),
        ((1, 32), {"scale_layout": "blocked"}, ValueError, "scale_layout='blocked'"),
    ],
)
def test_bad_input(shape: tuple[int, ...], params: dict[str, str], error: type, match: str) -> None:
    kwargs = {"format": "float8_e4m3fn", "scale_rule": "floor", **params}
    with pytest.raises(error, match=match):
        mx(np.zeros(shape, dtype=np.float32), **kwargs)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint16])
def test_bad_dtype(dtype: type) -> None:
    with pytest.raises(TypeError, match=f"x.dtype={np.dtype(dtype)}"):
        mx(np.zeros((1, 32), dtype=dtype), format="float8_e4m3fn", scale_rule="floor")


# %% torchao 0.18 golden bytes (H100)


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(VECTORS) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.mark.parametrize("edges", EDGES)
@pytest.mark.parametrize(
    ("format", "rule", "scale_key", "data_key"),
    [
        ("float8_e4m3fn", "floor", "scale_FLOOR", "data_FLOOR"),
        ("float8_e4m3fn", "rceil", "scale_RCEIL", "data_RCEIL"),
        ("float4_e2m1fn", "floor", "fp4scale_FLOOR", "fp4data_FLOOR"),
    ],
)
def test_torchao_018_to_mx_bytes(
    golden: dict[str, np.ndarray], edges: str, format: str, rule: str, scale_key: str, data_key: str
) -> None:
    """torchao 0.18 ``to_mx`` on an H100 (bfloat16 input, every value finite): bit for bit under every edge
    policy (they differ only on NaN, Inf and scale 0, which these vectors do not contain)."""
    x = golden["x"]
    data, scale = rowwise(x, format=format, scale_rule=rule, edges=edges)
    assert np.array_equal(scale, golden[scale_key]), f"{int((scale != golden[scale_key]).sum())} scale bytes differ"
    assert np.array_equal(data, golden[data_key]), f"{int((data != golden[data_key]).sum())} data bytes differ"


def test_golden_input_is_bfloat16_and_finite(golden: dict[str, np.ndarray]) -> None:
    x = golden["x"]
    assert x.shape == (64, 256) and np.isfinite(x).all()
    assert not (x.view(np.uint32) & 0xFFFF).any()


# %% Second oracles: math.frexp scales, ml_dtypes and torch element casts


def oracle_scale(amax: float, format: str, rule: str) -> int:
    """The scale byte of a finite amax, in float64 from the rules' formulas."""
    fmt = get_format(format)
    if amax == 0:
        return 0
    mantissa, exponent = math.frexp(amax)  # amax = mantissa * 2**exponent, mantissa in [0.5, 1)
    if rule == "floor":
        power = exponent - 1
    elif rule == "ceil":
        power = exponent - 1 if mantissa == 0.5 else exponent
    elif rule == "even":  # round at mantissa_bits + 1 significant bits, ties away, then floor
        carry = 2 * mantissa >= 2 - 2.0 ** -(fmt.mantissa_bits + 1)
        power = exponent - 1 + carry
    else:
        descale = float(np.float32(amax) * (np.float32(1) / np.float32(fmt.max_finite)))
        if descale == 0:
            return 0
        mantissa, exponent = math.frexp(descale)
        return min(max((exponent - 1 if mantissa == 0.5 else exponent) + 127, 0), 254)
    return min(max(power - EMAX[format] + 127, 0), 254)


def oracle_codes(values: np.ndarray, scale: np.ndarray, format: str) -> np.ndarray:
    """ml_dtypes codes of ``values * 2**(127 - scale)`` (exact in float64), clamped to the format's max."""
    top = get_format(format).max_finite
    scaled = np.clip(values.astype(np.float64) * np.exp2(127.0 - scale), -top, top).astype(np.float32)
    return scaled.astype(ML_DTYPES[format]).view(np.uint8) & ((1 << get_format(format).bits) - 1)


def oracle(x: np.ndarray, format: str, rule: str, direction: str, blocks: str) -> tuple[np.ndarray, np.ndarray]:
    """(codes before packing, logical scale) for finite ``x [M, K]``."""
    magnitude = np.abs(x.astype(np.float64))
    rows, cols = x.shape
    if blocks == "2d":
        amax = magnitude.reshape(rows // 32, 32, cols // 32, 32).max(axis=(1, 3))
    elif direction == "rowwise":
        amax = magnitude.reshape(rows, cols // 32, 32).max(axis=2)
    else:
        amax = magnitude.reshape(rows // 32, 32, cols).max(axis=1)
    scale = np.vectorize(lambda a: oracle_scale(float(a), format, rule), otypes=[np.int64])(amax)
    if blocks == "2d":
        scale = np.repeat(scale, 32, axis=0) if direction == "rowwise" else np.repeat(scale, 32, axis=1)
    element = np.repeat(scale, 32, axis=1) if direction == "rowwise" else np.repeat(scale, 32, axis=0)
    return oracle_codes(x, element, format), scale


def sample(kind: str, shape: tuple[int, int], seed: int) -> np.ndarray:
    """Finite test inputs: random bfloat16 patterns, random float32 patterns (both with block-wise exponent
    spread), or normal values with zero blocks and one outlier per block."""
    rng = np.random.default_rng(seed)
    if kind == "bf16_bits":
        bits = rng.integers(0, 1 << 16, shape, dtype=np.uint32) << 16
        x = bits.view(np.float32)
    elif kind == "f32_bits":
        x = rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, (shape[0], 1)))).astype(np.float32)
        x[:, 32:64] = 0
        x[::3, 5] = 1e4
    return np.where(np.isfinite(x), x, np.float32(1.5))


@pytest.mark.parametrize("kind", ["bf16_bits", "f32_bits", "blocks"])
@pytest.mark.parametrize("rule", SCALE_RULES)
@pytest.mark.parametrize("format", MX_FORMATS)
def test_against_frexp_and_ml_dtypes(kind: str, rule: str, format: str) -> None:
    x = sample(kind, (64, 128), seed=zlib.crc32(f"{kind} {rule} {format}".encode()))
    out = mx(x, format=format, scale_rule=rule, usage="both")
    for direction in ("rowwise", "columnwise"):
        codes, scale = oracle(x, format, rule, direction, "1d")
        stored = out[f"scale_{direction}"][: scale.shape[0], : scale.shape[1]]
        assert np.array_equal(stored, scale), f"{direction} scales differ at {np.argwhere(stored != scale)[:3]}"
        data = out[f"data_{direction}"]
        if format == "float4_e2m1fn":
            data = np.stack([data & 0xF, data >> 4], axis=-1).reshape(codes.shape)
        bad = np.argwhere(data != codes)
        assert bad.size == 0, f"{direction}: {len(bad)} codes differ, first at {bad[:3].tolist()}"


@pytest.mark.parametrize("rule", SCALE_RULES)
@pytest.mark.parametrize("format", ["float8_e4m3fn", "float4_e2m1fn"])
def test_2d_against_frexp_and_ml_dtypes(rule: str, format: str) -> None:
    x = sample("bf16_bits", (64, 96), seed=7)
    out = mx(x, format=format, scale_rule=rule, usage="rowwise", blocks="2d")
    codes, scale = oracle(x, format, rule, "rowwise", "2d")
    assert np.array_equal(out["scale_rowwise"][:64, :3], scale)
    data = out["data_rowwise"]
    if format == "float4_e2m1fn":
        data = np.stack([data & 0xF, data >> 4], axis=-1).reshape(codes.shape)
    assert np.array_equal(data, codes)


@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_elements_against_torch(format: str) -> None:
    """torch 2.13's saturating ``.to(float8)`` (E5M2: clamped first) of ``x * 2**(127 - s)``."""
    x = sample("f32_bits", (32, 256), seed=3)
    data, scale = rowwise(x, format=format, scale_rule="rceil")
    factor = torch.from_numpy(np.exp2(127.0 - np.repeat(scale, 32, axis=1)).astype(np.float32))
    top = get_format(format).max_finite
    scaled = (torch.from_numpy(x).double() * factor.double()).float().clamp(-top, top)
    expected = scaled.to(getattr(torch, format)).view(torch.uint8).numpy()
    assert np.array_equal(data, expected)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    exponents=st.lists(st.integers(-110, 110), min_size=1, max_size=4),
    mantissas=st.lists(st.integers(0, (1 << 23) - 1), min_size=32, max_size=32),
    format=st.sampled_from(MX_FORMATS),
    rule=st.sampled_from(SCALE_RULES),
)
def test_scaled_block_max_lands_where_the_rule_says(
    exponents: list[int], mantissas: list[int], format: str, rule: str
) -> None:
    """Where the block's max lands after scaling, for blocks of normal values: floor in [2^emax, 2^(emax+1)),
    ceil in (2^(emax-1), 2^emax], rceil in (max/2, max] (up to the rounding of amax * fl32(1/max)), even below
    2^(emax+1); dequantizing gives finite values within half an element ulp of the block max."""
    x = np.array(
        [math.ldexp(1 + m / 2**23, exponents[i % len(exponents)]) for i, m in enumerate(mantissas)], dtype=np.float32
    )[None]
    _, scale = rowwise(x, format=format, scale_rule=rule)
    fmt = get_format(format)
    amax = float(np.abs(x).max())
    top = amax * 2.0 ** (127 - int(scale[0, 0]))
    emax = EMAX[format]
    slack = 1 + 2.0**-22
    expected = {
        "floor": 2.0**emax <= top < 2.0 ** (emax + 1),
        "ceil": 2.0 ** (emax - 1) < top <= 2.0**emax,
        "rceil": fmt.max_finite / 2 / slack < top <= fmt.max_finite * slack,
        "even": 2.0 ** (emax - 1) <= top < 2.0 ** (emax + 1),
    }
    assert expected[rule], f"{rule}: amax {amax} scaled to {top}"
    full = mx(x, format=format, scale_rule=rule)
    back = dequant(full["data_rowwise"], full["scale_rowwise"], format=format)["x"]
    assert np.isfinite(back).all()
    assert abs(float(np.abs(back).max()) - min(top, fmt.max_finite) * 2.0 ** (int(scale[0, 0]) - 127)) <= (
        amax * 2.0 ** -(fmt.mantissa_bits + 1)
    )


# %% dequant.mx


@pytest.mark.parametrize("layout", ["compact", "swizzled"])
@pytest.mark.parametrize("format", MX_FORMATS)
def test_dequant_inverts_quant_within_the_element_precision(format: str, layout: str) -> None:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((64, 96)) * np.exp2(rng.integers(-10, 10, (64, 1)))).astype(np.float32)
    out = mx(x, format=format, scale_rule="rceil", usage="both", scale_layout=layout)
    fmt = get_format(format)
    for usage in ("rowwise", "columnwise"):
        back = dequant(out[f"data_{usage}"], out[f"scale_{usage}"], format=format, usage=usage, scale_layout=layout)
        y = back["x"]
        assert y.shape == x.shape and y.dtype == np.float32
        # RNE error: half an ulp at m mantissa bits, or half the subnormal step 2^(1 - bias - m) of the block's scale.
        logical = out[f"scale_{usage}"]
        if layout == "swizzled":
            shape = logical.shape if usage == "rowwise" else logical.shape[::-1]
            logical = scale_unswizzle(logical.reshape(shape))["scale"]
            logical = logical if usage == "rowwise" else logical.T
        logical = logical[:64, :3] if usage == "rowwise" else logical[:2, :96]
        step = np.exp2(np.repeat(logical.astype(np.float64) - 127, 32, axis=1 if usage == "rowwise" else 0))
        tolerance = np.abs(x) * 2.0 ** -(fmt.mantissa_bits + 1) + step * 2.0 ** (-fmt.bias - fmt.mantissa_bits)
        assert (np.abs(y - x) <= tolerance * 1.0001).all(), usage


def test_dequant_edges() -> None:
    """Scale 0xFF is NaN for the whole block, scale 0 is 2^-127, 448 at scale 254 overflows to Inf, -0 stays."""
    data = np.zeros((4, 32), dtype=np.uint8)
    data[:, :3] = [0x7E, 0x80, 0x7F]
    scale = np.zeros((128, 4), dtype=np.uint8)
    scale[:4, 0] = [255, 0, 254, 127]
    y = dequant(data, scale, format="float8_e4m3fn")["x"]
    assert np.isnan(y[0]).all()
    assert y[1, 0] == np.float32(448 * 2.0**-127) and y[1, 1] == 0 and np.signbit(y[1, 1])
    assert y[2, 0] == np.inf and np.isnan(y[2, 2])
    assert y[3, :2].tolist() == [448.0, -0.0]


def test_dequant_fp4_unpacks_low_nibble_first() -> None:
    data = np.zeros((1, 16), dtype=np.uint8)
    data[0, 0] = 0xF2  # 1.0, then -6.0
    scale = np.full((128, 4), 128, dtype=np.uint8)
    y = dequant(data, scale, format="float4_e2m1fn")["x"]
    assert y.shape == (1, 32) and y[0, :3].tolist() == [2.0, -12.0, 0.0]


@pytest.mark.parametrize(
    ("data_shape", "scale_shape", "params", "error", "match"),
    [
        ((1, 32), (1, 4), {}, ValueError, r"scale.shape=\(1, 4\).*\(128, 4\)"),
        ((1, 8), (1, 1), {}, ValueError, "K % 32 == 0"),
        ((3, 32), (1, 1), {"usage": "columnwise"}, ValueError, "M % 32 == 0"),
        ((32,), (1, 1), {}, ValueError, "at least 2 dimensions"),
        ((1, 32), (128, 4), {"format": "float8_e4m3fnuz"}, ValueError, "format='float8_e4m3fnuz'"),
    ],
)
def test_dequant_bad_input(
    data_shape: tuple[int, ...], scale_shape: tuple[int, ...], params: dict[str, str], error: type, match: str
) -> None:
    kwargs = {"format": "float8_e4m3fn", **params}
    with pytest.raises(error, match=match):
        dequant(np.zeros(data_shape, dtype=np.uint8), np.zeros(scale_shape, dtype=np.uint8), **kwargs)


def test_dequant_refuses_fp6_bytes_above_63() -> None:
    data = np.zeros((1, 32), dtype=np.uint8)
    data[0, 7] = 0x40
    with pytest.raises(ValueError, match=r"data\[0, 7\]=64"):
        dequant(data, np.zeros((128, 4), dtype=np.uint8), format="float6_e3m2fn")


def test_blocks_param_names() -> None:
    assert BLOCKS == ("1d", "2d")
