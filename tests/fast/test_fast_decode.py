"""``fast.decode.fp8`` on CPU: every code against values computed here with ``math.ldexp`` and
against torch's own float8 widening, plus landmarks, shapes and argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fast import decode
from fast.decode import FP8_FORMATS, fp8

FIELDS = {
    "float8_e4m3fn": (4, 3, 7),
    "float8_e5m2": (5, 2, 15),
    "float8_e4m3fnuz": (4, 3, 8),
    "float8_e5m2fnuz": (5, 2, 16),
}
"""exponent bits, mantissa bits, bias"""
ALL_CODES = torch.arange(256, dtype=torch.int32).to(torch.uint8)


def expected_value(format: str, code: int) -> float:
    """The value of one code, from the OFP8 definition."""
    exponent_bits, mantissa_bits, bias = FIELDS[format]
    if format.endswith("fnuz"):
        if code == 0x80:
            return math.nan
        exponent_bits = 0  # fnuz: no special exponent, every other code is a number
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code & 0x7F) >> mantissa_bits, code & ((1 << mantissa_bits) - 1)
    if exponent_bits and exponent == (1 << exponent_bits) - 1:
        if format == "float8_e5m2":
            return sign * math.inf if mantissa == 0 else math.nan
        if mantissa == (1 << mantissa_bits) - 1:
            return math.nan
    if exponent == 0:
        return sign * math.ldexp(mantissa, 1 - bias - mantissa_bits)
    return sign * math.ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits)


@pytest.mark.parametrize("format", FP8_FORMATS)
def test_every_code(format: str) -> None:
    values = fp8(ALL_CODES, format=format)["values"]
    assert values.dtype == torch.float32
    expected = np.array([expected_value(format, c) for c in range(256)], dtype=np.float32)
    got = values.numpy()
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan), "NaN codes differ"
    bad = np.flatnonzero(got[~nan].view(np.uint32) != expected[~nan].view(np.uint32))
    assert bad.size == 0, [(hex(int(np.flatnonzero(~nan)[i])), got[~nan][i], expected[~nan][i]) for i in bad[:5]]


@pytest.mark.parametrize("format", FP8_FORMATS)
def test_matches_torch_float8_widening(format: str) -> None:
    """torch's own ``view(float8).float()`` agrees on every code (NaN payloads aside)."""
    got = fp8(ALL_CODES, format=format)["values"]
    torch_values = ALL_CODES.view(getattr(torch, format)).float()
    assert torch.equal(got.isnan(), torch_values.isnan())
    assert torch.equal(got.nan_to_num().view(torch.int32), torch_values.nan_to_num().view(torch.int32))


@pytest.mark.parametrize(
    ("format", "codes", "values"),
    [
        ("float8_e4m3fn", [0x00, 0x80, 0x01, 0x07, 0x08, 0x7E, 0xFE], [0.0, -0.0, 2**-9, 7 * 2**-9, 2**-6, 448, -448]),
        ("float8_e5m2", [0x01, 0x04, 0x3C, 0x7B, 0x7C, 0xFC], [2**-16, 2**-14, 1.0, 57344.0, math.inf, -math.inf]),
    ],
)
def test_landmarks(format: str, codes: list[int], values: list[float]) -> None:
    got = fp8(torch.tensor(codes, dtype=torch.uint8), format=format)["values"]
    assert got.view(torch.int32).tolist() == torch.tensor(values).view(torch.int32).tolist()


NAN_CODES = {"float8_e4m3fn": [0x7F, 0xFF], "float8_e5m2": [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]}


@pytest.mark.parametrize(("format", "nan_codes"), NAN_CODES.items())
def test_nan_codes(format: str, nan_codes: list[int]) -> None:
    assert fp8(torch.tensor(nan_codes, dtype=torch.uint8), format=format)["values"].isnan().all()


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (2, 3, 4)])
def test_shapes(shape: tuple[int, ...]) -> None:
    codes = torch.full(shape, 0x38, dtype=torch.uint8)
    values = fp8(codes, format="float8_e4m3fn")["values"]
    assert values.shape == shape
    assert bool((values == 1.0).all())


def test_non_contiguous_codes() -> None:
    codes = ALL_CODES.reshape(16, 16).t()
    values = fp8(codes, format="float8_e5m2")["values"]
    assert torch.equal(values.nan_to_num(), fp8(codes.contiguous(), format="float8_e5m2")["values"].nan_to_num())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.int32, torch.float8_e4m3fn])
def test_rejects_other_dtypes(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=r"codes\.dtype=.*codes must be uint8") as info:
        fp8(torch.zeros(3, dtype=dtype), format="float8_e4m3fn")
    assert f"codes.dtype={str(dtype).removeprefix('torch.')}" in str(info.value)


def test_rejects_non_tensors() -> None:
    with pytest.raises(TypeError, match="codes of type ndarray"):
        fp8(np.zeros(3, np.uint8), format="float8_e4m3fn")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["float8_e5m3", "float8_e4m3fnu", "e5m2"])
def test_rejects_unknown_format(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"format='{bad}'.*'float8_e4m3fn', 'float8_e5m2'"):
        fp8(ALL_CODES, format=bad)


DECODERS = {
    **{f: (lambda c, f=f: fp8(c, format=f)) for f in FP8_FORMATS},
    **{f: (lambda c, f=f: decode.fp6(c, format=f)) for f in decode.FP6_FORMATS},
    **{f: (lambda c, f=f: decode.fp4(c, format=f)) for f in decode.FP4_FORMATS},
    "float8_e8m0fnu": decode.e8m0,
}
WIDTHS = {"float6_e2m3fn": 6, "float6_e3m2fn": 6, "float4_e2m1fn": 4}


@pytest.mark.parametrize("format", DECODERS)
def test_triton_kernel_matches_the_table_on_every_code(monkeypatch: pytest.MonkeyPatch, format: str) -> None:
    """The Triton kernel (in the interpreter) gives the table's bits on every code; NaNs keep their sign."""
    pytest.importorskip("triton")
    codes = torch.arange(1 << WIDTHS.get(format, 8), dtype=torch.int32).to(torch.uint8).reshape(-1, 4)
    monkeypatch.setenv("QCONFORM_FAST_PATH", "torch")
    table = DECODERS[format](codes)["values"].view(torch.int32)
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = DECODERS[format](codes)["values"]
    assert kernel.shape == codes.shape and kernel.dtype == torch.float32
    nan = table.view(torch.float32).isnan()
    assert torch.equal(kernel.isnan(), nan)
    assert torch.equal(kernel.view(torch.int32)[~nan], table[~nan])
    assert torch.equal(kernel.view(torch.int32)[nan] < 0, table[nan] < 0)


@pytest.mark.parametrize(("format", "bad"), [("float6_e2m3fn", 64), ("float4_e2m1fn", 16)])
def test_triton_kernel_names_the_first_byte_that_is_not_a_code(
    monkeypatch: pytest.MonkeyPatch, format: str, bad: int
) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    codes = torch.zeros((2, 6), dtype=torch.uint8)
    codes[1, 3] = bad
    codes[1, 5] = 255
    with pytest.raises(ValueError, match=rf"codes\[1, 3\]={bad}, but codes must hold"):
        DECODERS[format](codes)
