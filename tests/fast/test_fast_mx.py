"""``fast.quant.mx``, ``fast.dequant.mx`` and ``fast.layout`` on CPU: the torch paths and the Triton kernels (in
Triton's interpreter, small shapes) against the NumPy reference, the kernel's rounding core over every bfloat16
value, path selection and argument checks.

Comparisons honour the reference's don't-care masks (compact scale padding, elements of blocks whose scale
is NaN); ``fast`` zero-fills scale padding, which is checked separately.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import types
from typing import Any

import numpy as np
import pytest
import torch

import reference.cast
from fast._triton import LaunchCache, fp8_code, jit, tl
from fast.dequant.mx import mx as fast_dequant
from fast.layout import scale_swizzle, scale_unswizzle
from fast.quant.mx import BLOCKS, EDGES, MX_FORMATS, SCALE_LAYOUTS, SCALE_RULES, USAGES, mx, mx_code
from reference.dequant.mx import mx as reference_dequant
from reference.layout import scale_swizzle as reference_swizzle
from reference.quant.mx import mx as reference_mx

PATH_ENV = "QCONFORM_FAST_PATH"
fast_mx_module = importlib.import_module("fast.quant.mx")
mx_plan = importlib.import_module("fast.quant.mx.plan")
mx_launch = importlib.import_module("fast.quant.mx.launch")
mx_kernels = importlib.import_module("fast.quant.mx.kernels")


def use_path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    if path == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(PATH_ENV, path)


def bf16_bits(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Random bfloat16 patterns (NaN, Inf, subnormals included): the tensor and its float32 values."""
    bits = np.random.default_rng(seed).integers(0, 1 << 16, shape, dtype=np.uint32).astype(np.uint16)
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16), (bits.astype(np.uint32) << 16).view(np.float32)


def blocky(shape: tuple[int, int], seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, np.ndarray]:
    """Normal values with a per-row exponent spread, a zero block, an outlier column, tiny rows, NaN and Inf."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, (shape[0], 1)))).astype(np.float32)
    x[:, :32] = 0
    x[::5, 33] = 3e4
    x[1::7] *= np.float32(2.0**-100)
    x[2, 40], x[3, 41], x[4, 42] = np.nan, np.inf, -np.inf
    tensor = torch.from_numpy(x).to(dtype)
    return tensor, tensor.float().numpy()


def assert_conforms(got: dict[str, torch.Tensor], expected: dict[str, np.ndarray], what: str) -> None:
    __tracebackhide__ = True
    assert sorted(got) == sorted(k for k in expected if not k.endswith("_dont_care")), what
    for name, tensor in got.items():
        value = tensor.cpu().numpy()
        want = expected[name]
        assert value.shape == want.shape, f"{name}: shape {value.shape}, but reference gives {want.shape} [{what}]"
        bad = np.argwhere((value != want) & ~expected[f"{name}_dont_care"])
        if bad.size:
            i = tuple(bad[0])
            pytest.fail(
                f"{name}{list(i)}=0x{int(value[i]):02x}, but reference gives 0x{int(want[i]):02x}; "
                f"{len(bad)} of {want.size} differ [{what}]"
            )
        if name.startswith("scale"):
            assert not value[expected[f"{name}_dont_care"]].any(), f"{name}: padding not zeroed [{what}]"


# %% Torch path and kernel against the reference


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize("format", MX_FORMATS)
def test_every_rule_and_edge_both_directions(monkeypatch: pytest.MonkeyPatch, path: str, format: str) -> None:
    use_path(monkeypatch, path)
    x, values = bf16_bits((64, 96), seed=len(format))
    for rule, edges in itertools.product(SCALE_RULES, EDGES):
        got = mx(x, format=format, scale_rule=rule, usage="both", edges=edges)
        expected = reference_mx(values, format=format, scale_rule=rule, usage="both", edges=edges)
        assert_conforms(got, expected, f"{path} {format} {rule} {edges}")


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize(
    ("usage", "blocks", "layout"),
    [(u, b, s) for u in USAGES for b in BLOCKS for s in SCALE_LAYOUTS],
)
def test_every_direction_block_and_layout(
    monkeypatch: pytest.MonkeyPatch, path: str, usage: str, blocks: str, layout: str
) -> None:
    use_path(monkeypatch, path)
    ragged_m = usage == "rowwise" and blocks == "1d"
    ragged_k = usage == "columnwise" and blocks == "1d"
    shape = (160 + (3 if ragged_m else 0), 64 + (10 if ragged_k else 0))
    for format, dtype in (("float8_e4m3fn", torch.float32), ("float4_e2m1fn", torch.float16)):
        x, values = blocky(shape, seed=1, dtype=dtype)
        for edges in ("te", "torchao"):
            params = {"format": format, "scale_rule": "rceil", "usage": usage, "blocks": blocks, "edges": edges}
            got = mx(x, scale_layout=layout, **params)
            expected = reference_mx(values.astype(np.float32), scale_layout=layout, **params)
            assert_conforms(got, expected, f"{path} {format} {dtype} {params}")


@pytest.mark.parametrize("tile", ["32x128x2", "32x256x8", "32x512x4"])
def test_staged_row_scales(monkeypatch: pytest.MonkeyPatch, tile: str) -> None:
    """MXFP8 rowwise + columnwise with compact scales stages the rowwise scales tile by tile and copies them into
    the compact matrix afterwards: one int32 word a row and tile, two, four, and a ragged last K-tile (384 = 256 +
    128 columns)."""
    use_path(monkeypatch, "triton")
    monkeypatch.setenv("QCONFORM_MX_TILE", tile)
    for shape in ((96, 384), (64, 1024)):
        x, values = blocky(shape, seed=2, dtype=torch.bfloat16)
        params = {"format": "float8_e4m3fn", "scale_rule": "rceil", "usage": "both"}
        plan = mx_plan.make_plan(x, blocks="1d", scale_layout="compact", edges="te", **params)
        assert mx_launch.stages_row_scales(plan, mx_launch._fixed_tile(tile, plan))
        assert_conforms(mx(x, **params), reference_mx(values.astype(np.float32), **params), f"{tile} {shape}")


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize("format", ["float8_e4m3fn", "float4_e2m1fn"])
def test_torchao_018_rceil_log2_windows(monkeypatch: pytest.MonkeyPatch, path: str, format: str) -> None:
    """float32 amaxes ``max * 2**j`` -4..+40 ulps: where torchao 0.18's float32 ``log2`` keeps the scale at ``j`` (up
    to 39 ulps above for E4M3), the subnormal ``d`` range included; every ``j`` on the torch path, the ends of each
    slack class (and the subnormal ``d``) in Triton's interpreter, rowwise."""
    use_path(monkeypatch, path)
    top = np.float32(448.0 if format == "float8_e4m3fn" else 6.0)
    powers = np.arange(-160, 130)
    if path == "triton":
        ends = [-128, -127, -126, -65, -64, -33, -32, -17, -16, -9, -8, -5, -4, -1, 0, 3, 4, 7, 8, 15, 16, 31, 32, 63]
        powers = np.array([*ends, 64, 125, 126, 127])
    with np.errstate(over="ignore"):
        centres = np.ldexp(top, powers).astype(np.float32)
    centres = centres[(centres > 0) & np.isfinite(centres)].view(np.uint32).astype(np.int64)
    bits = np.unique((centres[:, None] + np.arange(-4, 41)).ravel())
    amax = bits[(bits > 0) & (bits < 0x7F800000)].astype(np.uint32).view(np.float32)
    values = np.zeros((amax.size + (-amax.size % 32), 32), dtype=np.float32)
    values[: amax.size, 7] = amax
    values[: amax.size, 8] = -amax * np.float32(0.37)
    for usage in ("rowwise",) if path == "triton" else ("rowwise", "columnwise"):  # one mx_scale_byte for both
        x = values if usage == "rowwise" else np.ascontiguousarray(values.reshape(-1, 32, 32).transpose(0, 2, 1))
        x = x.reshape(-1, 32)
        params = {"format": format, "scale_rule": "rceil", "usage": usage, "edges": "torchao_018"}
        got = mx(torch.from_numpy(x), **params)
        assert_conforms(got, reference_mx(x, **params), f"{path} {params}")


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_float32_subnormal_blocks(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """float32 subnormals: scale 0 multiplies by 2^127 (2^126 or 1 under torchao 0.18), and rceil's
    amax * fl32(1/max) may be a float32 subnormal itself."""
    use_path(monkeypatch, path)
    rng = np.random.default_rng(9)
    bits = rng.integers(0, 1 << 23, (32, 64), dtype=np.uint32) | (rng.integers(0, 2, (32, 64), dtype=np.uint32) << 31)
    bits[::4] |= np.uint32(0x0080_0000)  # some rows of the smallest normals
    values = bits.view(np.float32)
    for rule, edges in itertools.product(SCALE_RULES, EDGES):
        got = mx(torch.from_numpy(values.copy()), format="float8_e5m2", scale_rule=rule, usage="both", edges=edges)
        expected = reference_mx(values, format="float8_e5m2", scale_rule=rule, usage="both", edges=edges)
        assert_conforms(got, expected, f"{path} {rule} {edges}")


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_leading_dimensions(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    use_path(monkeypatch, path)
    x, values = bf16_bits((2, 3, 32, 64), seed=4)
    got = mx(x, format="float6_e2m3fn", scale_rule="floor", usage="both", scale_layout="swizzled")
    expected = reference_mx(values, format="float6_e2m3fn", scale_rule="floor", usage="both", scale_layout="swizzled")
    assert got["data_rowwise"].shape == (2, 3, 32, 64)
    assert_conforms(got, expected, path)


def test_golden_torchao_vectors_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    with np.load("tests/vectors/torchao018_to_mx_h100.npz") as archive:
        vectors = {name: archive[name] for name in archive.files}
    x = torch.from_numpy(vectors["x"]).to(torch.bfloat16)
    for path in ("torch", "triton"):
        use_path(monkeypatch, path)
        for format, rule, prefix in (
            ("float8_e4m3fn", "floor", ""),
            ("float8_e4m3fn", "rceil", ""),
            ("float4_e2m1fn", "floor", "fp4"),
        ):
            out = mx(x, format=format, scale_rule=rule)
            assert np.array_equal(out["data_rowwise"].numpy(), vectors[f"{prefix}data_{rule.upper()}"]), (path, rule)
            scale = out["scale_rowwise"][:64, :8].numpy()
            assert np.array_equal(scale, vectors[f"{prefix}scale_{rule.upper()}"]), (path, format, rule)


# %% The kernel's rounding core over every bfloat16 value


def _codes_kernel(
    values_ptr,
    codes_ptr,
    fp8_codes_ptr,
    n,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_VALUE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SUBNORMAL_ADDEND: tl.constexpr,
    FP8: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """``mx_code`` of each value, and ``fast._triton.fp8_code`` where FP8 (1 E4M3FN, 2 E5M2)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(values_ptr + offsets, mask=mask, other=0.0)
    code = mx_code(value, MANTISSA_BITS, BIAS, MAX_CODE, MAX_VALUE, SIGN_SHIFT, SIGN_MASK, SUBNORMAL_ADDEND)
    tl.store(codes_ptr + offsets, code.to(tl.uint8), mask=mask)
    if FP8:
        tl.store(fp8_codes_ptr + offsets, fp8_code(value, FP8 == 2), mask=mask)


def rounding_core_inputs(seed: int, random_count: int) -> np.ndarray:
    """Every bfloat16 value (both NaN signs, Inf, subnormals) and ``random_count`` random float32 patterns."""
    bf16 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    f32 = np.random.default_rng(seed).integers(0, 1 << 32, random_count, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bf16, f32.view(np.float32)])


def expected_codes(values: np.ndarray, format: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``mx_code``'s contract (saturating RNE, NaN -> +max) and, for FP8, ``fp8_code``'s (NaN -> 0x7F)."""
    fmt = mx_plan.FORMATS[format]
    nan = np.isnan(values)
    if fmt.bits == 8:
        codes = reference.cast.fp8(values, format=format, overflow="saturate")["codes"]
        return np.where(nan, fmt.max_code, codes), np.where(nan, 0x7F, codes)
    cast = reference.cast.fp6 if fmt.bits == 6 else reference.cast.fp4
    return cast(values, format=format, nan="max")["codes"], None


def run_codes_kernel(values: torch.Tensor, format: str) -> tuple[torch.Tensor, torch.Tensor]:
    fmt = mx_plan.FORMATS[format]
    codes = torch.empty(values.numel(), dtype=torch.uint8, device=values.device)
    fp8_codes = torch.empty_like(codes)
    block = 4096
    with np.errstate(all="ignore"):  # the interpreter computes in NumPy, NaN inputs included
        jit(_codes_kernel)[(-(-values.numel() // block),)](
            values,
            codes,
            fp8_codes,
            values.numel(),
            MANTISSA_BITS=fmt.mantissa_bits,
            BIAS=fmt.bias,
            MAX_CODE=fmt.max_code,
            MAX_VALUE=fmt.max_value,
            SIGN_SHIFT=32 - fmt.bits,
            SIGN_MASK=1 << (fmt.bits - 1),
            SUBNORMAL_ADDEND=2.0 ** (24 - fmt.bias - fmt.mantissa_bits),
            FP8=mx_plan.fp8_id(fmt),
            BLOCK=block,
        )
    return codes, fp8_codes


CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")])


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("format", MX_FORMATS)
def test_rounding_core_every_bfloat16_and_random_float32(
    monkeypatch: pytest.MonkeyPatch, device: str, format: str
) -> None:
    """``mx_code`` and, for FP8, ``fp8_code`` against ``reference.cast`` (saturating RNE): every bfloat16 pattern
    (both NaN signs, Inf, subnormals), float32 boundaries (each code's value, its midpoints and their neighbours,
    float32 subnormals) and random float32 patterns (2^16 in the interpreter, whose bodies are integer arithmetic;
    2^24 compiled, where they are a clamp and one float32 add at the binade's step, and ``cvt.rn.satfinite``)."""
    if device == "cpu":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    values = np.concatenate([rounding_core_inputs(2, 1 << (16 if device == "cpu" else 24)), boundary_values(format)])
    codes, fp8_codes = run_codes_kernel(torch.from_numpy(values).to(device), format)
    expected, expected_fp8 = expected_codes(values, format)
    for got, want, name in ((codes, expected, "mx_code"), (fp8_codes, expected_fp8, "fp8_code")):
        if want is None:
            continue
        got_np = got.cpu().numpy()
        bad = np.flatnonzero(got_np != want)
        assert bad.size == 0, (
            f"{name}: {bad.size} codes differ; first x={values[bad[0]]!r} (0x{values[bad[0:1]].view(np.uint32)[0]:08x})"
            f" -> 0x{int(got_np[bad[0]]):02x}, reference 0x{int(want[bad[0]]):02x}"
        )


def boundary_values(format: str) -> np.ndarray:
    """Every code's value, the midpoints between neighbouring codes and the float32 neighbours of both, with
    either sign, a few scalings around the largest value, and float32 subnormals."""
    fmt = mx_plan.FORMATS[format]
    magnitudes = reference_decode_magnitudes(format)
    midpoints = (magnitudes[:-1] + magnitudes[1:]) / 2
    points = np.concatenate([magnitudes, midpoints, [fmt.max_value * 1.0625, fmt.max_value * 2, 3.4e38]])
    bits = points.astype(np.float32).view(np.uint32)
    near = np.concatenate([bits - 1, bits, bits + 1, np.arange(0, 1 << 12, dtype=np.uint32) * 2047])
    near = near.view(np.float32)
    return np.concatenate([near, -near])


def reference_decode_magnitudes(format: str) -> np.ndarray:
    """Non-negative finite values of every code of ``format`` (from ``reference.cast``'s decoder), ascending."""
    fmt = mx_plan.FORMATS[format]
    codes = np.arange(1 << (fmt.bits - 1), dtype=np.uint8)
    values = getattr(reference.decode, f"fp{fmt.bits}")(codes, format=format)["values"]
    return np.unique(values[np.isfinite(values)]).astype(np.float32)


# %% Dequantization and layouts


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize("format", MX_FORMATS)
def test_dequant_against_the_reference(monkeypatch: pytest.MonkeyPatch, path: str, format: str) -> None:
    use_path(monkeypatch, path)
    rng = np.random.default_rng(7)
    bits = 4 if format == "float4_e2m1fn" else 6 if format.startswith("float6") else 8
    for usage, layout in itertools.product(("rowwise", "columnwise"), SCALE_LAYOUTS):
        cols = 64 if format == "float4_e2m1fn" else 96
        high = 256 if bits == 4 else 1 << bits  # FP4: every byte holds two codes
        data = rng.integers(0, high, (64, cols // (2 if bits == 4 else 1)), dtype=np.uint8)
        shape = (128, 4) if usage == "rowwise" else (4, 128)
        scale = rng.integers(0, 256, shape, dtype=np.uint8)
        got = fast_dequant(
            torch.from_numpy(data), torch.from_numpy(scale), format=format, usage=usage, scale_layout=layout
        )
        expected = reference_dequant(data, scale, format=format, usage=usage, scale_layout=layout)["x"]
        value = got["x"].numpy()
        same = (value.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(value) & np.isnan(expected))
        assert same.all(), f"{path} {usage} {layout}: {int((~same).sum())} values differ"


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (127, 4), (129, 9), (300, 11)])
def test_layout_against_the_reference(monkeypatch: pytest.MonkeyPatch, path: str, shape: tuple[int, int]) -> None:
    use_path(monkeypatch, path)
    scale = np.random.default_rng(8).integers(0, 256, shape, dtype=np.uint8)
    swizzled = scale_swizzle(torch.from_numpy(scale))["swizzled"]
    assert np.array_equal(swizzled.numpy(), reference_swizzle(scale)["swizzled"])
    back = scale_unswizzle(swizzled)["scale"].numpy()
    assert np.array_equal(back[: shape[0], : shape[1]], scale)


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_swizzle_takes_strided_input(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """A transposed or sliced scale matrix (columnwise MX scales, a padded buffer's logical part) needs no copy."""
    use_path(monkeypatch, path)
    base = torch.from_numpy(np.random.default_rng(9).integers(0, 256, (8, 200), dtype=np.uint8))
    for view in (base.t(), base[1:6, 3:150], base.t()[::2]):
        expected = reference_swizzle(np.ascontiguousarray(view.numpy()))["swizzled"]
        assert np.array_equal(scale_swizzle(view)["swizzled"].numpy(), expected)


# %% Paths and arguments


def test_forced_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        mx(torch.ones(1, 32), format="float8_e4m3fn", scale_rule="floor")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        fast_dequant(
            torch.zeros(1, 32, dtype=torch.uint8), torch.zeros(128, 4, dtype=torch.uint8), format="float8_e5m2"
        )
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        scale_swizzle(torch.zeros(3, 3, dtype=torch.uint8))


def test_forced_triton_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mx_launch, "triton", None)
    monkeypatch.setenv(PATH_ENV, "triton")
    with pytest.raises(RuntimeError, match="triton is not installed"):
        mx(torch.ones(1, 32), format="float8_e4m3fn", scale_rule="floor")


def test_unknown_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "cuda")
    with pytest.raises(ValueError, match=r"QCONFORM_FAST_PATH='cuda'"):
        mx(torch.ones(1, 32), format="float8_e4m3fn", scale_rule="floor")


def test_tile_override_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    use_path(monkeypatch, "triton")
    monkeypatch.setenv("QCONFORM_MX_TILE", "64x128x4")
    with pytest.raises(ValueError, match="BLOCK_M 32 with columnwise"):
        mx(torch.ones(32, 32), format="float8_e4m3fn", scale_rule="floor", usage="both")
    monkeypatch.setenv("QCONFORM_MX_TILE", "16x64x2")
    x, values = bf16_bits((40, 96), seed=10)
    expected = reference_mx(values, format="float8_e4m3fn", scale_rule="floor")
    assert_conforms(mx(x, format="float8_e4m3fn", scale_rule="floor"), expected, "16x64 tile")
    monkeypatch.setenv("QCONFORM_MX_TILE", "32x64x2x72")  # a register cap: a compile option (none interpreted)
    x, values = bf16_bits((64, 96), seed=12)
    expected = reference_mx(values, format="float4_e2m1fn", scale_rule="floor", usage="both")
    assert_conforms(mx(x, format="float4_e2m1fn", scale_rule="floor", usage="both"), expected, "32x64x2x72 tile")


class _FakeCompiled:
    """A ``CompiledKernel`` stand-in: ``[grid]`` gives a runner that records its launches."""

    def __init__(self, launches: list[tuple[Any, ...]]) -> None:
        self.launches = launches

    def __getitem__(self, grid: tuple[int, int, int]) -> Any:
        return lambda *args: self.launches.append(("cached", grid, args))


@pytest.mark.parametrize("tile", ["32x256x8", "small input", "tuned"])
def test_cached_launch_repeats_the_first(monkeypatch: pytest.MonkeyPatch, tile: str) -> None:
    """A plan's second call launches the compiled kernel of its first (a fixed tile, the first tile for an input
    below the autotuning size, or the autotuner's choice) directly, with the same arguments: the runtime ones,
    then every constexpr in the kernel's signature order."""
    pytest.importorskip("triton")
    launches: list[tuple[Any, ...]] = []
    best = {"BLOCK_M": 16, "BLOCK_K": 256}

    class FakeKernel:
        def __getitem__(self, grid: Any) -> Any:
            def launch(*args: Any, **meta: Any) -> _FakeCompiled:
                size = grid(best)[0] if callable(grid) else grid[0]
                launches.append(("first", size, args, meta))
                return _FakeCompiled(launches)

            return launch

        best_config = types.SimpleNamespace(kwargs=best)

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(mx_launch, "_LAUNCHES", LaunchCache(mx_kernels.mx_kernel, mx_launch._RUNTIME_ARGS))
    monkeypatch.setattr(mx_launch, "has_fp8_conversion", lambda device: True)
    monkeypatch.setattr(mx_launch, "jit", lambda fn: FakeKernel())
    monkeypatch.setattr(mx_launch, "_tuned_kernel", lambda interpret, rows_of_32, staged: FakeKernel())
    if tile == "32x256x8":
        monkeypatch.setenv("QCONFORM_MX_TILE", tile)
    else:
        monkeypatch.delenv("QCONFORM_MX_TILE", raising=False)
    if tile == "tuned":
        monkeypatch.setattr(mx_launch, "_AUTOTUNE_MIN_ELEMENTS", 0)
    plan = mx_plan.make_plan(torch.zeros(64, 512), "float8_e4m3fn", "rceil", "rowwise", "1d", "compact", "te")
    outputs = fast_mx_module._allocate(torch.zeros(64, 512), plan)
    x = types.SimpleNamespace(  # what launch_kernel reads of x
        dtype=torch.float32, device=torch.device("cuda", 0), data_ptr=lambda: 0
    )
    mx_launch.launch_kernel(x, plan, outputs)
    mx_launch.launch_kernel(x, plan, outputs)
    (_, size, first_args, meta), (kind, grid, args) = launches
    names = list(inspect.signature(mx_kernels.mx_kernel).parameters)
    bound = dict(zip(names, args, strict=True))
    tile_meta = {"BLOCK_M": 32, "BLOCK_K": 256, "EVEN": True} if tile != "tuned" else {**best, "EVEN": True}
    assert kind == "cached"
    assert grid == (size, 1, 1) == ((64 // tile_meta["BLOCK_M"]) * (512 // 256), 1, 1)
    assert args[: len(first_args)] == first_args
    assert all(bound[name] == value for name, value in {**meta, **tile_meta}.items() if name != "num_warps")
    key = (plan, x.dtype, x.device, 0, tile if tile == "32x256x8" else None)
    assert mx_launch._LAUNCHES.constant(key, "BLOCK_K") == tile_meta["BLOCK_K"]  # the staged scales' layout


@pytest.mark.parametrize(
    ("x", "params", "error", "match"),
    [
        (torch.zeros(2, 40), {}, ValueError, r"x.shape=\(2, 40\).*K % 32 == 0"),
        (torch.zeros(40, 32), {"usage": "columnwise"}, ValueError, "M % 32 == 0"),
        (torch.zeros(32, 48), {"usage": "columnwise", "blocks": "2d"}, ValueError, "2d blocks needs K % 32 == 0"),
        (torch.zeros(32), {}, ValueError, "at least 2 dimensions"),
        (torch.zeros(0, 32), {}, ValueError, "must not be empty"),
        (torch.zeros(64, 32).t(), {}, ValueError, "must be contiguous"),
        (torch.zeros(1, 32, dtype=torch.float64), {}, TypeError, "x.dtype=float64"),
        (torch.zeros(1, 32, dtype=torch.int32), {}, TypeError, "x.dtype=int32"),
        (np.zeros((1, 32), dtype=np.float32), {}, TypeError, "torch.Tensor"),
        (torch.zeros(1, 32), {"format": "float8_e4m3fnuz"}, ValueError, "format='float8_e4m3fnuz'"),
        (torch.zeros(1, 32), {"scale_rule": "up"}, ValueError, "scale_rule='up'"),
        (torch.zeros(1, 32), {"usage": "none"}, ValueError, "usage='none'"),
        (torch.zeros(1, 32), {"edges": "cuda"}, ValueError, "edges='cuda'"),
    ],
)
def test_bad_input(x: object, params: dict[str, str], error: type, match: str) -> None:
    kwargs = {"format": "float8_e4m3fn", "scale_rule": "floor", **params}
    with pytest.raises(error, match=match):
        mx(x, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "scale", "params", "error", "match"),
    [
        (torch.zeros(1, 32, dtype=torch.uint8), torch.zeros(1, 4, dtype=torch.uint8), {}, ValueError, r"\(128, 4\)"),
        (
            torch.zeros(3, 32, dtype=torch.uint8),
            torch.zeros(1, 1, dtype=torch.uint8),
            {"usage": "columnwise"},
            ValueError,
            "M % 32",
        ),
        (
            torch.full((1, 32), 64, dtype=torch.uint8),
            torch.zeros(128, 4, dtype=torch.uint8),
            {"format": "float6_e2m3fn"},
            ValueError,
            "0..63",
        ),
        (torch.zeros(1, 32), torch.zeros(128, 4, dtype=torch.uint8), {}, TypeError, "data.dtype=float32"),
    ],
)
def test_dequant_bad_input(
    data: torch.Tensor, scale: torch.Tensor, params: dict[str, str], error: type, match: str
) -> None:
    kwargs = {"format": "float8_e4m3fn", **params}
    with pytest.raises(error, match=match):
        fast_dequant(data, scale, **kwargs)
