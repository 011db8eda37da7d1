"""The FP8 scaling recipes' Triton kernels on a CUDA device against the NumPy reference, bit for bit (``nox -s gpu``).

The oracle is ``reference.quant`` / ``reference.dequant`` (never a path of ``fast``, except that the rounding
cores are compared with each other: the hardware ``cvt.rn.satfinite`` the kernels use on CUDA against the
integer ``lean`` core on all 2**32 float32 inputs, and ``lean`` against ``exact``, ``fast._triton.round_to_code``;
and the division-free power-of-two scale rule against the float64 quotient with its mantissa cleared, on all
2**31 non-negative float32 amaxes).
Shapes are large and ragged (no dimension a multiple of 128) so that every kernel sees full tiles and tails;
special blocks check what the GPU's float arithmetic could change: subnormal blocks (a flush-to-zero multiply or
division would show), NaN blocks (the amax ignores NaN), Inf blocks, zero blocks and single outliers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fast.quant.fp8 as fast_fp8
import reference.dequant as reference_dequant
import reference.quant as reference_quant
from fast._triton import jit, tl
from fast.dequant import fp8_block as dequant_block
from fast.dequant import fp8_tensor as dequant_tensor
from fast.quant import fp8_block, fp8_delayed, fp8_tensor
from fast.quant.fp8 import FORMAT_META, FORMATS, PATH_ENV, scale_from_amax

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

F32 = np.float32
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
RAGGED = (2053, 4099)
"""About 8.4M elements: 17 x 33 tiles of 128 with tails of 5 rows and 3 columns."""
WHOLE_TILES = (1280, 1152)
"""10 x 9 tiles of 128: the blockwise kernel's unmasked (``EVEN``) form, which RAGGED never reaches."""


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call runs the Triton kernels (an error if Triton is missing, never a silent fallback)."""
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def special_input(shape: tuple[int, int], dtype: str, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Random values over many binades, with whole special 128x128 tiles and scattered NaN/Inf/subnormals."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))).astype(F32)
    x[:128, :128] = 0  # zero tile
    x[128:256, :128] = rng.choice(np.array([1e-40, -3e-39, 2e-45, 0.0], dtype=F32), (128, 128))  # subnormal tile
    x[256:384, :128] = np.nan  # all-NaN tile
    x[384:512, :128] = 1.0
    x[400, 5] = np.inf  # a tile holding Inf
    x[512:640, :128] = 1e-3
    x[600, 77] = 3e4  # one outlier
    flat = x.reshape(-1)
    where = rng.integers(0, x.size, x.size // 1000)
    flat[where] = rng.choice(np.array([np.nan, -np.inf, np.inf, 1e-42, -0.0], dtype=F32), where.size)
    tensor = torch.from_numpy(x).to(DTYPES[dtype])
    carrier = tensor.float().numpy() if dtype != "float16" else tensor.numpy()
    return tensor.cuda(), carrier


def assert_outputs(got: dict[str, torch.Tensor], expected: dict[str, np.ndarray], what: str) -> None:
    """Bitwise equality; NaN codes compare as NaN codes (the sign of a NaN product is free); scale padding skipped."""
    __tracebackhide__ = True
    for name, value in got.items():
        ours, theirs = value.cpu().numpy(), expected[name]
        assert ours.shape == theirs.shape, f"{name} [{what}]"
        if ours.dtype == np.uint8:
            nan = (theirs & 0x7F) == 0x7F
            bad = np.flatnonzero((ours != theirs) & ~(nan & ((ours & 0x7F) == 0x7F)))
        else:
            keep = ~expected.get(f"{name}_padding", np.zeros(theirs.shape, dtype=bool))
            differ = (ours.view(np.uint32) != theirs.view(np.uint32)) & ~(np.isnan(ours) & np.isnan(theirs)) & keep
            bad = np.flatnonzero(differ)
        if bad.size:
            index = np.unravel_index(bad[0], ours.shape)
            pytest.fail(
                f"{bad.size} of {ours.size} {name} differ [{what}]; first at {index}: "
                f"{ours[index]!r}, but reference gives {theirs[index]!r}"
            )


@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
@pytest.mark.parametrize("block", ["1x128", "128x128"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_block_matches_reference(dtype: str, block: str, usage: str) -> None:
    for shape in (RAGGED, WHOLE_TILES):
        x, carrier = special_input(shape, dtype, seed=len(dtype))
        for format, power_2_scale, epsilon in [("float8_e4m3fn", True, 0.0), ("float8_e5m2", False, 1e-4)]:
            kwargs = {
                "format": format,
                "block": block,
                "usage": usage,
                "power_2_scale": power_2_scale,
                "epsilon": epsilon,
                "x_dtype": dtype,
            }
            expected = reference_quant.fp8_block(carrier, **kwargs)
            for call in ("first", "cached launch"):
                assert_outputs(fp8_block(x, **kwargs), expected, f"{shape} {kwargs} {call}")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_block_1x128_both_on_whole_tiles_runs_the_gluon_kernel(dtype: str) -> None:
    """Where Triton has Gluon, 1x128 both on whole tiles is the kernel of ``fast.quant.fp8_block.gluon`` (one
    more cached launch for a new shape), with the reference's bytes; the other tests reach it through the same
    calls."""
    gluon_module = pytest.importorskip("fast.quant.fp8_block.gluon", exc_type=ImportError)
    x, carrier = special_input((1408, 896), dtype, seed=7)
    for format, power_2_scale, epsilon in [
        ("float8_e4m3fn", True, 0.0),
        ("float8_e5m2", True, 1e-4),
        ("float8_e4m3fn", False, 0.0),
    ]:
        kwargs = {
            "format": format,
            "block": "1x128",
            "usage": "both",
            "power_2_scale": power_2_scale,
            "epsilon": epsilon,
            "x_dtype": dtype,
        }
        cached = len(gluon_module.LAUNCHES)
        got = fp8_block(x, **kwargs)
        assert len(gluon_module.LAUNCHES) == cached + 1
        assert_outputs(got, reference_quant.fp8_block(carrier, **kwargs), f"{kwargs}")


@pytest.mark.parametrize("block", ["1x128", "128x128"])
def test_block_default_recipe_on_8192_square_bfloat16(block: str) -> None:
    x, carrier = special_input((8192, 8192), "bfloat16", seed=3)
    kwargs = {"format": "float8_e4m3fn", "block": block, "x_dtype": "bfloat16"}
    assert_outputs(fp8_block(x, **kwargs), reference_quant.fp8_block(carrier, **kwargs), block)


@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e5m2"])
def test_rounding_cores_agree_on_every_float32(monkeypatch: pytest.MonkeyPatch, format: str) -> None:
    """``hardware`` == ``lean`` == ``exact`` codes of all 2**32 float32 values, through the delayed cast with scale 1.

    ``x * 1`` is ``x`` for every float32 (no flush to zero on the GPU), so the data is the core's code of ``x``.
    NaN inputs need only give NaN codes (the hardware drops the sign).
    """
    chunk = 1 << 28
    base = torch.arange(chunk, dtype=torch.int32, device="cuda")
    history, one = torch.zeros(1, device="cuda"), torch.ones(1, device="cuda")
    nan_magnitude = (lambda c: c == 0x7F) if format == "float8_e4m3fn" else (lambda c: c > 0x7C)

    def codes(x: torch.Tensor, core: str) -> torch.Tensor:
        monkeypatch.setattr(fast_fp8, "ROUNDING_CORE", core)
        return fp8_delayed(x, history, one, format=format, usage="rowwise")["data"]

    mismatches = {"lean": 0, "exact": 0, "nan": 0}
    for start in range(-(1 << 31), 1 << 31, chunk):
        x = (base + start).view(torch.float32).reshape(1 << 14, 1 << 14)
        nan = torch.isnan(x)
        hardware, lean = codes(x, "hardware"), codes(x, "lean")
        mismatches["lean"] += int(((hardware != lean) & ~nan).sum())
        mismatches["nan"] += int((~nan_magnitude(hardware[nan] & 0x7F)).sum())
        mismatches["exact"] += int((lean != codes(x, "exact")).sum())
    assert mismatches == {"lean": 0, "exact": 0, "nan": 0}


def _pow2_rule_kernel(
    count_ptr, start, epsilon, value_for_inf, FP8_MAX: tl.constexpr, MAX_BITS: tl.constexpr, BLOCK: tl.constexpr
):
    bits = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    amax = bits.to(tl.float32, bitcast=True)
    pow2 = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, True).to(tl.int32, bitcast=True)
    divided = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, False).to(tl.int32, bitcast=True)
    tl.atomic_add(count_ptr, tl.sum((pow2 != (divided & -8388608)).to(tl.int32), axis=0))


@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize(("epsilon", "value_for_inf"), [(0.0, 3.4028234663852886e38), (1e-4, 3.3895313892515355e38)])
def test_pow2_scale_rule_on_every_float32(format: str, epsilon: float, value_for_inf: float) -> None:
    """The integer power-of-two scale is ``bits(fl32(fp8_max / amax)) & 0xFF800000`` for every amax >= +0 and NaN."""
    block, chunk = 4096, 1 << 28
    count = torch.zeros(1, dtype=torch.int32, device="cuda")
    meta = {"FP8_MAX": FORMATS[format].max_value, "MAX_BITS": FORMAT_META[format]["MAX_BITS"], "BLOCK": block}
    for start in range(0, 1 << 31, chunk):
        jit(_pow2_rule_kernel)[(chunk // block,)](count, start, float(F32(epsilon)), value_for_inf, **meta)
    assert int(count.item()) == 0


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("core", [None, "lean"])
def test_tensor_matches_reference(monkeypatch: pytest.MonkeyPatch, dtype: str, core: str | None) -> None:
    monkeypatch.setattr(fast_fp8, "ROUNDING_CORE", core)
    x, carrier = special_input(RAGGED, dtype, seed=5)
    for kwargs in ({"format": "float8_e4m3fn"}, {"format": "float8_e5m2", "power_2_scale": True, "usage": "rowwise"}):
        assert_outputs(
            fp8_tensor(x, x_dtype=dtype, **kwargs),
            reference_quant.fp8_tensor(carrier, x_dtype=dtype, **kwargs),
            f"{dtype} {kwargs}",
        )


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("inf_scale", ["float32_max", "input_max"])
@pytest.mark.parametrize("power_2_scale", [False, True])
def test_tensor_of_subnormals_takes_value_for_inf(dtype: str, inf_scale: str, power_2_scale: bool) -> None:
    """amax is subnormal, so the scale is FLT_MAX or the dtype's max and products are large: no flush to zero."""
    values = np.array([1e-40, -3e-39, 2e-45, 0.0, 7e-39], dtype=F32)
    x = torch.from_numpy(np.resize(values, (1031, 517))).to(DTYPES[dtype])
    carrier = x.float().numpy()
    kwargs = {"format": "float8_e4m3fn", "inf_scale": inf_scale, "power_2_scale": power_2_scale, "x_dtype": dtype}
    assert_outputs(fp8_tensor(x.cuda(), **kwargs), reference_quant.fp8_tensor(carrier, **kwargs), str(kwargs))


@pytest.mark.parametrize("update", ["fused", "unfused"])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_matches_reference(update: str, algo: str) -> None:
    rng = np.random.default_rng(11)
    x, carrier = special_input(RAGGED, "bfloat16", seed=11)
    pool = np.array([0.0, 5.0, 1.0, -2.0, np.inf, 1e-40, 3e30, np.nan], dtype=F32)
    for step in range(6):
        history = rng.choice(pool, 1 + step * 3).astype(F32)
        scale = np.array([rng.choice([1.0, 0.0, 2.5, np.inf, 1e-40])], dtype=F32)
        kwargs = {"format": "float8_e4m3fn", "amax_compute_algo": algo, "update": update, "margin": step % 3}
        got = fp8_delayed(
            x if step % 2 else torch.zeros_like(x),
            torch.from_numpy(history).cuda(),
            torch.from_numpy(scale).cuda(),
            **kwargs,
        )
        expected = reference_quant.fp8_delayed(
            carrier if step % 2 else np.zeros_like(carrier), history, scale, **kwargs
        )
        assert_outputs(got, expected, f"step {step} {kwargs}")


def test_one_long_row() -> None:
    """The ragged input flattened: M = 1, K = 8415247 > 65535 * 128 (the grids are 1-D: no K tiles on axis 1)."""
    x, carrier = special_input(RAGGED, "bfloat16", seed=17)
    x, carrier = x.reshape(-1), carrier.reshape(-1)
    kwargs = {"format": "float8_e4m3fn", "x_dtype": "bfloat16"}
    assert_outputs(fp8_tensor(x, **kwargs), reference_quant.fp8_tensor(carrier, **kwargs), "tensor")
    for block in ("1x128", "128x128"):
        got = fp8_block(x, block=block, **kwargs)
        assert_outputs(got, reference_quant.fp8_block(carrier, block=block, **kwargs), block)
        for operand, prefix in (("rowwise", ""), ("columnwise", "columnwise_")):
            data, scale_inv = got[f"{prefix}data"], got[f"{prefix}scale_inv"]
            args = {"format": "float8_e4m3fn", "block": block, "operand": operand}
            expected = reference_dequant.fp8_block(data.cpu().numpy(), scale_inv.cpu().numpy(), **args)
            assert_outputs(dequant_block(data, scale_inv, **args), expected, f"dequant {block} {operand}")
    history, scale = np.array([0.0, 3.0], dtype=F32), np.array([2.0], dtype=F32)
    got = fp8_delayed(x, torch.from_numpy(history).cuda(), torch.from_numpy(scale).cuda(), format="float8_e4m3fn")
    assert_outputs(got, reference_quant.fp8_delayed(carrier, history, scale, format="float8_e4m3fn"), "delayed")


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
def test_dequant_matches_reference(out_dtype: str) -> None:
    rng = np.random.default_rng(13)
    codes = rng.integers(0, 256, RAGGED, dtype=np.uint8)
    scales = np.array([0.1, 3e-39, 7e33, np.nan, 0.0, 1.0], dtype=F32)
    for format in ("float8_e4m3fn", "float8_e5m2"):
        for scale in scales:
            got = dequant_tensor(
                torch.from_numpy(codes).cuda(), torch.from_numpy(scale[None]).cuda(), format=format, out_dtype=out_dtype
            )
            expected = reference_dequant.fp8_tensor(codes, scale[None], format=format, out_dtype=out_dtype)
            assert_outputs(got, expected, f"{format} {scale}")
        for block in ("1x128", "128x128"):
            for operand in ("rowwise", "columnwise"):
                data = codes if operand == "rowwise" else np.ascontiguousarray(codes.T)
                q = reference_quant.fp8_block(np.zeros(RAGGED, dtype=F32), format=format, block=block)
                shape = q["scale_inv" if operand == "rowwise" else "columnwise_scale_inv"].shape
                scale_inv = rng.choice(scales, shape).astype(F32)
                kwargs = {"format": format, "block": block, "operand": operand, "out_dtype": out_dtype}
                got = dequant_block(torch.from_numpy(data).cuda(), torch.from_numpy(scale_inv).cuda(), **kwargs)
                assert_outputs(got, reference_dequant.fp8_block(data, scale_inv, **kwargs), str(kwargs))
