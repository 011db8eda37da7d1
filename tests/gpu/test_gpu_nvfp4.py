"""``fast.quant.nvfp4`` / ``fast.dequant.nvfp4`` Triton kernels on a CUDA device against the NumPy reference,
bit for bit (run by ``nox -s gpu``).

Inputs: every bfloat16 pattern laid out as a 256 x 256 matrix (NaN, Inf, subnormals: the scale edge cases
and blocks whose scale rounds to zero); 2048 x 4096 matrices of normal values whose 16-element blocks span
2**±20 (so every E4M3 block scale occurs; whole tiles of every kernel); an irregular 1040 x 4112 shape
(ragged tiles in both directions); float32 and float16 inputs.  The reference runs on the host (about a
second per operand of 2^23 elements).  8192 x 8192, 8160 x 8192 and 8192 x 8160 (ragged rows, columns) against
the torch path.  A given amax (``amax_source="given"``, the quantize kernels alone): equal to the computed path
when it is the true amax (8192 x 8192 and a ragged 8160 x 8176), and against the reference when it is below the
data's (saturating block scales and elements), NaN or negative.
"""

from __future__ import annotations

import functools
import importlib
import itertools
from typing import Any

import numpy as np
import pytest
import torch

import reference.cast
from fast._triton import jit, tl
from fast.dequant.nvfp4 import nvfp4 as fast_dequantize
from fast.quant.nvfp4 import PATH_ENV
from fast.quant.nvfp4 import nvfp4 as fast_nvfp4
from fast.stochastic import nvfp4 as fast_stochastic
from reference.dequant.nvfp4 import nvfp4 as reference_dequantize
from reference.quant.nvfp4 import nvfp4 as reference_nvfp4

rounding_module = importlib.import_module("fast.quant.nvfp4.rounding")
e2m1_pairs = rounding_module.e2m1_pairs
e2m1_stochastic = rounding_module.e2m1_stochastic
bfloat16_rne = rounding_module.bfloat16_rne
bfloat16_rne_interpreted = rounding_module._bfloat16_rne_interpreted
e4m3_scale = rounding_module.e4m3_scale
reciprocal = rounding_module.reciprocal_rn
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call here runs the Triton kernels (an error if Triton is missing, never a silent fallback)."""
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def carrier(x: torch.Tensor) -> np.ndarray:
    x = x.cpu()
    if x.dtype == torch.bfloat16:
        return (x.view(torch.int16).numpy().astype(np.int32).astype(np.uint32) << 16).view(np.float32)
    return x.numpy()


@functools.cache
def every_bfloat16() -> torch.Tensor:
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    return (
        bits[torch.randperm(1 << 16, generator=torch.Generator().manual_seed(3))].view(torch.bfloat16).reshape(256, 256)
    )


@functools.cache
def spread_matrix(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(rows * 7 + cols)
    spread = 2.0 ** torch.randint(-20, 21, (rows, cols // 16, 1), generator=generator).float()
    values = torch.randn((rows, cols // 16, 16), generator=generator) * spread
    return values.reshape(rows, cols).to(dtype)


def assert_same(x: torch.Tensor, **params: Any) -> None:
    __tracebackhide__ = True
    arrays = {k: v.cpu().numpy() for k, v in params.items() if isinstance(v, torch.Tensor)}
    settings = {k: v for k, v in params.items() if not isinstance(v, torch.Tensor)}
    expected = reference_nvfp4(carrier(x), **settings, **arrays)
    got = fast_nvfp4(x.cuda(), **{k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in params.items()})
    for name, tensor in got.items():
        g, e = tensor.cpu().numpy(), expected[name]
        same = g.view(np.uint32) == e.view(np.uint32) if g.dtype == np.float32 else g == e
        if g.dtype == np.float32:
            same |= np.isnan(g) & np.isnan(e)
        if name.endswith("scales"):
            same |= ((g & 0x7F) == 0x7F) & ((e & 0x7F) == 0x7F)
        if name.endswith("data"):
            same |= expected[f"{name}_dont_care"]
        if not same.all():
            where = np.argwhere(~same)[:4].tolist()
            pytest.fail(f"{name}: {(~same).sum()} of {same.size} differ, first at {where} [{settings}, {x.dtype}]")


TE_VARIANTS = [
    {"usage": u, "block": b, "rht": r, "zero_scale": z}
    for u, b, r, z in itertools.product(
        ["both", "rowwise", "columnwise"], ["1x16", "16x16"], [False, True], ["flt_max", "zero"]
    )
    if not (u == "rowwise" and r)
]
IDS = [",".join(str(v) for v in p.values()) for p in TE_VARIANTS]


@pytest.mark.parametrize("params", TE_VARIANTS, ids=IDS)
def test_every_bfloat16_pattern(params: dict[str, Any]) -> None:
    assert_same(every_bfloat16(), **params)


@pytest.mark.parametrize("params", TE_VARIANTS, ids=IDS)
def test_spread_bfloat16(params: dict[str, Any]) -> None:
    assert_same(spread_matrix(2048, 4096, torch.bfloat16), **params)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
def test_irregular_shape(dtype: torch.dtype, usage: str) -> None:
    assert_same(spread_matrix(1040, 4112, dtype), usage=usage)
    assert_same(spread_matrix(1040, 4112, dtype), usage=usage, rht=usage != "rowwise", block="16x16")


@pytest.mark.parametrize("rule", ["torchao", "torchao_cuda"])
def test_torchao_rules(rule: str) -> None:
    for x in (every_bfloat16(), spread_matrix(1024, 2048, torch.bfloat16)):
        assert_same(x, scale_rule=rule)


def test_row_scaled() -> None:
    for x in (every_bfloat16(), spread_matrix(1040, 4112, torch.bfloat16)):
        assert_same(x, amax_scope="row")
        assert_same(x, amax_scope="row", usage="rowwise")


def random_bits(shape: tuple[int, int], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    drawn = torch.randint(-(2**31), 2**31, shape, generator=generator, dtype=torch.int64).to(torch.int32)
    return drawn.view(torch.uint32) if dtype == torch.uint32 else drawn.to(torch.uint8)


@pytest.mark.parametrize(("rows_dtype", "columns_dtype"), [(torch.uint8, torch.uint8), (torch.uint32, torch.uint8)])
def test_stochastic_with_explicit_bits(rows_dtype: torch.dtype, columns_dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(11)
    for x, rht in ((every_bfloat16(), False), (spread_matrix(1040, 4112, torch.bfloat16), True)):
        rows, cols = x.shape
        assert_same(
            x,
            rounding="stochastic",
            rht=rht,
            random_bits=random_bits((rows, cols), rows_dtype, generator),
            columnwise_random_bits=random_bits((cols, rows), columns_dtype, generator),
        )


@pytest.mark.parametrize("bits_dtype", [torch.uint8, torch.uint32])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_rowwise_stochastic(bits_dtype: torch.dtype, dtype: torch.dtype) -> None:
    """The rowwise kernel's stochastic path, on whole tiles and on ragged ones."""
    generator = torch.Generator().manual_seed(12)
    for x in (every_bfloat16().to(dtype), spread_matrix(2048, 4096, dtype), spread_matrix(1040, 4112, dtype)):
        bits = random_bits(tuple(x.shape), bits_dtype, generator)
        assert_same(x, usage="rowwise", rounding="stochastic", random_bits=bits)


@pytest.mark.parametrize("shape", [(8192, 8192), (8160, 8192), (8192, 8160)], ids=["whole", "rows", "columns"])
def test_kernels_match_the_torch_path_on_a_large_matrix(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, int]
) -> None:
    x = spread_matrix(*shape, torch.bfloat16).cuda()
    for params in (
        {"usage": "rowwise"},
        {"usage": "both"},
        {"usage": "columnwise"},
        {"usage": "both", "rht": True, "block": "16x16"},
    ):
        kernel = fast_nvfp4(x, **params)
        monkeypatch.setenv(PATH_ENV, "torch")
        torch_path = fast_nvfp4(x, **params)
        monkeypatch.setenv(PATH_ENV, "triton")
        for name in kernel:
            assert torch.equal(kernel[name].view(torch.uint8), torch_path[name].view(torch.uint8)), name


GIVEN_VARIANTS = [
    {"usage": "rowwise"},
    {"usage": "both"},
    {"usage": "columnwise"},
    {"usage": "both", "block": "16x16"},  # the operands' codes are not shared: their given amaxes may differ
    {"usage": "both", "rht": True},
    {"usage": "rowwise", "scale_rule": "torchao_cuda"},
]


@pytest.mark.parametrize("shape", [(8192, 8192), (8160, 8176)], ids=["whole", "ragged"])
def test_given_true_amax_equals_the_computed_path(shape: tuple[int, int]) -> None:
    x = spread_matrix(*shape, torch.bfloat16).cuda()
    for params in GIVEN_VARIANTS:
        computed = fast_nvfp4(x, **params)
        amaxes = {k: v for k, v in computed.items() if k in ("amax", "columnwise_amax")}
        got = fast_nvfp4(x, amax_source="given", **amaxes, **params)
        for name in computed:
            assert torch.equal(got[name].view(torch.uint8), computed[name].view(torch.uint8)), (params, name)


@pytest.mark.parametrize("params", GIVEN_VARIANTS, ids=[",".join(str(v) for v in p.values()) for p in GIVEN_VARIANTS])
def test_given_amax_against_the_reference(params: dict[str, Any]) -> None:
    """Given amaxes below the data's (a sixteenth of its finite amax: saturating block scales and elements), NaN
    and negative; the columnwise operand's is half the rowwise one's (the kernels must not mix them up)."""
    for x in (every_bfloat16(), spread_matrix(1040, 4112, torch.bfloat16)):
        values = carrier(x)
        below = float(np.abs(values[np.isfinite(values)]).max()) / 16
        for amax in (below, float("nan"), -below):
            given = torch.tensor([amax], dtype=torch.float32)
            amaxes = {"amax": given, "columnwise_amax": given * 0.5}
            if params["usage"] != "both":
                amaxes.pop("columnwise_amax" if params["usage"] == "rowwise" else "amax")
            assert_same(x, amax_source="given", **amaxes, **params)


@pytest.mark.parametrize("shape", [(1040, 2056), (1024, 2048)], ids=["ragged", "whole_tiles"])
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
def test_dequantize(out_dtype: str, shape: tuple[int, int]) -> None:
    """Random bytes and scale codes: every E2M1 code (0x8 is -0), every E4M3 code (0x80 is -0, 0x7F/0xFF NaN)."""
    generator = torch.Generator().manual_seed(5)
    rows, data_bytes = shape
    data = torch.randint(0, 256, shape, generator=generator, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(0, 256, (rows, data_bytes // 8), generator=generator, dtype=torch.int32).to(torch.uint8)
    for rule, scope in (("te", "tensor"), ("te", "row"), ("torchao", "tensor")):
        scale = torch.rand(rows if scope == "row" else 1, generator=generator) * 3000
        name = "amax" if rule == "te" else "tensor_scale"
        params = {"scale_rule": rule, "amax_scope": scope, "out_dtype": out_dtype}
        got = fast_dequantize(data.cuda(), scales.cuda(), **{name: scale.cuda()}, **params)["x"].cpu().numpy()
        expected = reference_dequantize(data.numpy(), scales.numpy(), **{name: scale.numpy()}, **params)["x"]
        same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
        assert same.all(), (rule, scope, np.argwhere(~same)[:4].tolist())


def test_stochastic_with_the_cuda_generator_is_unbiased() -> None:
    x = spread_matrix(16, 64, torch.bfloat16).cuda()
    codes = fast_stochastic(x, draws=20000)["codes"].cpu().numpy()
    base = reference_nvfp4(
        carrier(x), usage="rowwise", rounding="stochastic", random_bits=np.zeros((16, 64), np.uint32)
    )
    top = reference_nvfp4(
        carrier(x), usage="rowwise", rounding="stochastic", random_bits=np.full((16, 64), 0xFFFFFFFF, np.uint32)
    )
    lower = np.stack([base["data"] & 15, base["data"] >> 4], axis=-1).reshape(16, 64)
    upper = np.stack([top["data"] & 15, top["data"] >> 4], axis=-1).reshape(16, 64)
    assert ((codes == lower) | (codes == upper)).all()


# %% Device functions on the hardware


def _device_functions_kernel(
    values_ptr, packed_ptr, codes_ptr, scales_ptr, reciprocals_ptr, one, n_pairs, BLOCK: tl.constexpr
):
    """For pairs of float32 ``v``: ``_e2m1_pairs(v * one)`` (a product, as the kernels pass them: NaN canonical), and
    on each ``v`` ``_e4m3_scale`` (code, value; negative targets come from a negative given amax) and on each
    ``|v|`` ``_reciprocal``."""
    pair = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = pair < n_pairs
    offsets = 2 * pair[:, None] + tl.arange(0, 2)[None, :]
    value = tl.load(values_ptr + offsets, mask=ok[:, None]) * one
    low, high = tl.split(value)
    tl.store(packed_ptr + pair, e2m1_pairs(low, high), mask=ok)
    code, scale = e4m3_scale(value)
    tl.store(codes_ptr + offsets, code.to(tl.uint8), mask=ok[:, None])
    tl.store(scales_ptr + offsets, scale, mask=ok[:, None])
    tl.store(reciprocals_ptr + offsets, reciprocal(tl.abs(value)), mask=ok[:, None])


def _probe_values() -> np.ndarray:
    """float32: every value within 2**14 ulps of each E2M1 midpoint and grid point and of float16's limits (2**-24,
    2**-14, 65504, 65520), both signs; every bfloat16 value times powers of two from 2**-130 to 2**100 (every E2M1
    binade, float16 and float32 subnormals, both NaN signs, Inf); 2**20 random float32 patterns."""
    anchors = np.array([0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 2.0**-24, 2.0**-14, 65504, 65520])
    near = (anchors.astype(np.float32).view(np.int32)[:, None] + np.arange(-(2**14), 2**14 + 1)[None, :]).ravel()
    near = near.astype(np.int32).view(np.float32)
    codes = np.arange(1 << 16, dtype=np.uint32)
    bf16 = (codes << 16).view(np.float32)
    with np.errstate(all="ignore"):
        scaled = np.concatenate([(bf16.astype(np.float64) * 2.0**k).astype(np.float32) for k in range(-130, 101, 7)])
    random = np.random.default_rng(7).integers(0, 2**32, 2**20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = np.concatenate([near, -near, scaled, random])
    values = values[np.random.default_rng(5).permutation(values.size)]
    return values[: values.size // 2 * 2]


def test_device_functions_against_the_reference() -> None:
    """``_e2m1_pairs`` (float16x2 after rounding to odd) against ``reference.cast.fp4`` (saturating RNE, NaN -> +6)
    near every midpoint, where rounding through float16 to nearest would round twice; ``_e4m3_scale`` against
    ``reference.cast.fp8`` (saturating, both signs) and its decoded value; ``_reciprocal`` (``rcp.rn.f32``) against
    NumPy's float32 ``1 / v`` (IEEE, subnormals kept)."""
    values = _probe_values()
    n = values.size
    device_values = torch.from_numpy(values).cuda()
    packed = torch.empty(n // 2, dtype=torch.uint8, device="cuda")
    codes = torch.empty(n, dtype=torch.uint8, device="cuda")
    scales = torch.empty(n, dtype=torch.float32, device="cuda")
    reciprocals = torch.empty(n, dtype=torch.float32, device="cuda")
    grid = (-(-(n // 2) // 1024),)
    jit(_device_functions_kernel)[grid](device_values, packed, codes, scales, reciprocals, 1.0, n // 2, BLOCK=1024)

    expected = reference.cast.fp4(values, format="float4_e2m1fn", nan="max")["codes"]
    expected = expected[0::2] | (expected[1::2] << 4)
    got = packed.cpu().numpy()
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (
        f"_e2m1_pairs: {bad.size} bytes differ; first pair {values[2 * bad[0] : 2 * bad[0] + 2]!r} -> "
        f"0x{int(got[bad[0]]):02x}, reference 0x{int(expected[bad[0]]):02x}"
    )

    magnitude = np.abs(values)
    e4m3 = reference.cast.fp8(values, format="float8_e4m3fn", overflow="saturate")["codes"]
    got_codes = codes.cpu().numpy()
    nan_code = np.isnan(magnitude)
    assert ((got_codes == e4m3) | (nan_code & (got_codes == 0x7F))).all(), np.flatnonzero(got_codes != e4m3)[:4]
    exponent, mantissa = (e4m3.astype(np.int32) >> 3) & 15, e4m3.astype(np.int32) & 7
    decoded = np.where(exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8) * 2.0 ** (exponent - 7.0))
    decoded = np.where(e4m3 & 0x80, -decoded, decoded)
    got_scales = scales.cpu().numpy()
    assert ((got_scales == decoded.astype(np.float32)) | (nan_code & np.isnan(got_scales))).all()

    with np.errstate(all="ignore"):
        inverse = np.float32(1) / magnitude
    got_inverse = reciprocals.cpu().numpy()
    same = (got_inverse.view(np.uint32) == inverse.view(np.uint32)) | (np.isnan(got_inverse) & np.isnan(inverse))
    assert same.all(), f"_reciprocal differs at {magnitude[~same][:4]!r}"


def _stochastic_kernel(values_ptr, random_ptr, codes_ptr, one, n, RANDOM_BITS: tl.constexpr, BLOCK: tl.constexpr):
    """``_e2m1_stochastic(v * one, r)`` for float32 ``v`` and int32 random values ``r``."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offsets < n
    value = tl.load(values_ptr + offsets, mask=ok) * one
    random = tl.load(random_ptr + offsets, mask=ok)
    tl.store(codes_ptr + offsets, e2m1_stochastic(value, random, RANDOM_BITS).to(tl.uint8), mask=ok)


def _stochastic_probes() -> np.ndarray:
    """float32 magnitudes at and within 4 ulps of every multiple of a 256th of the E2M1 step in [0, 6] (where the
    rounding turns from down to up for some ``r``), of 6, float16's and float32's limits, both signs; NaN of both
    signs, Inf, float32 subnormals; 2**16 random float32 patterns."""
    steps = [np.arange(1024) * 2.0**-9, 2 + np.arange(512) * 2.0**-8, 4 + np.arange(257) * 2.0**-7]
    anchors = np.concatenate([*steps, [2.0**-126, 65504, 1e38]]).astype(np.float32)
    near = (anchors.view(np.int32)[:, None] + np.arange(-4, 5)[None, :]).ravel()
    near = near[(near >= 0) & (near < 0x7F800000)].astype(np.int32).view(np.float32)
    special = np.array([np.inf, np.nan, 1e-45, 2.0**-140], dtype=np.float32)
    random = np.random.default_rng(8).integers(0, 2**32, 2**16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([near, -near, special, -special, random])


def test_stochastic_device_function_against_the_reference() -> None:
    """``_e2m1_stochastic`` with 8 random bits (``fma.rm`` / ``add.rm`` floors) against ``reference.cast.fp4``'s
    stochastic rounding, every probe value with each of the 256 random values; with 32 random bits (the generic
    rounding) on the same values with random 32-bit values."""
    probes = _stochastic_probes()
    for random_bits in (8, 32):
        if random_bits == 8:
            values = np.repeat(probes, 256)
            random = np.tile(np.arange(256, dtype=np.uint32), probes.size)
        else:
            values = np.repeat(probes, 4)
            random = np.random.default_rng(9).integers(0, 2**32, values.size, dtype=np.uint64).astype(np.uint32)
        n = values.size
        codes = torch.empty(n, dtype=torch.uint8, device="cuda")
        device_random = torch.from_numpy(random.view(np.int32)).cuda()
        grid = (-(-n // 1024),)
        jit(_stochastic_kernel)[grid](
            torch.from_numpy(values).cuda(), device_random, codes, 1.0, n, RANDOM_BITS=random_bits, BLOCK=1024
        )
        bits = random.astype(np.uint8) if random_bits == 8 else random
        expected = reference.cast.fp4(
            values, format="float4_e2m1fn", rounding="stochastic", nan="max", random_bits=bits
        )
        got = codes.cpu().numpy()
        bad = np.flatnonzero(got != expected["codes"])
        assert bad.size == 0, (
            f"{random_bits} bits: {bad.size} codes differ; first {values[bad[0]]!r} with r={int(random[bad[0]])}: "
            f"0x{int(got[bad[0]]):x}, reference 0x{int(expected['codes'][bad[0]]):x}"
        )


def _bfloat16_kernel(mismatches_ptr, first_ptr, BLOCK: tl.constexpr):
    """Counts the float32 patterns ``program * BLOCK + i`` (as int32) whose ``_bfloat16_rne`` (the hardware
    conversion) differs from the integer rounding of ``_bfloat16_rne_interpreted``, NaN against NaN allowed."""
    bits = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)).to(tl.int32)
    v = bits.to(tl.float32, bitcast=True)
    got = bfloat16_rne(v)
    want = bfloat16_rne_interpreted(v)
    bad = (got.to(tl.int32, bitcast=True) != want.to(tl.int32, bitcast=True)) & ((got == got) | (want == want))
    count = tl.sum(bad.to(tl.int32))
    tl.atomic_add(mismatches_ptr, count)
    tl.atomic_min(first_ptr, tl.min(tl.where(bad, bits, 2147483647)))


def test_bfloat16_rounding_on_every_float32() -> None:
    """``_bfloat16_rne`` (the RHT's rounding, by the hardware conversion) equals the contract's integer rounding to
    nearest even on all 2**32 float32 patterns (subnormals, overflow to Inf); NaN stays NaN."""
    mismatches = torch.zeros(1, dtype=torch.int32, device="cuda")
    first = torch.full((1,), 2**31 - 1, dtype=torch.int32, device="cuda")
    jit(_bfloat16_kernel)[(2**32 // 4096,)](mismatches, first, BLOCK=4096)
    assert int(mismatches.item()) == 0, f"{int(mismatches.item())} patterns differ, e.g. 0x{int(first.item()):08x}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_columnwise_on_whole_tiles_runs_the_gluon_kernel(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    """Where Triton has Gluon, the columnwise operand alone from 16-bit input on whole 128 x 64 tiles with round to
    nearest and TE's scale rule is the kernel of ``fast.quant.nvfp4.gluon``: against the reference on every bit
    pattern of ``dtype`` (NaN, Inf, subnormals: blocks whose scale rounds to zero) and on blocks spanning 2**+-20,
    under both zero-scale rules, from a computed amax and from given ones (below the data's, NaN, negative).  Other
    settings, float32 and ragged shapes take the Triton kernel."""
    gluon_module = pytest.importorskip("fast.quant.nvfp4.gluon", exc_type=ImportError)
    launches: list[tuple[int, int]] = []
    launch = gluon_module.quantize_columnwise

    def counted(x: torch.Tensor, *args: Any) -> None:
        launches.append(tuple(x.shape))
        launch(x, *args)

    monkeypatch.setattr(gluon_module, "quantize_columnwise", counted)
    every_pattern = every_bfloat16().view(dtype)
    for x in (every_pattern, spread_matrix(1024, 2048, dtype)):
        values = carrier(x)
        below = float(np.abs(values[np.isfinite(values)]).max()) / 16
        for zero_scale in ("flt_max", "zero"):
            assert_same(x, usage="columnwise", zero_scale=zero_scale)
        for amax in (below, float("nan"), -below):
            given = torch.tensor([amax], dtype=torch.float32)
            assert_same(x, usage="columnwise", amax_source="given", columnwise_amax=given)
    assert launches == [(256, 256)] * 5 + [(1024, 2048)] * 5
    bits = torch.zeros((256, 256), dtype=torch.uint8, device="cuda")
    stochastic = {"rounding": "stochastic", "columnwise_random_bits": bits}
    for params in (
        stochastic,
        {"rht": True},
        {"block": "16x16"},
        {"scale_rule": "torchao"},
        {"scale_rule": "torchao_cuda"},
    ):
        fast_nvfp4(every_pattern.cuda(), usage="columnwise", **params)
    fast_nvfp4(spread_matrix(1040, 4112, dtype).cuda(), usage="columnwise")
    fast_nvfp4(every_pattern.float().cuda(), usage="columnwise")
    assert len(launches) == 10
