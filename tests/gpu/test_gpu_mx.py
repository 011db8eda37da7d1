"""``fast.quant.mx``, ``fast.dequant.mx`` and ``fast.layout`` on a CUDA device against the NumPy reference, bit for
bit (run by ``nox -s gpu``).

The oracle is ``reference`` (``reference.quant.mx``, ``reference.dequant.mx``, ``reference.layout``,
``reference.cast``), never a path of ``fast`` itself except where noted.  Inputs: random bfloat16 and float32
bit patterns (NaN, Inf and subnormals included), normal data with outlier and zero blocks, the torchao golden
vectors, every bfloat16 value through the kernel's rounding core.  Don't-care bytes (compact scale padding,
blocks whose scale is NaN) are masked as the reference says.
"""

from __future__ import annotations

import importlib
import itertools
import zlib

import numpy as np
import pytest
import torch

import reference.cast
from fast._triton import jit, tl
from fast.dequant.mx import mx as fast_dequant
from fast.layout import scale_swizzle, scale_unswizzle
from fast.quant.mx import BLOCKS, EDGES, MX_FORMATS, SCALE_LAYOUTS, SCALE_RULES, USAGES, mx
from reference.dequant.mx import mx as reference_dequant
from reference.layout import scale_swizzle as reference_swizzle
from reference.quant.mx import mx as reference_mx

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PATH_ENV = "QCONFORM_FAST_PATH"
mx_rounding = importlib.import_module("fast.quant.mx.rounding")
mx_launch = importlib.import_module("fast.quant.mx.launch")
e2m1_pairs = mx_rounding.e2m1_pairs
e2m1_words = mx_rounding.e2m1_words


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call here runs the Triton kernels (an error if Triton is missing, never a silent fallback).

    One fixed tile by default: every parameter set is its own compilation, and autotuning would compile each
    five or six times; ``test_every_tile`` and ``test_benchmark_shape_against_the_torch_path`` cover the tiles.
    """
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("QCONFORM_MX_TILE", "32x128x4")


def random_bits(shape: tuple[int, int], dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Random bit patterns of ``dtype`` on CUDA, and their exact float32 values on the host."""
    rng = np.random.default_rng(seed)
    if dtype == torch.float32:
        bits = rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32)
        return torch.from_numpy(bits.view(np.int32)).view(torch.float32).cuda(), bits.view(np.float32)
    bits16 = rng.integers(0, 1 << 16, shape, dtype=np.uint32).astype(np.uint16)
    tensor = torch.from_numpy(bits16.view(np.int16)).view(dtype).cuda()
    if dtype == torch.bfloat16:
        return tensor, (bits16.astype(np.uint32) << 16).view(np.float32)
    return tensor, bits16.view(np.float16).astype(np.float32)


def blocky(shape: tuple[int, int], seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """bfloat16 normal data with a per-row exponent spread, zero blocks, outliers and a few NaN/Inf."""
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
    x *= torch.from_numpy(np.exp2(rng.integers(-60, 60, (shape[0], 1))).astype(np.float32))
    x[:, 64:96] = 0
    x[::7, 5] = 5e4
    x[3, 7], x[5, 9], x[9, 200] = float("nan"), float("inf"), float("-inf")
    tensor = x.to(torch.bfloat16)
    return tensor.cuda(), tensor.float().numpy()


def assert_conforms(got: dict[str, torch.Tensor], expected: dict[str, np.ndarray], what: str) -> None:
    __tracebackhide__ = True
    for name, tensor in got.items():
        value = tensor.cpu().numpy()
        want = expected[name]
        assert value.shape == want.shape, f"{name}: shape {value.shape} vs {want.shape} [{what}]"
        bad = np.argwhere((value != want) & ~expected[f"{name}_dont_care"])
        if bad.size:
            i = tuple(bad[0])
            pytest.fail(
                f"{name}{list(i)}=0x{int(value[i]):02x}, reference 0x{int(want[i]):02x}; {len(bad)} differ [{what}]"
            )


@pytest.mark.parametrize("format", MX_FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_random_bits_every_rule_and_edge(format: str, dtype: torch.dtype) -> None:
    """1024 x 512 random patterns, both directions from one kernel, every scale rule and edge policy."""
    x, values = random_bits((1024, 512), dtype, seed=zlib.crc32(f"{format} {dtype}".encode()))
    for rule, edges in itertools.product(SCALE_RULES, EDGES):
        got = mx(x, format=format, scale_rule=rule, usage="both", edges=edges)
        expected = reference_mx(values, format=format, scale_rule=rule, usage="both", edges=edges)
        assert_conforms(got, expected, f"{format} {dtype} {rule} {edges}")


@pytest.mark.parametrize(("usage", "blocks", "layout"), list(itertools.product(USAGES, BLOCKS, SCALE_LAYOUTS)))
def test_every_direction_block_and_layout(usage: str, blocks: str, layout: str) -> None:
    """4096 x 2048 (and ragged 4099 x 2048 / 4096 x 2050 where the blocks allow) for FP8 and packed FP4."""
    rows = 4099 if usage == "rowwise" and blocks == "1d" else 4096
    cols = 2050 if usage == "columnwise" and blocks == "1d" else 2048
    x, values = blocky((rows, cols), seed=1)
    for format, rule, edges in (("float8_e4m3fn", "rceil", "te"), ("float4_e2m1fn", "floor", "torchao")):
        params = {"format": format, "scale_rule": rule, "usage": usage, "blocks": blocks, "edges": edges}
        got = mx(x, scale_layout=layout, **params)
        expected = reference_mx(values, scale_layout=layout, **params)
        assert_conforms(got, expected, f"{params} {layout}")


@pytest.mark.parametrize("usage", ["rowwise", "both"])
def test_every_tile(monkeypatch: pytest.MonkeyPatch, usage: str) -> None:
    """Every tile the autotuner may pick, on a ragged shape (and an even one), against the reference."""
    rows_of_32 = usage != "rowwise"
    for tile in mx_launch._autotune_configs(rows_of_32):
        monkeypatch.setenv("QCONFORM_MX_TILE", "x".join(str(part) for part in tile if part is not None))
        for shape in ((544, 608), (1024, 1024)) if rows_of_32 else ((555, 608), (1024, 1024)):
            x, values = blocky(shape, seed=6)
            got = mx(x, format="float4_e2m1fn", scale_rule="even", usage=usage, scale_layout="swizzled")
            expected = reference_mx(
                values, format="float4_e2m1fn", scale_rule="even", usage=usage, scale_layout="swizzled"
            )
            assert_conforms(got, expected, f"tile {tile} {shape}")


@pytest.mark.parametrize("usage", USAGES)
def test_benchmark_shape_against_the_torch_path(monkeypatch: pytest.MonkeyPatch, usage: str) -> None:
    """bfloat16 8192 x 8192: the autotuned kernel against ``fast``'s torch path on the same GPU."""
    monkeypatch.delenv("QCONFORM_MX_TILE")
    x = (torch.randn(8192, 8192, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 64).bfloat16()
    kernel = mx(x, format="float8_e4m3fn", scale_rule="rceil", usage=usage, scale_layout="swizzled")
    monkeypatch.setenv(PATH_ENV, "torch")
    torch_path = mx(x, format="float8_e4m3fn", scale_rule="rceil", usage=usage, scale_layout="swizzled")
    for name in kernel:
        assert torch.equal(kernel[name], torch_path[name]), name


def test_cached_launch_and_graph_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Autotuned: the first call (Triton's JITFunction), a repeated call (the cached ``CompiledKernel`` launch) and a
    call captured in a CUDA graph and replayed all give the reference's bytes."""
    monkeypatch.delenv("QCONFORM_MX_TILE")
    x, values = blocky((1024, 2048), seed=7)
    params = {"format": "float8_e4m3fn", "scale_rule": "rceil", "usage": "both", "scale_layout": "swizzled"}
    expected = reference_mx(values, **params)
    first = mx(x, **params)
    again = mx(x, **params)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = mx(x, **params)
    graph.replay()
    for got, what in ((first, "first call"), (again, "cached launch"), (captured, "graph replay")):
        assert_conforms(got, expected, what)


def _e2m1_pairs_kernel(values_ptr, packed_ptr, n_pairs, BLOCK: tl.constexpr):
    """``_e2m1_pairs`` of consecutive value pairs, each value scaled by ``2**-5`` as the MX kernel passes them."""
    pair = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    value = tl.load(values_ptr + 2 * pair[:, None] + tl.arange(0, 2)[None, :], mask=(pair < n_pairs)[:, None])
    low, high = tl.split(value * 0.03125)
    tl.store(packed_ptr + pair, e2m1_pairs(low, high), mask=pair < n_pairs)


@pytest.mark.parametrize("source", ["bfloat16", "float16"])
def test_e2m1_pairs_every_value(source: str) -> None:
    """The float16x2 E2M1 core (``_e2m1_pairs``, the kernel's for float16 inputs) against ``reference.cast.fp4``
    (saturating RNE, NaN -> +max): every bfloat16 or float16 value (both NaN signs, Inf, subnormals) times powers of
    two from ``2**-130`` to ``2**100`` (which push values through every E2M1 binade, float16 subnormals and float32
    subnormals), in shuffled pairs."""
    codes = np.arange(1 << 16, dtype=np.uint32)
    base = (codes << 16).view(np.float32) if source == "bfloat16" else codes.astype(np.uint16).view(np.float16)
    with np.errstate(all="ignore"):
        values = np.concatenate([(base.astype(np.float64) * 2.0**k).astype(np.float32) for k in range(-130, 101, 7)])
    values = values[np.random.default_rng(5).permutation(values.size)]
    packed = torch.empty(values.size // 2, dtype=torch.uint8, device="cuda")
    grid = (-(-packed.numel() // 1024),)
    jit(_e2m1_pairs_kernel)[grid](torch.from_numpy(values).to(packed.device), packed, packed.numel(), BLOCK=1024)
    expected = reference.cast.fp4(values, format="float4_e2m1fn", nan="max")["codes"]
    expected = expected[0::2] | (expected[1::2] << 4)
    got = packed.cpu().numpy()
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (
        f"{bad.size} bytes differ; first pair {values[2 * bad[0] : 2 * bad[0] + 2]!r} -> 0x{int(got[bad[0]]):02x}, "
        f"reference 0x{int(expected[bad[0]]):02x}"
    )


def _e2m1_words_kernel(words_ptr, reciprocal_ptr, packed_ptr, n_words, BLOCK: tl.constexpr):
    """``_e2m1_words`` of int32 words of bfloat16 pairs and their words of bfloat16 reciprocals."""
    word = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    words = tl.load(words_ptr + word, mask=word < n_words)
    reciprocal = tl.load(reciprocal_ptr + word, mask=word < n_words)
    tl.store(packed_ptr + word, e2m1_words(words, reciprocal), mask=word < n_words)


def test_e2m1_words_every_value() -> None:
    """The bfloat16x2 E2M1 core (``_e2m1_words``, the kernel's for bfloat16 inputs) against ``reference.cast.fp4`` of
    the float32 product (saturating RNE, NaN -> +max): every bfloat16 value (both NaN signs, Inf, subnormals), 40
    times, in shuffled pairs, each element with its own reciprocal ``2**(127 - s)`` of a scale byte ``s`` from 0
    to 254 (``2**-127``, a bfloat16 subnormal, at 254; ``2**126`` and 1, torchao 0.18's reciprocals of 0, among
    them), which push values through every E2M1 binade and bfloat16 subnormal products."""
    rng = np.random.default_rng(9)
    bits = rng.permutation(np.tile(np.arange(1 << 16, dtype=np.uint32), 40))
    scale = rng.integers(0, 255, bits.size)
    reciprocal = np.where(scale == 254, 0x40, (254 - scale) << 7).astype(np.uint32)
    values = (bits << 16).view(np.float32)
    with np.errstate(all="ignore"):
        products = (values.astype(np.float64) * (reciprocal << 16).view(np.float32)).astype(np.float32)
    words = (bits[0::2] | (bits[1::2] << 16)).view(np.int32)
    reciprocals = (reciprocal[0::2] | (reciprocal[1::2] << 16)).view(np.int32)
    packed = torch.empty(words.size, dtype=torch.uint8, device="cuda")
    grid = (-(-words.size // 1024),)
    jit(_e2m1_words_kernel)[grid](
        torch.from_numpy(words).cuda(), torch.from_numpy(reciprocals).cuda(), packed, words.size, BLOCK=1024
    )
    expected = reference.cast.fp4(products, format="float4_e2m1fn", nan="max")["codes"]
    expected = expected[0::2] | (expected[1::2] << 4)
    got = packed.cpu().numpy()
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (
        f"{bad.size} bytes differ; first pair {values[2 * bad[0] : 2 * bad[0] + 2]!r} times "
        f"2**{127 - scale[2 * bad[0]]}, 2**{127 - scale[2 * bad[0] + 1]} -> 0x{int(got[bad[0]]):02x}, "
        f"reference 0x{int(expected[bad[0]]):02x}"
    )


def test_golden_torchao_vectors() -> None:
    with np.load("tests/vectors/torchao018_to_mx_h100.npz") as archive:
        vectors = {name: archive[name] for name in archive.files}
    x = torch.from_numpy(vectors["x"]).to(torch.bfloat16).cuda()
    for format, rule, prefix in (
        ("float8_e4m3fn", "floor", ""),
        ("float8_e4m3fn", "rceil", ""),
        ("float4_e2m1fn", "floor", "fp4"),
    ):
        out = mx(x, format=format, scale_rule=rule)
        assert np.array_equal(out["data_rowwise"].cpu().numpy(), vectors[f"{prefix}data_{rule.upper()}"])
        assert np.array_equal(out["scale_rowwise"][:64, :8].cpu().numpy(), vectors[f"{prefix}scale_{rule.upper()}"])


@pytest.mark.parametrize("format", MX_FORMATS)
def test_dequant_against_the_reference(format: str) -> None:
    rng = np.random.default_rng(3)
    bits = 4 if format == "float4_e2m1fn" else 6 if format.startswith("float6") else 8
    for usage, layout in itertools.product(("rowwise", "columnwise"), SCALE_LAYOUTS):
        data = rng.integers(0, 256 if bits == 4 else 1 << bits, (1024, 512 if bits == 4 else 1024), dtype=np.uint8)
        shape = (1024, 32) if usage == "rowwise" else (32, 1024)
        scale = rng.integers(0, 256, shape, dtype=np.uint8)
        got = (
            fast_dequant(
                torch.from_numpy(data).cuda(),
                torch.from_numpy(scale).cuda(),
                format=format,
                usage=usage,
                scale_layout=layout,
            )["x"]
            .cpu()
            .numpy()
        )
        expected = reference_dequant(data, scale, format=format, usage=usage, scale_layout=layout)["x"]
        same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
        assert same.all(), f"{usage} {layout}: {int((~same).sum())} values differ"


@pytest.mark.parametrize("shape", [(1, 1), (129, 9), (8192, 256), (8192, 1024)])
def test_layout_against_the_reference(shape: tuple[int, int]) -> None:
    scale = np.random.default_rng(4).integers(0, 256, shape, dtype=np.uint8)
    swizzled = scale_swizzle(torch.from_numpy(scale).cuda())["swizzled"]
    assert np.array_equal(swizzled.cpu().numpy(), reference_swizzle(scale)["swizzled"])
    back = scale_unswizzle(swizzled)["scale"].cpu().numpy()
    assert np.array_equal(back[: shape[0], : shape[1]], scale)
