"""``fast`` on a CUDA device against the NumPy reference, bit for bit (run by ``nox -s gpu``).

The oracle is ``reference.cast`` (every cast and rounding), ``reference.decode.fp8`` and ``reference.glu``, never a
path of ``fast`` itself, except where noted.  The 10^8-input check runs the reference on the
host sequentially, chunk by chunk (2^24 elements per chunk, six chunks per format and policy,
each chunk drawn once and kept): the reference rounds a chunk in about 0.15 s on one core
(measured on the CPU machine), so the check takes well under a minute and needs no process pool.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch

import fast.cast
import reference.cast
from fast.cast import (
    E8M0_ROUNDINGS,
    E8M0_ZERO_POLICIES,
    FP4_FORMATS,
    FP6_FORMATS,
    FP8_FORMATS,
    INT_DTYPES,
    INT_MODES,
    NAN_POLICIES,
    OVERFLOW_POLICIES,
    PATH_ENV,
)
from fast.cast import fp8 as fast_fp8
from fast.decode import fp8 as fast_decode
from fast.glu import deinterleave, interleave
from reference.cast import fp8 as reference_fp8
from reference.decode import fp8 as reference_decode
from reference.glu import interleave as reference_interleave

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

COMBOS = [(f, o) for f in FP8_FORMATS for o in OVERFLOW_POLICIES]
CHUNK = 1 << 24
RANDOM_CHUNKS = 6
"""6 * 2^24 = 100,663,296 random float32 inputs per format and policy."""


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cast here runs the Triton kernel (an error if Triton is missing, never a silent fallback)."""
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def assert_same_codes(got: torch.Tensor, expected: np.ndarray, bits: np.ndarray, what: str) -> None:
    """Bit equality; the message has the mismatch count and the first examples in hex."""
    __tracebackhide__ = True
    got_np = got.cpu().numpy().reshape(-1)
    expected = expected.reshape(-1)
    bad = np.flatnonzero(got_np != expected)
    if bad.size:
        width = 2 * bits.dtype.itemsize
        flat = bits.reshape(-1)
        first = "; ".join(
            f"x=0x{int(flat[i]):0{width}x}: codes=0x{got_np[i]:02x}, but reference gives 0x{expected[i]:02x}"
            for i in bad[:8]
        )
        pytest.fail(f"{bad.size} of {expected.size} codes differ [{what}]; first: {first}")


# %% Every 16-bit input


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
def test_every_bfloat16_pattern(format: str, overflow: str) -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    x = torch.from_numpy(bits.view(np.int16)).cuda().view(torch.bfloat16)
    expected = reference_fp8((bits.astype(np.uint32) << 16).view(np.float32), format=format, overflow=overflow)
    got = fast_fp8(x, format=format, overflow=overflow)["codes"]
    assert_same_codes(got, expected["codes"], bits, f"bfloat16 {format} {overflow}")


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
def test_every_float16_pattern(format: str, overflow: str) -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    x = torch.from_numpy(bits.view(np.int16)).cuda().view(torch.float16)
    expected = reference_fp8(bits.view(np.float16), format=format, overflow=overflow)
    got = fast_fp8(x, format=format, overflow=overflow)["codes"]
    assert_same_codes(got, expected["codes"], bits, f"float16 {format} {overflow}")


# %% 10^8 random float32 inputs


@functools.cache
def random_bits(index: int) -> np.ndarray:
    """Chunk ``index`` of the random float32 inputs, as uint32 bit patterns, in three equal parts.

    1. uniform over all 2^32 patterns (NaNs, Infs, float32 subnormals, huge values);
    2. near the FP8 ranges: random sign and mantissa, exponents from 2^-26 (below half of E5M2's
       smallest subnormal) to 2^17 (past E5M2's overflow boundary);
    3. ties and their neighbours: as 2, but only the top 4 mantissa bits random, then moved by
       -1, 0 or +1 float32 ulp, so that midpoints between FP8 values and the overflow
       boundaries come up often.
    """
    rng = np.random.default_rng([20261122, index])
    third = CHUNK // 3
    uniform = rng.integers(0, 1 << 32, CHUNK - 2 * third, dtype=np.uint64).astype(np.uint32)
    sign = rng.integers(0, 2, 2 * third, dtype=np.uint32) << 31
    exponent = rng.integers(127 - 26, 127 + 18, 2 * third, dtype=np.uint32) << 23
    mantissa = rng.integers(0, 1 << 23, 2 * third, dtype=np.uint32)
    near = sign[:third] | exponent[:third] | mantissa[:third]
    ties = (sign[third:] | exponent[third:] | (mantissa[third:] & 0x780000)).astype(np.int64)
    ties = (ties + rng.integers(-1, 2, third)).astype(np.uint32)
    return np.concatenate([uniform, near, ties])


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
def test_random_float32(format: str, overflow: str) -> None:
    for index in range(RANDOM_CHUNKS):
        bits = random_bits(index)
        x = torch.from_numpy(bits.view(np.int32)).cuda().view(torch.float32)
        got = fast_fp8(x, format=format, overflow=overflow)["codes"]
        expected = reference_fp8(bits.view(np.float32), format=format, overflow=overflow)["codes"]
        assert_same_codes(got, expected, bits, f"float32 chunk {index} {format} {overflow}")


# %% Every cast variant: rtz / stochastic fp8, fp6, fp4, e8m0, int (bf16 patterns and >= 10^7 float32)

ROUNDINGS_WITH_BITS = [("rtz", None), ("stochastic", torch.uint8), ("stochastic", torch.uint32)]
VARIANTS: list[tuple[str, dict[str, Any], torch.dtype | None]] = [
    *(
        ("fp8", {"format": f, "overflow": o, "rounding": r}, bits_dtype)
        for f in FP8_FORMATS
        for o in OVERFLOW_POLICIES
        for r, bits_dtype in (("rtz", None), ("stochastic", torch.uint8), ("stochastic", torch.uint32))
    ),
    *(
        (family, {"format": f, "rounding": r, "nan": n}, bits_dtype)
        for family, formats in (("fp6", FP6_FORMATS), ("fp4", FP4_FORMATS))
        for f in formats
        for n in NAN_POLICIES
        for r, bits_dtype in (("rne", None), ("rtz", None), ("stochastic", torch.uint8), ("stochastic", torch.uint32))
    ),
    *(
        ("e8m0", {"rounding": r, "zero": z, "overflow": o}, None)
        for r in E8M0_ROUNDINGS
        for z in E8M0_ZERO_POLICIES
        for o in OVERFLOW_POLICIES
    ),
    *(("int_", {"dtype": d, "mode": m}, None) for d in INT_DTYPES for m in INT_MODES),
]
"""(function name in fast.cast and reference.cast, params, random bits dtype); fp8 rne is covered above."""
VARIANT_IDS = [f"{family}-{'-'.join(map(str, params.values()))}-{bits}" for family, params, bits in VARIANTS]
VARIANT_CHUNKS = 1
"""2^24 random float32 inputs per variant (>= 10^7), plus every bfloat16 pattern."""


def check_variant(
    family: str, params: dict[str, Any], bits_dtype: torch.dtype | None, x_bits: np.ndarray, seed: int, device: str
) -> None:
    """``fast.cast.<family>`` on ``device`` against ``reference.cast.<family>``, bit for bit.

    ``x_bits``: uint16 (bfloat16 patterns) or uint32 (float32 patterns); the random bits, when the
    variant takes them, are drawn per call from ``seed``.
    """
    __tracebackhide__ = True
    kwargs = dict(params)
    reference_kwargs = dict(params)
    if bits_dtype is not None:
        rng = np.random.default_rng([20261123, seed])
        numpy_dtype = np.uint8 if bits_dtype == torch.uint8 else np.uint32
        randoms = rng.integers(0, np.iinfo(numpy_dtype).max + 1, x_bits.shape, dtype=np.uint64).astype(numpy_dtype)
        reference_kwargs["random_bits"] = randoms
        kwargs["random_bits"] = (
            torch.from_numpy(randoms.view(np.int8 if numpy_dtype == np.uint8 else np.int32)).to(device).view(bits_dtype)
        )
    if x_bits.dtype == np.uint16:
        x = torch.from_numpy(x_bits.view(np.int16)).to(device).view(torch.bfloat16)
        reference_x = (x_bits.astype(np.uint32) << 16).view(np.float32)
    else:
        x = torch.from_numpy(x_bits.view(np.int32)).to(device).view(torch.float32)
        reference_x = x_bits.view(np.float32)
    got = getattr(fast.cast, family)(x, **kwargs)["codes"]
    expected = getattr(reference.cast, family)(reference_x, **reference_kwargs)["codes"]
    assert_same_codes(got, expected, x_bits, f"{family} {params} {bits_dtype} {x.dtype}")


@pytest.mark.parametrize(
    ("family", "params", "bits_dtype"),
    VARIANTS,
    ids=VARIANT_IDS,
)
def test_variant_every_bfloat16_and_random_float32(
    family: str, params: dict[str, Any], bits_dtype: torch.dtype | None
) -> None:
    check_variant(family, params, bits_dtype, np.arange(1 << 16, dtype=np.uint16), seed=0, device="cuda")
    for index in range(VARIANT_CHUNKS):
        check_variant(family, params, bits_dtype, random_bits(index), seed=index + 1, device="cuda")


@pytest.mark.parametrize(("format", "overflow"), COMBOS)
@pytest.mark.parametrize(
    ("rounding", "bits_dtype"), [("rtz", None), ("stochastic", torch.uint8), ("stochastic", torch.uint32)]
)
def test_fp8_rounding_random_float32(format: str, overflow: str, rounding: str, bits_dtype: torch.dtype | None) -> None:
    """fp8 rtz and stochastic on the same 10^8 random float32 inputs as RNE, random bits drawn per chunk."""
    params = {"format": format, "overflow": overflow, "rounding": rounding}
    for index in range(1, RANDOM_CHUNKS):  # chunk 0 ran in the variant test
        check_variant("fp8", params, bits_dtype, random_bits(index), seed=index + 1, device="cuda")


# %% Shapes, launches, and the torch path on CUDA


@pytest.mark.parametrize("shape", [(), (0,), (1,), (4095,), (4097,), (1823, 781), (3, 0, 5), (2, 3, 4, 5)])
def test_shapes(shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, device="cuda") * 200
    for format, overflow in COMBOS:
        codes = fast_fp8(x, format=format, overflow=overflow)["codes"]
        assert codes.shape == x.shape and codes.device == x.device and codes.dtype == torch.uint8
        expected = reference_fp8(x.cpu().numpy(), format=format, overflow=overflow)["codes"]
        assert_same_codes(codes, expected, x.cpu().numpy().view(np.uint32), f"shape {shape} {format} {overflow}")


def test_more_elements_than_one_launch() -> None:
    """2^30 + 3*2^16 bfloat16 elements: two launches; every 16-bit pattern, tiled."""
    pattern = torch.arange(1 << 16, dtype=torch.int32, device="cuda").to(torch.int16)
    x = pattern.repeat((1 << 14) + 3).view(torch.bfloat16)
    codes = fast_fp8(x, format="float8_e5m2", overflow="nonsaturating")["codes"].view(-1, 1 << 16)
    one = fast_fp8(pattern.view(torch.bfloat16), format="float8_e5m2", overflow="nonsaturating")["codes"]
    mismatched_rows = torch.nonzero((codes != one).any(dim=1)).flatten().tolist()
    assert not mismatched_rows, f"rows of 2^16 codes that differ from the first: {mismatched_rows[:8]}"


def test_torch_path_on_cuda_matches_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """fast's torch path on CUDA (used where Triton is missing) agrees with the kernel; one chunk."""
    bits = random_bits(RANDOM_CHUNKS)
    x = torch.from_numpy(bits.view(np.int32)).cuda().view(torch.float32)
    for format, overflow in COMBOS:
        kernel = fast_fp8(x, format=format, overflow=overflow)["codes"]
        monkeypatch.setenv(PATH_ENV, "torch")
        expected = fast_fp8(x, format=format, overflow=overflow)["codes"].cpu().numpy()
        monkeypatch.setenv(PATH_ENV, "triton")
        assert_same_codes(kernel, expected, bits, f"kernel vs torch path on CUDA, {format} {overflow}")


# %% decode and glu on CUDA


@pytest.mark.parametrize("format", FP8_FORMATS)
def test_decode_every_code(format: str) -> None:
    codes = np.arange(256, dtype=np.uint8)
    got = fast_decode(torch.from_numpy(codes).cuda(), format=format)["values"]
    assert got.device.type == "cuda"
    got_np, expected = got.cpu().numpy(), reference_decode(codes, format=format)["values"]
    assert np.array_equal(np.isnan(got_np), np.isnan(expected))
    finite = ~np.isnan(expected)
    assert np.array_equal(got_np[finite].view(np.uint32), expected[finite].view(np.uint32))


def test_glu_interleave_bfloat16_weight() -> None:
    bits = np.random.default_rng(3).integers(0, 1 << 16, (2 * 96, 40), dtype=np.uint16)
    w = torch.from_numpy(bits.view(np.int16)).cuda().view(torch.bfloat16)
    out = interleave(w, block_size=32)["out"]
    expected = reference_interleave(bits, block_size=32)["out"]
    assert np.array_equal(out.view(torch.int16).cpu().numpy().view(np.uint16), expected)
    assert torch.equal(deinterleave(out, block_size=32)["out"].view(torch.int16), w.view(torch.int16))
