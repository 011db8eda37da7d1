"""Second oracles for ``reference.cast.fp8`` (round to nearest even): ml_dtypes, torch, golden
vectors, and an anchor table.

Known, named difference: ml_dtypes narrows every NaN to e5m2 as 0x7E/0xFE (the quiet bit
alone), where the reference, torch and TransformerEngine give the NaN with every mantissa bit
set (0x7F/0xFF).  Comparisons with ml_dtypes therefore expect ``ML_NAN_CODE`` (with the
input's sign) for NaN inputs and equal codes everywhere else; a dedicated test pins it down.
For the fnuz formats ml_dtypes and torch 2.13 agree with ``overflow="nonsaturating"`` on every
input, NaN included (0x80).
"""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from reference.cast import FP8_FORMATS, fp8
from reference.formats import get_format

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
ML = {name: getattr(ml_dtypes, name) for name in FP8_FORMATS}
ML_NAN_CODE = {"float8_e4m3fn": 0x7F, "float8_e5m2": 0x7E, "float8_e4m3fnuz": 0x80, "float8_e5m2fnuz": 0x80}
"""The code ml_dtypes gives every NaN input, before the input's sign is ORed in; the reference gives
0x7F for e4m3fn and e5m2 (0x80 for fnuz, where the sign bit is part of the NaN code)."""
TORCH = {name: getattr(torch, name) for name in FP8_FORMATS}

BF16_ALL = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
"""Every bfloat16 bit pattern, widened exactly to float32."""
F16_ALL = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
"""Every float16 bit pattern."""
F32_RANDOM = (
    np.random.default_rng(20261122).integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
)
"""Uniformly drawn float32 bit patterns (NaNs, subnormals, huge values included), fixed seed."""


def boundary_set(name: str) -> np.ndarray:
    """TestFloat-style float32 inputs for ``name``: every value, every tie, and their neighbours.

    Every finite FP8 magnitude, every midpoint between neighbours (ties), the overflow
    boundary (max plus half the top spacing), each of these and one float32 ulp either side,
    then float32 specials: ±0, ±Inf, NaNs with payloads, subnormals and the float32 max.
    Both signs of everything.
    """
    values = get_format(name).finite_magnitudes.astype(np.float32)
    midpoints = (values[:-1] + values[1:]) / np.float32(2)
    overflow_boundary = values[-1] + (values[-1] - values[-2]) / np.float32(2)
    points = np.concatenate([values, midpoints, [overflow_boundary, 2 * values[-1]]]).astype(np.float32)
    inf = np.float32(np.inf)
    around = np.concatenate([points, np.nextafter(points, inf), np.nextafter(points, -inf)])
    finfo = np.finfo(np.float32)
    specials = np.array(
        [np.inf, finfo.max, finfo.smallest_normal, finfo.smallest_subnormal, 2**-127, 3 * 2**-149], dtype=np.float32
    )
    specials = np.concatenate(
        [specials, np.nextafter(finfo.smallest_normal, np.float32(0))[None], _floats(0x7FC0_0000, 0x7F80_0001)]
    )
    magnitudes = np.concatenate([around, specials]).astype(np.float32)
    return np.concatenate([magnitudes, -magnitudes])


def _floats(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def ml_cast(x: np.ndarray, name: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # ml_dtypes flags NaN inputs as "invalid"
        return x.astype(ML[name]).view(np.uint8)


def torch_cast(x: np.ndarray, name: str) -> np.ndarray:
    return torch.from_numpy(x).to(TORCH[name]).view(torch.uint8).numpy()


def _hex_input(x: np.ndarray, i: int) -> str:
    flat = x.reshape(-1)
    return hex(int(flat.view(np.uint16 if flat.dtype == np.float16 else np.uint32)[i]))


def assert_codes_equal(ours: np.ndarray, theirs: np.ndarray, x: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(ours != theirs)
    shown = ", ".join(f"x={_hex_input(x, i)}: {ours[i]:#04x} vs {theirs[i]:#04x}" for i in bad[:8])
    assert bad.size == 0, f"{bad.size} codes differ from {what}: {shown}"


def assert_matches_ml_dtypes(ours: np.ndarray, theirs: np.ndarray, x: np.ndarray, name: str) -> None:
    """Equal codes, where a NaN input gives ml_dtypes' own NaN code (same sign) on their side."""
    fmt = get_format(name)
    nan_input = np.isnan(x)
    sign = np.where(np.signbit(x), fmt.sign_mask, 0)
    assert np.all(fmt.is_nan(ours[nan_input]))
    assert_codes_equal(theirs[nan_input], ML_NAN_CODE[name] | sign[nan_input], x[nan_input], "ml_dtypes' NaN code")
    assert_codes_equal(ours[~nan_input], theirs[~nan_input], x[~nan_input], "ml_dtypes")


SOURCES = {
    "bf16_all": BF16_ALL,
    "f16_all": F16_ALL,
    "f32_random": F32_RANDOM,
    **{f"boundary_{name}": boundary_set(name) for name in FP8_FORMATS},
}


# -- (a) ml_dtypes astype is the non-saturating variant ------------------------------------------
@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("name", FP8_FORMATS)
def test_nonsaturating_matches_ml_dtypes(name: str, source: str) -> None:
    x = SOURCES[source]
    ours = fp8(x, format=name, overflow="nonsaturating")["codes"]
    assert_matches_ml_dtypes(ours, ml_cast(x, name), x, name)


@pytest.mark.parametrize(
    ("name", "nan_bits", "ours", "theirs"),
    [
        ("float8_e5m2", 0x7FC0_0000, 0x7F, 0x7E),
        ("float8_e5m2", 0xFFC0_0000, 0xFF, 0xFE),
        ("float8_e4m3fn", 0x7FC0_0000, 0x7F, 0x7F),
        ("float8_e4m3fn", 0xFFC0_0000, 0xFF, 0xFF),
        ("float8_e4m3fnuz", 0xFFC0_0000, 0x80, 0x80),
        ("float8_e5m2fnuz", 0x7FC0_0000, 0x80, 0x80),
    ],
)
def test_known_difference_ml_dtypes_nan_code(name: str, nan_bits: int, ours: int, theirs: int) -> None:
    x = _floats(nan_bits)
    assert fp8(x, format=name, overflow="nonsaturating")["codes"][0] == ours
    assert ml_cast(x, name)[0] == theirs


def test_boundary_set_has_ties_and_overflow_boundaries() -> None:
    e4m3 = boundary_set("float8_e4m3fn")
    e5m2 = boundary_set("float8_e5m2")
    assert {464.0, -464.0, 2**-10, 1.0625} <= set(e4m3.tolist())
    assert {61440.0, -61440.0, 2**-17} <= set(e5m2.tolist())
    assert np.isnan(e4m3).sum() == 4


# -- (b) golden vectors: torch 2.11 CUDA eager casts (non-saturating) ------------------------------
@pytest.mark.parametrize(("name", "key"), [("float8_e4m3fn", "e4m3fn"), ("float8_e5m2", "e5m2")])
def test_matches_torch211_cuda_golden_vectors(name: str, key: str) -> None:
    with np.load(VECTORS / "bf16_all_to_fp8_torch211_cuda.npz") as golden:
        expected = golden[key]
    ours = fp8(BF16_ALL, format=name, overflow="nonsaturating")["codes"]
    assert_codes_equal(ours, expected, BF16_ALL, "torch 2.11 CUDA (golden)")


# -- (c) saturate: overflow codes become ±max, nothing else changes --------------------------------
@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("name", FP8_FORMATS)
def test_saturate_replaces_only_overflow(name: str, source: str) -> None:
    fmt = get_format(name)
    x = SOURCES[source]
    saturated = fp8(x, format=name, overflow="saturate")["codes"]
    nonsaturated = fp8(x, format=name, overflow="nonsaturating")["codes"]
    magnitude = nonsaturated & fmt.magnitude_mask
    overflowed = ~np.isnan(x) & ((magnitude > fmt.max_finite_code) | fmt.is_nan(nonsaturated))
    assert overflowed.any()
    sign = np.where(np.signbit(x), fmt.sign_mask, 0)  # not the fnuz NaN code's own top bit
    expected = np.where(overflowed, sign | fmt.max_finite_code, nonsaturated).astype(np.uint8)
    assert_codes_equal(saturated, expected, x, "non-saturating codes with overflow clamped")


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("name", FP8_FORMATS)
def test_saturate_matches_ml_dtypes_after_clipping(name: str, source: str) -> None:
    """TransformerEngine's Python references clip to ±max before an ml_dtypes-style cast."""
    x = SOURCES[source]
    max_finite = get_format(name).max_finite
    ours = fp8(x, format=name, overflow="saturate")["codes"]
    assert_matches_ml_dtypes(ours, ml_cast(np.clip(x, -max_finite, max_finite), name), x, name)


# -- (d) anchors ------------------------------------------------------------------------------------
ANCHORS = [
    # (format, x, code with overflow="nonsaturating", code with overflow="saturate")
    ("float8_e4m3fn", 448.0, 0x7E, 0x7E),
    ("float8_e4m3fn", 464.0, 0x7E, 0x7E),  # tie 448 / 480 goes to even 448
    ("float8_e4m3fn", 464.01, 0x7F, 0x7E),
    ("float8_e4m3fn", -464.01, 0xFF, 0xFE),
    ("float8_e4m3fn", 480.0, 0x7F, 0x7E),
    ("float8_e4m3fn", math.inf, 0x7F, 0x7E),
    ("float8_e4m3fn", -math.inf, 0xFF, 0xFE),
    ("float8_e4m3fn", 3.4028234663852886e38, 0x7F, 0x7E),
    ("float8_e4m3fn", math.nan, 0x7F, 0x7F),
    ("float8_e4m3fn", -math.nan, 0xFF, 0xFF),
    ("float8_e4m3fn", 0.0, 0x00, 0x00),
    ("float8_e4m3fn", -0.0, 0x80, 0x80),
    ("float8_e4m3fn", 2**-9, 0x01, 0x01),  # smallest subnormal
    ("float8_e4m3fn", 2**-10, 0x00, 0x00),  # half of it: a tie, goes to even 0
    ("float8_e4m3fn", -(2**-10), 0x80, 0x80),
    ("float8_e4m3fn", 2**-10 + 2**-30, 0x01, 0x01),
    ("float8_e4m3fn", 3 * 2**-11, 0x01, 0x01),
    ("float8_e4m3fn", 3 * 2**-10, 0x02, 0x02),  # 1.5 subnormal steps: tie to even 2
    ("float8_e4m3fn", 5 * 2**-10, 0x02, 0x02),  # 2.5: tie to even 2
    ("float8_e4m3fn", 7 * 2**-9, 0x07, 0x07),  # largest subnormal
    ("float8_e4m3fn", 15 * 2**-10, 0x08, 0x08),  # 7.5 steps: tie rounds up into the smallest normal
    ("float8_e4m3fn", 2**-6, 0x08, 0x08),
    ("float8_e4m3fn", 1.0, 0x38, 0x38),
    ("float8_e4m3fn", 1.0625, 0x38, 0x38),  # tie 1 / 1.125
    ("float8_e4m3fn", 1.1875, 0x3A, 0x3A),  # tie 1.125 / 1.25
    ("float8_e4m3fn", -1.5, 0xBC, 0xBC),
    ("float8_e4m3fn", 1.4e-45, 0x00, 0x00),  # float32 smallest subnormal
    ("float8_e4m3fn", -1.4e-45, 0x80, 0x80),
    ("float8_e5m2", 57344.0, 0x7B, 0x7B),
    ("float8_e5m2", 61439.99, 0x7B, 0x7B),
    ("float8_e5m2", 61440.0, 0x7C, 0x7B),  # tie 57344 / 65536 goes to even (Inf): overflow
    ("float8_e5m2", -61440.0, 0xFC, 0xFB),
    ("float8_e5m2", math.inf, 0x7C, 0x7B),
    ("float8_e5m2", -math.inf, 0xFC, 0xFB),
    ("float8_e5m2", math.nan, 0x7F, 0x7F),
    ("float8_e5m2", -math.nan, 0xFF, 0xFF),
    ("float8_e5m2", -0.0, 0x80, 0x80),
    ("float8_e5m2", 2**-16, 0x01, 0x01),
    ("float8_e5m2", 2**-17, 0x00, 0x00),
    ("float8_e5m2", 3 * 2**-17, 0x02, 0x02),
    ("float8_e5m2", 1.0, 0x3C, 0x3C),
    ("float8_e5m2", 1.125, 0x3C, 0x3C),  # tie 1 / 1.25
    ("float8_e5m2", 1.375, 0x3E, 0x3E),  # tie 1.25 / 1.5
    ("float8_e4m3fnuz", 240.0, 0x7F, 0x7F),
    ("float8_e4m3fnuz", 247.99, 0x7F, 0x7F),
    ("float8_e4m3fnuz", 248.0, 0x80, 0x7F),  # tie 240 / 256 goes to even 256: overflow
    ("float8_e4m3fnuz", -248.0, 0x80, 0xFF),
    ("float8_e4m3fnuz", math.inf, 0x80, 0x7F),
    ("float8_e4m3fnuz", -math.inf, 0x80, 0xFF),
    ("float8_e4m3fnuz", math.nan, 0x80, 0x80),
    ("float8_e4m3fnuz", -math.nan, 0x80, 0x80),
    ("float8_e4m3fnuz", -0.0, 0x00, 0x00),  # no negative zero
    ("float8_e4m3fnuz", -(2**-12), 0x00, 0x00),  # rounds to zero, which has no sign
    ("float8_e4m3fnuz", 2**-10, 0x01, 0x01),  # smallest subnormal (bias 8)
    ("float8_e4m3fnuz", -(2**-10), 0x81, 0x81),
    ("float8_e4m3fnuz", 1.0, 0x40, 0x40),
    ("float8_e5m2fnuz", 57344.0, 0x7F, 0x7F),
    ("float8_e5m2fnuz", 61440.0, 0x80, 0x7F),  # tie 57344 / 65536 goes to even: overflow
    ("float8_e5m2fnuz", -math.inf, 0x80, 0xFF),
    ("float8_e5m2fnuz", -0.0, 0x00, 0x00),
    ("float8_e5m2fnuz", 2**-17, 0x01, 0x01),  # smallest subnormal (bias 16)
    ("float8_e5m2fnuz", 2**-18, 0x00, 0x00),  # half of it: a tie, goes to even 0
    ("float8_e5m2fnuz", 1.0, 0x40, 0x40),
]


@pytest.mark.parametrize(("name", "value", "nonsaturating", "saturate"), ANCHORS)
def test_anchor(name: str, value: float, nonsaturating: int, saturate: int) -> None:
    x = np.array([value], dtype=np.float32)
    assert np.signbit(x[0]) == (math.copysign(1.0, value) < 0)  # -math.nan must stay a negative NaN
    assert fp8(x, format=name, overflow="nonsaturating")["codes"][0] == nonsaturating
    assert fp8(x, format=name, overflow="saturate")["codes"][0] == saturate


def _exact_in_float16(value: float) -> bool:
    with np.errstate(over="ignore"):
        x16 = np.array([value], dtype=np.float16)
    return np.array_equal(x16.astype(np.float32), np.array([value], dtype=np.float32), equal_nan=True)


@pytest.mark.parametrize(
    ("name", "value", "nonsaturating", "saturate"), [anchor for anchor in ANCHORS if _exact_in_float16(anchor[1])]
)
def test_anchor_from_float16(name: str, value: float, nonsaturating: int, saturate: int) -> None:
    """The same anchors from float16 wherever float16 holds the value exactly."""
    x16 = np.array([value], dtype=np.float16)
    assert fp8(x16, format=name, overflow="nonsaturating")["codes"][0] == nonsaturating
    assert fp8(x16, format=name, overflow="saturate")["codes"][0] == saturate


# -- (e) torch (installed version) -----------------------------------------------------------------
def torch_overflow_policy(name: str) -> str:
    """Eager ``Tensor.to`` policy: e4m3fn saturates from torch 2.13 (pytorch#177870, #178817)."""
    if name == "float8_e4m3fn" and torch.__version__ >= (2, 13):
        return "saturate"
    return "nonsaturating"


@pytest.mark.parametrize("source", ["bf16_all", "f16_all", "f32_random"])
@pytest.mark.parametrize("name", FP8_FORMATS)
def test_matches_installed_torch(name: str, source: str) -> None:
    x = SOURCES[source]
    ours = fp8(x, format=name, overflow=torch_overflow_policy(name))["codes"]
    assert_codes_equal(ours, torch_cast(x, name), x, f"torch {torch.__version__}")


@pytest.mark.parametrize("name", FP8_FORMATS)
def test_matches_installed_torch_from_bfloat16(name: str) -> None:
    """A bfloat16 tensor (built from its bits) casts like the float32 that holds the same value.

    The tensor is made with ``view``: torch's float32 -> bfloat16 ``.to`` on CPU turns every
    NaN into 0xFFFF (a negative NaN), which would change the expected sign of NaN codes.
    """
    bf16 = torch.from_numpy(np.arange(1 << 16, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    theirs = bf16.to(TORCH[name]).view(torch.uint8).numpy()
    ours = fp8(BF16_ALL, format=name, overflow=torch_overflow_policy(name))["codes"]
    assert_codes_equal(ours, theirs, BF16_ALL, f"torch {torch.__version__} from bfloat16")
