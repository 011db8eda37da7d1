"""``fast.cast.fp6`` / ``fp4`` / ``e8m0`` / ``int_``, ``fast.decode.fp6`` / ``fp4`` / ``e8m0`` and
``fast.pack.nibbles`` / ``fast.unpack.nibbles`` on CPU: anchors from the specs and the OCP MX tables,
an independent float64 nearest-value oracle for fp6/fp4, the Triton kernels in the interpreter
against the torch paths, round trips and argument checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fast.decode
from fast.cast import (
    E8M0_ROUNDINGS,
    E8M0_ZERO_POLICIES,
    INT_DTYPES,
    INT_MODES,
    NAN_POLICIES,
    PATH_ENV,
    e8m0,
    fp4,
    fp6,
    int_,
)
from fast.pack import nibbles as pack
from fast.unpack import nibbles as unpack

ALL_16_BITS = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
RANDOM_F32_BITS = torch.from_numpy(
    np.random.default_rng(11).integers(0, 1 << 32, 1 << 15, dtype=np.uint64).astype(np.uint32).view(np.int32)
)
SMALL = {"float6_e2m3fn": fp6, "float6_e3m2fn": fp6, "float4_e2m1fn": fp4}
DECODE = {"float6_e2m3fn": fast.decode.fp6, "float6_e3m2fn": fast.decode.fp6, "float4_e2m1fn": fast.decode.fp4}
MAGNITUDES = {
    "float4_e2m1fn": [0, 0.5, 1, 1.5, 2, 3, 4, 6],
    "float6_e2m3fn": [i / 8 for i in range(8)] + [(8 + m) * 2.0 ** (e - 4) for e in range(1, 4) for m in range(8)],
    "float6_e3m2fn": [i / 16 for i in range(4)] + [(4 + m) * 2.0 ** (e - 5) for e in range(1, 8) for m in range(4)],
}
"""Positive values of codes 0..max, written out from OCP MX v1.0 §5.3 (not derived from ``fast``)."""


def f32(*bits: int) -> torch.Tensor:
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.int32)).view(torch.float32)


def nearest_oracle(x: torch.Tensor, format: str) -> np.ndarray:
    """RNE saturating codes of finite, non-NaN ``x``: the nearest listed magnitude, ties to the even code."""
    values = np.array(MAGNITUDES[format])
    top = len(values) - 1
    magnitude = x.reshape(-1).double().abs().numpy()
    step_past_max = values[-1] - values[-2]
    extended = np.append(values, values[-1] + step_past_max)
    above = np.searchsorted(extended, np.minimum(magnitude, extended[-1]))
    below = np.maximum(above - 1, 0)
    down, up = magnitude - extended[below], extended[above] - magnitude
    code = np.where((down < up) | ((down == up) & (below % 2 == 0)), below, above)
    code = np.where(magnitude == extended[above], above, code)
    code = np.minimum(code, top)
    negative = x.reshape(-1).view(torch.int32).numpy() < 0
    return (code | np.where(negative, top + 1, 0)).astype(np.uint8)  # the sign bit is just above the magnitude


@pytest.mark.parametrize("format", list(SMALL))
def test_rne_against_the_nearest_value_oracle(format: str) -> None:
    x = RANDOM_F32_BITS.view(torch.float32)
    x = x[x.isfinite()] * 2.0**-120  # bring the random exponents down near the formats' range
    x = torch.cat([x, torch.linspace(-40, 40, 20001)])
    got = SMALL[format](x, format=format)["codes"].numpy()
    np.testing.assert_array_equal(got, nearest_oracle(x, format))


@pytest.mark.parametrize("format", list(SMALL))
def test_every_code_round_trips_through_decode(format: str) -> None:
    bits = 6 if format.startswith("float6") else 4
    codes = torch.arange(1 << bits, dtype=torch.int32).to(torch.uint8)
    values = DECODE[format](codes, format=format)["values"]
    expected = [v for v in MAGNITUDES[format]] + [-v for v in MAGNITUDES[format]]
    assert values.tolist() == expected
    assert torch.equal(SMALL[format](values, format=format)["codes"], codes)


SMALL_ANCHORS = [
    # (format, rounding, nan, float32 bits, code, why)
    ("float6_e2m3fn", "rne", "max", 0x40F80000, 0x1F, "7.75 ties to even 8: saturates to 7.5"),
    ("float6_e2m3fn", "rne", "max", 0xFF800000, 0x3F, "-Inf saturates"),
    ("float6_e2m3fn", "rne", "max", 0x80000000, 0x20, "-0.0"),
    ("float6_e2m3fn", "rne", "max", 0x3E400000, 0x02, "0.1875 ties between 1 and 2 subnormals: even 2"),
    ("float6_e3m2fn", "rne", "max", 0x41F00000, 0x1F, "30 ties to even 32: saturates to 28"),
    ("float6_e3m2fn", "rne", "max", 0x3D000000, 0x00, "0.03125 is half the min subnormal: even 0"),
    ("float6_e2m3fn", "rne", "max", 0xFFC00000, 0x1F, "nan=max ignores the sign"),
    ("float6_e2m3fn", "rne", "signed_max", 0xFFC00000, 0x3F, "nan=signed_max"),
    ("float6_e2m3fn", "rne", "negative_zero", 0x7FC00000, 0x20, "+NaN -> -0"),
    ("float6_e2m3fn", "rne", "negative_zero", 0xFFC00000, 0x00, "-NaN -> +0"),
    ("float4_e2m1fn", "rne", "max", 0x40E00000, 0x7, "7 ties to even 8: saturates to 6"),
    ("float4_e2m1fn", "rne", "max", 0x40A00000, 0x6, "5 ties to even 4"),
    ("float4_e2m1fn", "rne", "max", 0x3E800000, 0x0, "0.25 ties to 0"),
    ("float4_e2m1fn", "rtz", "max", 0x40BFFFFF, 0x6, "5.99999 truncates to 4"),
    ("float4_e2m1fn", "rtz", "signed_max", 0xFF800000, 0xF, "-Inf saturates under rtz"),
    ("float4_e2m1fn", "rne", "signed_max", 0xFFC00000, 0xF, "-NaN -> -6"),
]


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize(
    ("format", "rounding", "nan", "bits", "code", "why"), SMALL_ANCHORS, ids=[a[5] for a in SMALL_ANCHORS]
)
def test_small_anchor(
    monkeypatch: pytest.MonkeyPatch, path: str, format: str, rounding: str, nan: str, bits: int, code: int, why: str
) -> None:
    use_path(monkeypatch, path)
    got = SMALL[format](f32(bits), format=format, rounding=rounding, nan=nan)["codes"].item()
    assert got == code, f"0x{bits:08x}: codes=0x{got:02x}, but should be 0x{code:02x} ({why})"


def test_fp4_stochastic_anchor() -> None:
    """1.25 is half way from 1 to 1.5: up iff r >= 128 (uint8)."""
    x = torch.full((4,), 1.25)
    r = torch.tensor([0, 127, 128, 255], dtype=torch.uint8)
    assert fp4(x, format="float4_e2m1fn", rounding="stochastic", random_bits=r)["codes"].tolist() == [2, 2, 3, 3]


E8M0_ANCHORS = [
    # (rounding, zero, overflow, float32 bits, code, why)
    ("nearest_up", "min", "nonsaturating", 0x3F800000, 0x7F, "1.0"),
    ("nearest_up", "min", "nonsaturating", 0x3FC00000, 0x80, "1.5 ties up"),
    ("floor", "min", "nonsaturating", 0x3FC00000, 0x7F, "floor 1.5"),
    ("ceil", "min", "saturate", 0x3F800001, 0x80, "ceil just above 1"),
    ("nearest_up", "min", "nonsaturating", 0x3F400000, 0x7F, "0.75 -> 1"),
    ("ceil", "min", "saturate", 0x7F000001, 0xFE, "ceil past 2^127 saturates"),
    ("ceil", "min", "nonsaturating", 0x7F000001, 0xFF, "ceil past 2^127 overflows"),
    ("floor", "min", "saturate", 0x7F800000, 0xFE, "+Inf saturates"),
    ("floor", "min", "saturate", 0xC0000000, 0x80, "zero=min ignores the sign"),
    ("floor", "nan", "saturate", 0xC0000000, 0xFF, "zero=nan: negative"),
    ("floor", "nan", "saturate", 0x00000000, 0xFF, "zero=nan: +0"),
    ("floor", "min", "saturate", 0x80000000, 0x00, "zero=min: -0"),
    ("nearest_up", "min", "saturate", 0x00400000, 0x00, "2^-127 (subnormal tie) stays"),
    ("nearest_up", "min", "saturate", 0x00400001, 0x01, "above 2^-127 -> 2^-126"),
    ("floor", "min", "saturate", 0x7FC00000, 0xFF, "NaN"),
]


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize(
    ("rounding", "zero", "overflow", "bits", "code", "why"), E8M0_ANCHORS, ids=[a[5] for a in E8M0_ANCHORS]
)
def test_e8m0_anchor(
    monkeypatch: pytest.MonkeyPatch, path: str, rounding: str, zero: str, overflow: str, bits: int, code: int, why: str
) -> None:
    use_path(monkeypatch, path)
    got = e8m0(f32(bits), rounding=rounding, zero=zero, overflow=overflow)["codes"].item()
    assert got == code, f"0x{bits:08x}: codes=0x{got:02x}, but should be 0x{code:02x} ({why})"


def test_e8m0_decode() -> None:
    values = fast.decode.e8m0(torch.tensor([0, 1, 0x7F, 0xFE, 0xFF], dtype=torch.uint8))["values"]
    assert values.view(torch.int32)[:4].tolist() == [0x00400000, 0x00800000, 0x3F800000, 0x7F000000]
    assert values[4].isnan()


INT_ANCHORS = [
    # (dtype, mode, value, code)
    ("int8", "rne_clamp", 2.5, 2),
    ("int8", "rne_clamp", 3.5, 4),
    ("int8", "rne_clamp", 127.5, 127),
    ("int8", "rne_clamp", -1.0, 0xFF),
    ("int8", "rne_clamp", -1e9, 0x80),
    ("int4", "rne_clamp", -8.5, 0x8),
    ("int4", "rne_clamp", float("inf"), 0x7),
    ("uint4", "rne_clamp", -3.0, 0x0),
    ("uint4", "rne_clamp", float("nan"), 0x0),
    ("int8", "rne_clamp", -0.5, 0),
    ("int4", "truncate_wrap", 8.0, 0x8),
    ("int4", "truncate_wrap", -9.0, 0x7),
    ("int8", "truncate_wrap", 255.9, 0xFF),
    ("int8", "truncate_wrap", -0.99, 0),
    ("int8", "truncate_wrap", 2.0**31, 0),
    ("uint4", "truncate_wrap", float("-inf"), 0),
    ("int4", "rne_wrap", 2.5, 0x2),
    ("int4", "rne_wrap", 7.5, 0x8),
    ("int4", "rne_wrap", -9.5, 0x6),
    ("uint4", "rne_wrap", 15.5, 0x0),
    ("int8", "rne_wrap", 127.5, 0x80),
    ("int8", "rne_wrap", 8388607.5, 0x00),
    ("int4", "rne_wrap", float("nan"), 0),
    ("int4", "rna_wrap", 2.5, 0x3),
    ("int4", "rna_wrap", -0.5, 0xF),
    ("uint4", "rna_wrap", -2.5, 0xD),
    ("int8", "rna_wrap", 0.49999997, 0),
    ("int8", "rna_wrap", -128.5, 0x7F),
    ("int8", "rna_wrap", float("-inf"), 0),
]


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize(("dtype", "mode", "value", "code"), INT_ANCHORS)
def test_int_anchor(monkeypatch: pytest.MonkeyPatch, path: str, dtype: str, mode: str, value: float, code: int) -> None:
    use_path(monkeypatch, path)
    assert int_(torch.tensor([value]), dtype=dtype, mode=mode)["codes"].item() == code


def test_int_truncate_wrap_matches_numpy_on_exact_integers() -> None:
    """NumPy's int64 conversion, then the low byte: defined for these finite values."""
    x = torch.linspace(-70000, 70000, 100003)
    expected = np.trunc(x.double().numpy()).astype(np.int64).astype(np.uint8)
    np.testing.assert_array_equal(int_(x, dtype="int8", mode="truncate_wrap")["codes"].numpy(), expected)


# %% The Triton kernels in the interpreter against the torch paths


def use_path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    if path == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(PATH_ENV, path)


def both_paths(monkeypatch: pytest.MonkeyPatch, call: object) -> tuple[torch.Tensor, torch.Tensor]:
    results = []
    for path in ("triton", "torch"):
        use_path(monkeypatch, path)
        results.append(call())  # type: ignore[operator]
    return results[0], results[1]


INPUTS = [ALL_16_BITS.view(torch.bfloat16), ALL_16_BITS.view(torch.float16), RANDOM_F32_BITS.view(torch.float32)]


@pytest.mark.parametrize("format", list(SMALL))
@pytest.mark.parametrize("rounding", ["rne", "rtz", "stochastic"])
def test_small_kernel_matches_torch_path(monkeypatch: pytest.MonkeyPatch, format: str, rounding: str) -> None:
    for x, nan in zip(INPUTS, NAN_POLICIES, strict=True):
        bits = None
        if rounding == "stochastic":
            drawn = torch.randint(
                -(2**31), 2**31, x.shape, dtype=torch.int32, generator=torch.Generator().manual_seed(5)
            )
            bits = drawn.view(torch.uint32) if x.dtype == torch.float32 else drawn.to(torch.uint8)
        kernel, torch_path = both_paths(
            monkeypatch,
            lambda x=x, nan=nan, bits=bits: SMALL[format](
                x, format=format, rounding=rounding, nan=nan, random_bits=bits
            )["codes"],
        )
        assert torch.equal(kernel, torch_path), f"{x.dtype} {nan}"


@pytest.mark.parametrize("rounding", E8M0_ROUNDINGS)
@pytest.mark.parametrize("zero", E8M0_ZERO_POLICIES)
def test_e8m0_kernel_matches_torch_path(monkeypatch: pytest.MonkeyPatch, rounding: str, zero: str) -> None:
    for x in INPUTS:
        for overflow in ("saturate", "nonsaturating"):
            kernel, torch_path = both_paths(
                monkeypatch, lambda x=x, o=overflow: e8m0(x, rounding=rounding, zero=zero, overflow=o)["codes"]
            )
            assert torch.equal(kernel, torch_path), f"{x.dtype} {overflow}"


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("mode", INT_MODES)
def test_int_kernel_matches_torch_path(monkeypatch: pytest.MonkeyPatch, dtype: str, mode: str) -> None:
    for x in INPUTS:
        kernel, torch_path = both_paths(monkeypatch, lambda x=x: int_(x, dtype=dtype, mode=mode)["codes"])
        assert torch.equal(kernel, torch_path), f"{x.dtype}"


# %% Packing


@pytest.mark.parametrize("order", ["low_first", "high_first"])
@pytest.mark.parametrize("count", [0, 1, 2, 7, 8])
def test_pack_unpack_round_trip(order: str, count: int) -> None:
    codes = torch.randint(0, 16, (3, count), dtype=torch.uint8, generator=torch.Generator().manual_seed(count))
    packed = pack(codes, order=order)["packed"]
    assert packed.shape == (3, (count + 1) // 2)
    assert torch.equal(unpack(packed, order=order, odd=count % 2 == 1)["codes"], codes)


def test_pack_orders() -> None:
    codes = torch.tensor([0x1, 0x2, 0x3], dtype=torch.uint8)
    assert pack(codes, order="low_first")["packed"].tolist() == [0x21, 0x03]
    assert pack(codes, order="high_first")["packed"].tolist() == [0x12, 0x30]


# %% Argument checks


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: fp6(torch.ones(1), format="float6_e2m3"), ValueError, r"format='float6_e2m3'"),
        (lambda: fp4(torch.ones(1), format="float4_e2m1fn", nan="six"), ValueError, r"nan='six'.*'max', 'signed_max'"),
        (lambda: fp4(torch.ones(1, dtype=torch.float64), format="float4_e2m1fn"), TypeError, "rounds twice"),
        (lambda: e8m0(torch.ones(1), rounding="even", zero="min", overflow="saturate"), ValueError, "rounding='even'"),
        (
            lambda: e8m0(torch.ones(1, dtype=torch.int16), rounding="floor", zero="min", overflow="saturate"),
            TypeError,
            r"x\.dtype=int16",
        ),
        (
            lambda: int_(torch.ones(1), dtype="int2", mode="rne_clamp"),
            ValueError,
            r"dtype='int2'.*'int8', 'int4', 'uint4'",
        ),
        (
            lambda: fast.decode.fp4(torch.tensor([[0, 33]], dtype=torch.uint8), format="float4_e2m1fn"),
            ValueError,
            r"codes\[0, 1\]=33.*0\.\.15",
        ),
        (
            lambda: fast.decode.fp6(torch.tensor([1, 64], dtype=torch.uint8), format="float6_e3m2fn"),
            ValueError,
            r"codes\[1\]=64.*0\.\.63",
        ),
        (lambda: pack(torch.tensor([1, 2, 16], dtype=torch.uint8)), ValueError, r"codes\[2\]=16.*0\.\.15"),
        (lambda: pack(torch.tensor(1, dtype=torch.uint8)), ValueError, r"codes\.shape=\(\).*at least 1"),
        (
            lambda: unpack(torch.zeros(2, 0, dtype=torch.uint8), odd=True),
            ValueError,
            r"odd=True.*packed\.shape=\(2, 0\)",
        ),
        (lambda: unpack(torch.zeros(2, dtype=torch.uint8), odd=1), ValueError, r"odd=1.*\[False, True\]"),
        (lambda: unpack(torch.zeros(2, dtype=torch.uint16)), TypeError, r"packed\.dtype=uint16"),
    ],
)
def test_rejects_bad_arguments(call: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()  # type: ignore[operator]
