"""``fast.cast.fp8`` on CPU: anchors, an independent nearest-value oracle, torch's own casts, the
Triton kernel in Triton's interpreter, path selection and argument checks.

The oracle here is written from scratch for these tests (float64 ``searchsorted`` over the FP8
values computed with ``math.ldexp``), so it shares no arithmetic with either path of ``fast``;
the conformance engine compares ``fast`` with ``reference`` separately.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fast._triton
import fast.cast
import fast.decode
from fast.cast import FP8_FORMATS, OVERFLOW_POLICIES, PATH_ENV, fp8

COMBOS = [(f, o) for f in FP8_FORMATS for o in OVERFLOW_POLICIES]
FIELDS = {
    "float8_e4m3fn": (4, 3, 7),
    "float8_e5m2": (5, 2, 15),
    "float8_e4m3fnuz": (4, 3, 8),
    "float8_e5m2fnuz": (5, 2, 16),
}
"""exponent bits, mantissa bits, bias"""
MAX_CODE = {"float8_e4m3fn": 0x7E, "float8_e5m2": 0x7B, "float8_e4m3fnuz": 0x7F, "float8_e5m2fnuz": 0x7F}
FNUZ = ("float8_e4m3fnuz", "float8_e5m2fnuz")
OVERFLOW_CODE = {
    ("float8_e4m3fn", "saturate"): 0x7E,
    ("float8_e4m3fn", "nonsaturating"): 0x7F,
    ("float8_e5m2", "saturate"): 0x7B,
    ("float8_e5m2", "nonsaturating"): 0x7C,
    **{(f, "saturate"): 0x7F for f in FNUZ},
    **{(f, "nonsaturating"): 0x80 for f in FNUZ},
}

ALL_16_BITS = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
"""Every 16-bit pattern; ``.view(torch.bfloat16)`` / ``.view(torch.float16)`` gives every value."""
RANDOM_F32_BITS = torch.from_numpy(
    np.random.default_rng(20261122).integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.int32)
)
"""Uniformly drawn float32 bit patterns (NaNs, Infs, subnormals included), fixed seed."""


def f32(*bits: int) -> torch.Tensor:
    """float32 tensor from bit patterns."""
    return torch.tensor(np.array(bits, dtype=np.uint32).view(np.int32)).view(torch.float32)


# %% The oracle


def positive_values(format: str) -> np.ndarray:
    """Value of every code 0..MAX_CODE+1, where MAX_CODE+1 stands for the first magnitude past the max."""
    _, mantissa_bits, bias = FIELDS[format]
    values = []
    for code in range(MAX_CODE[format] + 2):
        exponent, mantissa = code >> mantissa_bits, code & ((1 << mantissa_bits) - 1)
        if exponent == 0:
            values.append(math.ldexp(mantissa, 1 - bias - mantissa_bits))
        else:
            values.append(math.ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits))
    return np.array(values)


def oracle(
    x: torch.Tensor, format: str, overflow: str, rounding: str = "rne", random_bits: torch.Tensor | None = None
) -> np.ndarray:
    """Codes by brute force in float64: the format's neighbours of |x|, the rounding rule, then the policy.

    ``stochastic``: with ``f`` the (exact) fraction of the way from the lower neighbour to the upper one,
    up iff ``floor(f * 2**k) + r >= 2**k``.
    """
    values = positive_values(format)
    xs = x.reshape(-1)
    raw_sign = (xs.view(torch.int16) < 0) if xs.element_size() == 2 else (xs.view(torch.int32) < 0)
    magnitude = xs.to(torch.float64).abs().numpy()
    finite = np.isfinite(magnitude)
    clipped = np.where(finite, np.minimum(magnitude, values[-1]), 0.0)
    above = np.searchsorted(values, clipped)  # values[above - 1] < clipped <= values[above]
    below = np.maximum(above - 1, 0)
    down, up = clipped - values[below], values[above] - clipped
    if rounding == "rne":
        code = np.where((down < up) | ((down == up) & (below % 2 == 0)), below, above)
    elif rounding == "rtz":
        code = below
    else:
        assert random_bits is not None
        width = random_bits.element_size() * 8
        r = random_bits.reshape(-1).to(torch.int64).numpy() & ((1 << width) - 1)
        fraction = down / (values[above] - values[below] + (above == below))
        code = np.where(np.floor(fraction * 2.0**width) + r >= 2**width, above, below)
    code = np.where(clipped == values[above], above, code)
    code = np.where(code > MAX_CODE[format], OVERFLOW_CODE[format, overflow], code)
    code = np.where(np.isinf(magnitude), OVERFLOW_CODE[format, overflow], code)
    sign = np.where(raw_sign.numpy() & ((code != 0) | (format not in FNUZ)), 0x80, 0)
    code = code | sign
    nan_code = np.where(raw_sign.numpy(), 0xFF, 0x7F) if format not in FNUZ else 0x80
    code = np.where(np.isnan(magnitude), nan_code, code)
    return code.astype(np.uint8).reshape(x.shape)


def assert_codes(got: torch.Tensor, x: torch.Tensor, expected: np.ndarray, what: str) -> None:
    """Bit equality with a message that lists the first mismatches in hex."""
    __tracebackhide__ = True
    got_np = got.cpu().numpy()
    bad = np.flatnonzero(got_np.reshape(-1) != expected.reshape(-1))
    if bad.size:
        bits = x.reshape(-1).view(torch.int16 if x.element_size() == 2 else torch.int32).numpy()
        width = 4 if x.element_size() == 2 else 8
        first = ", ".join(
            f"x=0x{int(bits[i]) & ((1 << 4 * width) - 1):0{width}x}: codes=0x{got_np.reshape(-1)[i]:02x}, "
            f"but expected 0x{expected.reshape(-1)[i]:02x}"
            for i in bad[:5]
        )
        pytest.fail(f"{bad.size} of {expected.size} codes differ [{what}]; first: {first}")


def test_oracle_agrees_with_the_anchor_examples() -> None:
    """The oracle itself on the spec's worked examples (464 ties to 448, 61440 overflows, subnormal ties)."""
    x = torch.tensor([464.0, 464.0001, 61440.0, 2.0**-10, 3 * 2.0**-10, 125.8])
    assert oracle(x[:2], "float8_e4m3fn", "nonsaturating").tolist() == [0x7E, 0x7F]
    assert oracle(x[2:3], "float8_e5m2", "nonsaturating").tolist() == [0x7C]
    assert oracle(x[3:], "float8_e4m3fn", "saturate").tolist() == [0x00, 0x02, 0x70]


# %% Anchors

ANCHORS = [
    # (format, overflow, float32 bits, code, why)
    ("float8_e4m3fn", "nonsaturating", 0x43E80000, 0x7E, "464.0 ties between 448 and 480: even 448"),
    ("float8_e4m3fn", "saturate", 0x43E80000, 0x7E, "464.0 ties between 448 and 480: even 448"),
    ("float8_e4m3fn", "nonsaturating", 0x43E80001, 0x7F, "464.00003 overflows to NaN"),
    ("float8_e4m3fn", "saturate", 0x43E80001, 0x7E, "464.00003 saturates"),
    ("float8_e4m3fn", "nonsaturating", 0x43E80148, 0x7F, "464.01 overflows to NaN"),
    ("float8_e4m3fn", "saturate", 0x43E80148, 0x7E, "464.01 saturates"),
    ("float8_e4m3fn", "saturate", 0xC3E80148, 0xFE, "-464.01 saturates to -448"),
    ("float8_e4m3fn", "nonsaturating", 0x7F800000, 0x7F, "+Inf gives NaN"),
    ("float8_e4m3fn", "nonsaturating", 0xFF800000, 0xFF, "-Inf gives -NaN"),
    ("float8_e4m3fn", "saturate", 0x7F800000, 0x7E, "+Inf saturates"),
    ("float8_e4m3fn", "saturate", 0xFF800000, 0xFE, "-Inf saturates"),
    ("float8_e4m3fn", "saturate", 0x7FC00000, 0x7F, "NaN"),
    ("float8_e4m3fn", "saturate", 0xFFC00000, 0xFF, "-NaN keeps its sign"),
    ("float8_e4m3fn", "saturate", 0x7F800001, 0x7F, "signalling NaN payload"),
    ("float8_e4m3fn", "saturate", 0x80000000, 0x80, "-0.0 keeps its sign"),
    ("float8_e4m3fn", "saturate", 0x00000000, 0x00, "+0.0"),
    ("float8_e4m3fn", "saturate", 0x3A800000, 0x00, "2^-10 is half the min subnormal: ties to even 0"),
    ("float8_e4m3fn", "saturate", 0xBA800000, 0x80, "-2^-10 ties to -0"),
    ("float8_e4m3fn", "saturate", 0x3A800001, 0x01, "just above half the min subnormal rounds up"),
    ("float8_e4m3fn", "saturate", 0x3AC00000, 0x01, "3*2^-11 = 0.75 min subnormal rounds to it"),
    ("float8_e4m3fn", "saturate", 0x3B400000, 0x02, "3*2^-10 ties between 1 and 2 subnormals: even 2"),
    ("float8_e4m3fn", "saturate", 0x3B000000, 0x01, "2^-9, the min subnormal"),
    ("float8_e4m3fn", "saturate", 0x3C700000, 0x08, "15*2^-10 ties between max subnormal and min normal: even 0x08"),
    ("float8_e4m3fn", "saturate", 0x42FB999A, 0x70, "125.8 carries into the exponent: 128 (the interpreter trap)"),
    ("float8_e4m3fn", "saturate", 0x3F880000, 0x38, "1.0625 ties between 1.0 and 1.125: even 1.0"),
    ("float8_e4m3fn", "saturate", 0x3F980000, 0x3A, "1.1875 ties between 1.125 and 1.25: even 1.25"),
    ("float8_e4m3fn", "saturate", 0x00000001, 0x00, "float32 min subnormal"),
    ("float8_e4m3fn", "saturate", 0x80000001, 0x80, "negative float32 subnormal gives -0"),
    ("float8_e4m3fn", "saturate", 0x7F7FFFFF, 0x7E, "float32 max saturates"),
    ("float8_e5m2", "nonsaturating", 0x47600000, 0x7B, "57344 is the max"),
    ("float8_e5m2", "nonsaturating", 0x476FFFFF, 0x7B, "just under 61440 rounds to the max"),
    ("float8_e5m2", "nonsaturating", 0x47700000, 0x7C, "61440 ties between 57344 and Inf: Inf"),
    ("float8_e5m2", "saturate", 0x47700000, 0x7B, "61440 saturates"),
    ("float8_e5m2", "nonsaturating", 0xC7700000, 0xFC, "-61440 gives -Inf"),
    ("float8_e5m2", "saturate", 0xC7700000, 0xFB, "-61440 saturates"),
    ("float8_e5m2", "nonsaturating", 0x7F800000, 0x7C, "+Inf"),
    ("float8_e5m2", "saturate", 0xFF800000, 0xFB, "-Inf saturates"),
    ("float8_e5m2", "nonsaturating", 0x7FC00000, 0x7F, "NaN is 0x7F, not ml_dtypes' 0x7E"),
    ("float8_e5m2", "saturate", 0xFFC00000, 0xFF, "-NaN"),
    ("float8_e5m2", "saturate", 0x37800000, 0x01, "2^-16, the min subnormal"),
    ("float8_e5m2", "saturate", 0x37000000, 0x00, "2^-17 ties to even 0"),
    ("float8_e5m2", "saturate", 0x37400000, 0x01, "3*2^-18 rounds to the min subnormal"),
    ("float8_e5m2", "saturate", 0x80000000, 0x80, "-0.0"),
]


@pytest.mark.parametrize(("format", "overflow", "bits", "code", "why"), ANCHORS, ids=[a[4] for a in ANCHORS])
def test_anchor(format: str, overflow: str, bits: int, code: int, why: str) -> None:
    x = f32(bits)
    got = fp8(x, format=format, overflow=overflow)["codes"]
    assert got.item() == code, f"x=0x{bits:08x}: codes=0x{got.item():02x}, but should be 0x{code:02x} ({why})"
    assert oracle(x, format, overflow).item() == code, "the oracle disagrees with the anchor table"


# %% Exhaustive and random against the oracle


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_16_bit_input(format: str, overflow: str, dtype: torch.dtype) -> None:
    x = ALL_16_BITS.view(dtype)
    assert_codes(fp8(x, format=format, overflow=overflow)["codes"], x, oracle(x, format, overflow), f"{dtype}")


@pytest.mark.parametrize("length", [1, 2, 7, 9])
@pytest.mark.parametrize(("dtype", "nan_bits"), [(torch.float16, -0x0200), (torch.bfloat16, -0x003F)])
def test_negative_16_bit_nan_in_short_tensors(length: int, dtype: torch.dtype, nan_bits: int) -> None:
    """0xFE00 (float16) and 0xFFC1 (bfloat16) are negative NaNs.  torch 2.13's CPU float16 widening
    drops the sign of NaN in tensors of fewer than 8 elements (0x7FFFFFFF), so the sign must come
    from the input's own bits."""
    x = torch.full((length,), nan_bits, dtype=torch.int16).view(dtype)
    for format, overflow in COMBOS:
        expected = 0x80 if format in FNUZ else 0xFF
        assert fp8(x, format=format, overflow=overflow)["codes"].tolist() == [expected] * length


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
def test_random_float32_patterns(format: str, overflow: str) -> None:
    x = RANDOM_F32_BITS.view(torch.float32)
    assert_codes(fp8(x, format=format, overflow=overflow)["codes"], x, oracle(x, format, overflow), "float32")


def random_bits_like(x: torch.Tensor, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Uniform uint8 or uint32 random bits of ``x``'s shape, fixed seed."""
    drawn = torch.randint(-(2**31), 2**31, x.shape, dtype=torch.int32, generator=torch.Generator().manual_seed(seed))
    return drawn.view(torch.uint32) if dtype == torch.uint32 else drawn.to(torch.uint8)


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
@pytest.mark.parametrize(
    ("rounding", "bits_dtype"), [("rtz", None), ("stochastic", torch.uint8), ("stochastic", torch.uint32)]
)
def test_rtz_and_stochastic_against_the_oracle(
    format: str, overflow: str, rounding: str, bits_dtype: torch.dtype | None
) -> None:
    """All bfloat16 patterns and the random float32 patterns; stochastic with uint8 and uint32 random bits."""
    for x in (ALL_16_BITS.view(torch.bfloat16), RANDOM_F32_BITS.view(torch.float32)):
        bits = random_bits_like(x, bits_dtype, 7) if rounding == "stochastic" else None
        got = fp8(x, format=format, overflow=overflow, rounding=rounding, random_bits=bits)["codes"]
        assert_codes(got, x, oracle(x, format, overflow, rounding, bits), f"{rounding} {bits_dtype} {x.dtype}")


ROUNDING_ANCHORS = [
    # (format, overflow, rounding, x, random bits or None, code, why)
    ("float8_e4m3fn", "nonsaturating", "rtz", 479.99, None, 0x7E, "rtz truncates below 480"),
    ("float8_e4m3fn", "nonsaturating", "rtz", 480.0, None, 0x7F, "480 truncates past the max: overflow"),
    ("float8_e4m3fn", "saturate", "rtz", -1.9, None, 0xBF, "-1.9 truncates to -1.875"),
    ("float8_e5m2", "saturate", "rtz", 65535.99, None, 0x7B, "e5m2 65535.99 truncates to 57344"),
    ("float8_e4m3fn", "saturate", "stochastic", 1.0625, torch.tensor([127], dtype=torch.uint8), 0x38, "r < 128"),
    ("float8_e4m3fn", "saturate", "stochastic", 1.0625, torch.tensor([128], dtype=torch.uint8), 0x39, "r >= 128"),
    ("float8_e4m3fn", "saturate", "stochastic", 1.0, torch.tensor([255], dtype=torch.uint8), 0x38, "exact: never"),
    ("float8_e4m3fn", "nonsaturating", "stochastic", 449.0, torch.tensor([4160749568]).to(torch.uint32), 0x7F, "up"),
    ("float8_e4m3fn", "nonsaturating", "stochastic", 449.0, torch.tensor([4160749567]).to(torch.uint32), 0x7E, "down"),
    ("float8_e4m3fnuz", "nonsaturating", "rne", 248.0, None, 0x80, "248 ties to even 256: NaN 0x80"),
    ("float8_e4m3fnuz", "saturate", "rne", -1e6, None, 0xFF, "-1e6 saturates to -240"),
    ("float8_e4m3fnuz", "saturate", "rne", -0.0, None, 0x00, "no -0"),
    ("float8_e4m3fnuz", "saturate", "rne", -(2.0**-12), None, 0x00, "-2^-12 rounds to 0: no -0"),
    ("float8_e4m3fnuz", "saturate", "rne", float("-nan"), None, 0x80, "NaN of either sign"),
    ("float8_e5m2fnuz", "nonsaturating", "rne", 1.0, None, 0x40, "bias 16"),
    ("float8_e5m2fnuz", "nonsaturating", "rne", -61440.0, None, 0x80, "overflow to the NaN 0x80"),
    ("float8_e5m2fnuz", "saturate", "rtz", float("inf"), None, 0x7F, "Inf saturates to 57344"),
]


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize(
    ("format", "overflow", "rounding", "value", "bits", "code", "why"),
    ROUNDING_ANCHORS,
    ids=[a[6] for a in ROUNDING_ANCHORS],
)
def test_rounding_anchor(
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    format: str,
    overflow: str,
    rounding: str,
    value: float,
    bits: torch.Tensor | None,
    code: int,
    why: str,
) -> None:
    """The spec's rtz / stochastic / fnuz examples on both paths (the kernel in the interpreter)."""
    if path == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(PATH_ENV, path)
    x = torch.tensor([value], dtype=torch.float32)
    got = fp8(x, format=format, overflow=overflow, rounding=rounding, random_bits=bits)["codes"].item()
    assert got == code, f"{value}: codes=0x{got:02x}, but should be 0x{code:02x} ({why})"


@pytest.mark.parametrize("format", FP8_FORMATS)
def test_stochastic_with_zero_bits_is_rtz(format: str) -> None:
    """r = 0 never reaches 2^k, so stochastic rounding with zero bits truncates."""
    x = ALL_16_BITS.view(torch.bfloat16)
    for dtype in (torch.uint8, torch.uint32):
        zeros = torch.zeros(x.shape, dtype=dtype)
        sr = fp8(x, format=format, overflow="nonsaturating", rounding="stochastic", random_bits=zeros)["codes"]
        assert torch.equal(sr, fp8(x, format=format, overflow="nonsaturating", rounding="rtz")["codes"])


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
def test_every_code_round_trips_through_decode(format: str, overflow: str) -> None:
    """Each exact FP8 value casts back to its own code; NaN codes give 0x7F with their sign."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    again = fp8(fast.decode.fp8(codes, format=format)["values"], format=format, overflow=overflow)["codes"]
    expected = codes.clone()
    decoded = fast.decode.fp8(codes, format=format)["values"]
    expected[decoded.isnan()] = 0x80 if format in FNUZ else (codes[decoded.isnan()] & 0x80) | 0x7F
    expected[decoded.isinf()] = (codes[decoded.isinf()] & 0x80) | OVERFLOW_CODE[format, overflow]
    assert torch.equal(again, expected)


# %% torch's own casts as a sanity oracle

TORCH_FP8 = {format: getattr(torch, format) for format in FP8_FORMATS}
TORCH_VERSION = tuple(int(part) for part in torch.__version__.split(".")[:2])
TORCH_POLICY = {
    "float8_e4m3fn": "saturate" if TORCH_VERSION >= (2, 13) else "nonsaturating",
    "float8_e5m2": "nonsaturating",
    "float8_e4m3fnuz": "nonsaturating",
    "float8_e5m2fnuz": "nonsaturating",
}
"""What torch's eager ``Tensor.to`` does on CPU: E4M3FN saturates from torch 2.13 (pytorch#178817), E5M2 never."""


@pytest.mark.parametrize("format", FP8_FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_torch_eager_cast_on_non_nan_inputs(format: str, dtype: torch.dtype) -> None:
    x = RANDOM_F32_BITS.view(torch.float32) if dtype == torch.float32 else ALL_16_BITS.view(dtype)
    x = x[~x.isnan()]
    expected = x.to(TORCH_FP8[format]).view(torch.uint8).numpy()
    assert_codes(fp8(x, format=format, overflow=TORCH_POLICY[format])["codes"], x, expected, f"torch {dtype}")


# %% The Triton kernel in the interpreter


@pytest.fixture
def triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the Triton path and Triton's interpreter (the kernel is decorated lazily, per TRITON_INTERPRET)."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(PATH_ENV, "triton")


def torch_path(
    x: torch.Tensor, format: str, overflow: str, rounding: str = "rne", random_bits: torch.Tensor | None = None
) -> torch.Tensor:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PATH_ENV, "torch")
        return fp8(x, format=format, overflow=overflow, rounding=rounding, random_bits=random_bits)["codes"]


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize(("format", "overflow"), COMBOS)
@pytest.mark.parametrize(
    ("rounding", "bits_dtype"),
    [("rne", None), ("rtz", None), ("stochastic", torch.uint8), ("stochastic", torch.uint32)],
)
def test_triton_kernel_matches_torch_path(
    format: str, overflow: str, rounding: str, bits_dtype: torch.dtype | None
) -> None:
    """Every bfloat16 and float16 pattern and 2^16 random float32 patterns, bit for bit."""
    for x in (ALL_16_BITS.view(torch.bfloat16), ALL_16_BITS.view(torch.float16), RANDOM_F32_BITS.view(torch.float32)):
        bits = None if bits_dtype is None else random_bits_like(x, bits_dtype, 3)
        kernel = fp8(x, format=format, overflow=overflow, rounding=rounding, random_bits=bits)["codes"]
        expected = torch_path(x, format, overflow, rounding, bits).numpy()
        assert_codes(kernel, x, expected, f"Triton vs torch path, {rounding} {bits_dtype} {x.dtype}")


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize(("format", "overflow"), COMBOS)
def test_triton_kernel_anchors(format: str, overflow: str) -> None:
    rows = [a for a in ANCHORS if a[:2] == (format, overflow)]
    x = f32(*(a[2] for a in rows))
    assert fp8(x, format=format, overflow=overflow)["codes"].tolist() == [a[3] for a in rows]


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("shape", [(), (0,), (1,), (4097,), (3, 0, 2), (37, 129)])
def test_triton_kernel_shapes(shape: tuple[int, ...]) -> None:
    """Ragged tails (4097 = one block and one element), 0-d and empty tensors."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 300
    codes = fp8(x, format="float8_e4m3fn", overflow="saturate")["codes"]
    assert codes.shape == x.shape
    assert torch.equal(codes, torch_path(x, "float8_e4m3fn", "saturate"))


# %% Path selection


def test_forced_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        fp8(torch.ones(4), format="float8_e4m3fn", overflow="saturate")


def test_forced_triton_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast._triton, "triton", None)
    monkeypatch.setenv(PATH_ENV, "triton")
    with pytest.raises(RuntimeError, match="triton is not installed"):
        fp8(torch.ones(4), format="float8_e4m3fn", overflow="saturate")


def test_auto_without_triton_uses_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast._triton, "triton", None)
    monkeypatch.delenv(PATH_ENV, raising=False)
    assert fp8(torch.tensor([125.8]), format="float8_e4m3fn", overflow="saturate")["codes"].tolist() == [0x70]


def test_unknown_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "cuda")
    with pytest.raises(ValueError, match=r"QCONFORM_FAST_PATH='cuda'.*'auto', 'triton', 'torch'"):
        fp8(torch.ones(4), format="float8_e4m3fn", overflow="saturate")


# %% Shapes, layouts and argument checks


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4), (70001,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_output_shape_dtype_device(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    codes = fp8(torch.full(shape, -1.0, dtype=dtype), format="float8_e5m2", overflow="saturate")["codes"]
    assert codes.shape == shape
    assert codes.dtype == torch.uint8
    assert codes.device == torch.device("cpu")
    assert bool((codes == 0xBC).all())


def test_input_is_not_modified() -> None:
    x = f32(0x4B800000, 0x80000000, 0x7FC00001, 0x3F800001, 0x00000001)
    before = x.clone()
    fp8(x, format="float8_e4m3fn", overflow="nonsaturating")
    assert torch.equal(x.view(torch.int32), before.view(torch.int32))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.uint8, torch.bool, torch.float8_e4m3fn])
def test_rejects_other_dtypes(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=r"x\.dtype=.*float32.*bfloat16.*float16") as info:
        fp8(torch.zeros(3, dtype=dtype), format="float8_e4m3fn", overflow="saturate")
    assert f"x.dtype={str(dtype).removeprefix('torch.')}" in str(info.value)


def test_rejects_non_tensors() -> None:
    with pytest.raises(TypeError, match="x of type list"):
        fp8([1.0], format="float8_e4m3fn", overflow="saturate")  # type: ignore[arg-type]


def test_rejects_non_contiguous() -> None:
    with pytest.raises(ValueError, match=r"x with shape \(3, 2\).*x must be contiguous"):
        fp8(torch.ones(2, 3).t(), format="float8_e4m3fn", overflow="saturate")


@pytest.mark.parametrize("bad", ["float8_e4m3", "float8_e4m3fnu", "e4m3fn", ""])
def test_rejects_unknown_format(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"format='{bad}'.*'float8_e4m3fn', 'float8_e5m2'"):
        fp8(torch.ones(2), format=bad, overflow="saturate")


@pytest.mark.parametrize("bad", ["clamp", "saturating", ""])
def test_rejects_unknown_overflow(bad: str) -> None:
    with pytest.raises(ValueError, match=rf"overflow='{bad}'.*'saturate', 'nonsaturating'"):
        fp8(torch.ones(2), format="float8_e5m2", overflow=bad)


@pytest.mark.parametrize(
    ("rounding", "bits", "error", "match"),
    [
        ("up", None, ValueError, r"rounding='up'.*'rne', 'rtz', 'stochastic'"),
        ("stochastic", None, ValueError, r"rounding='stochastic'.*random_bits"),
        ("rne", torch.zeros(2, dtype=torch.uint8), ValueError, r"random_bits.*rounding='rne'"),
        ("stochastic", torch.zeros(2, dtype=torch.int32), TypeError, r"random_bits\.dtype=int32.*uint8 or uint32"),
        ("stochastic", torch.zeros(3, dtype=torch.uint8), ValueError, r"random_bits\.shape=\(3,\).*x\.shape=\(2,\)"),
        ("stochastic", torch.zeros(4, dtype=torch.uint8)[::2], ValueError, "contiguous"),
    ],
)
def test_rejects_bad_rounding_arguments(
    rounding: str, bits: torch.Tensor | None, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        fp8(torch.ones(2), format="float8_e4m3fn", overflow="saturate", rounding=rounding, random_bits=bits)
