"""``fast.quant.fp8`` / ``fp8_block`` and ``fast.dequant.fp8`` on CPU: the torch paths against the NumPy reference
at moderate shapes, the Triton kernels in Triton's interpreter at small shapes (the integer rounding cores), the
device functions against the reference on value sweeps, path selection and argument checks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

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
from fast.quant.fp8 import FORMAT_META, FORMATS, PATH_ENV, fp8_code, reciprocal, scale_from_amax
from reference.cast import fp8 as reference_cast
from reference.quant.fp8 import scale_from_amax as reference_scale

F32 = np.float32
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SPECIAL_BITS = np.array([0x7FC00000, 0x7F802000, 0x80000000, 0x00000001, 0x7F800000, 0xFF800000], dtype=np.uint32)


def random_x(shape: tuple[int, ...], dtype: str, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """A tensor of ``dtype`` (values over many binades, specials sprinkled in) and its NumPy carrier."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-10, 10, shape))).astype(F32)
    if x.size:
        where = rng.integers(0, x.size, max(1, x.size // 40))
        x.reshape(-1)[where] = rng.choice(SPECIAL_BITS, where.size).view(F32)
    tensor = torch.from_numpy(x).to(TORCH_DTYPES[dtype])
    carrier = tensor.float().numpy() if dtype != "float16" else tensor.numpy()
    return tensor.contiguous(), carrier


def assert_outputs(got: dict[str, torch.Tensor], expected: dict[str, np.ndarray]) -> None:
    """Bitwise equality of every output; NaN codes compare as NaN codes, scale padding is skipped."""
    __tracebackhide__ = True
    assert set(got) == {k for k in expected if not k.endswith("_padding")}
    for name, value in got.items():
        ours, theirs = value.cpu().numpy(), expected[name]
        assert ours.shape == theirs.shape, name
        if ours.dtype == np.uint8:
            nan = (theirs & 0x7F) == 0x7F
            assert np.array_equal(ours[~nan], theirs[~nan]) and np.all((ours[nan] & 0x7F) == 0x7F), name
        else:
            keep = ~expected.get(f"{name}_padding", np.zeros(theirs.shape, dtype=bool))
            same = ours.view(np.uint32)[keep] == theirs.view(np.uint32)[keep]
            assert np.all(same | (np.isnan(ours[keep]) & np.isnan(theirs[keep]))), name


@pytest.fixture
def torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "torch")


@pytest.fixture
def triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the Triton path in Triton's interpreter (kernels are decorated lazily, per TRITON_INTERPRET)."""
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# %% Torch paths against the reference


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("kwargs", [{}, {"power_2_scale": True}, {"epsilon": 1e-4, "inf_scale": "input_max"}])
def test_tensor_torch_path(dtype: str, format: str, kwargs: dict) -> None:
    for seed, shape in enumerate([(37, 53), (2, 9, 17), (300,)]):
        x, carrier = random_x(shape, dtype, seed)
        expected = reference_quant.fp8_tensor(carrier, format=format, x_dtype=dtype, **kwargs)
        assert_outputs(fp8_tensor(x, format=format, x_dtype=dtype, **kwargs), expected)


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("block", ["1x128", "128x128"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
def test_block_torch_path(block: str, dtype: str, usage: str) -> None:
    for seed, (shape, kwargs) in enumerate(
        [((259, 260), {}), ((3, 130, 5), {"power_2_scale": False}), ((129,), {"epsilon": 1e-4})]
    ):
        x, carrier = random_x(shape, dtype, seed)
        expected = reference_quant.fp8_block(
            carrier, format="float8_e4m3fn", block=block, usage=usage, x_dtype=dtype, **kwargs
        )
        got = fp8_block(x, format="float8_e4m3fn", block=block, usage=usage, x_dtype=dtype, **kwargs)
        assert_outputs(got, expected)


def delayed_state(seed: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pool = np.array([0.0, 5.0, 1.0, -2.0, np.inf, 1e-40, 3e30], dtype=F32)
    history = rng.choice(np.concatenate([pool, SPECIAL_BITS[:2].view(F32)]), length).astype(F32)
    return history, np.array([rng.choice([1.0, 0.0, 2.5, np.inf])], dtype=F32)


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("update", ["fused", "unfused"])
def test_delayed_torch_path(algo: str, update: str) -> None:
    for seed in range(12):
        x, carrier = random_x((5, 7), "bfloat16", seed)
        if seed % 3 == 0:
            x, carrier = torch.zeros_like(x), np.zeros_like(carrier)
        history, scale = delayed_state(seed, 1 + seed % 5)
        kwargs = {"format": "float8_e4m3fn", "amax_compute_algo": algo, "update": update, "margin": seed % 3}
        expected = reference_quant.fp8_delayed(carrier, history, scale, **kwargs)
        assert_outputs(fp8_delayed(x, torch.from_numpy(history), torch.from_numpy(scale), **kwargs), expected)


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
def test_dequant_torch_path(out_dtype: str) -> None:
    codes = np.random.default_rng(0).integers(0, 256, (131, 260), dtype=np.uint8)
    scales = np.array([0.1, 3e-39, 7e33, np.nan], dtype=F32)
    for format in ("float8_e4m3fn", "float8_e5m2"):
        for scale in scales:
            expected = reference_dequant.fp8_tensor(codes, scale[None], format=format, out_dtype=out_dtype)
            got = dequant_tensor(
                torch.from_numpy(codes), torch.from_numpy(scale[None]), format=format, out_dtype=out_dtype
            )
            assert_outputs(got, expected)
        for block, operand, shape in [
            ("1x128", "rowwise", (3, 132)),
            ("1x128", "columnwise", (2, 260)),
            ("128x128", "rowwise", (2, 4)),
            ("128x128", "columnwise", (3, 4)),
        ]:
            data = codes if operand == "rowwise" else np.ascontiguousarray(codes.T)
            scale = np.random.default_rng(1).choice(scales, shape).astype(F32)
            kwargs = {"format": format, "block": block, "operand": operand, "out_dtype": out_dtype}
            expected = reference_dequant.fp8_block(data, scale, **kwargs)
            assert_outputs(dequant_block(torch.from_numpy(data), torch.from_numpy(scale), **kwargs), expected)


# %% Triton kernels in the interpreter


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("core", ["lean", "exact"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
def test_tensor_and_delayed_kernels(monkeypatch: pytest.MonkeyPatch, core: str, dtype: str) -> None:
    monkeypatch.setattr(fast_fp8, "ROUNDING_CORE", core)
    monkeypatch.setattr(fast_fp8, "AMAX_TILE", (64, 2, 3))  # the amax programs stride over many blocks
    for seed, (shape, format, kwargs) in enumerate(
        [
            ((37, 70), "float8_e4m3fn", {}),
            ((3, 5, 9), "float8_e5m2", {"power_2_scale": True, "usage": "columnwise"}),
            ((0, 4), "float8_e4m3fn", {"epsilon": 1e-4}),
            ((65,), "float8_e4m3fn", {"inf_scale": "input_max", "usage": "rowwise"}),
        ]
    ):
        x, carrier = random_x(shape, dtype, seed)
        expected = reference_quant.fp8_tensor(carrier, format=format, x_dtype=dtype, **kwargs)
        assert_outputs(fp8_tensor(x, format=format, x_dtype=dtype, **kwargs), expected)
    for seed, update in enumerate(["fused", "unfused", "fused"]):
        x, carrier = random_x((6, 66), dtype, seed)
        history, scale = delayed_state(seed, 3 + seed)
        kwargs = {"format": "float8_e5m2", "update": update, "amax_compute_algo": ["max", "most_recent"][seed % 2]}
        expected = reference_quant.fp8_delayed(carrier, history, scale, **kwargs)
        assert_outputs(fp8_delayed(x, torch.from_numpy(history), torch.from_numpy(scale), **kwargs), expected)


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("block", ["1x128", "128x128"])
@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
def test_block_kernel(monkeypatch: pytest.MonkeyPatch, block: str, usage: str) -> None:
    cases = [
        ((130, 131), "bfloat16", "float8_e4m3fn", {}, "lean"),
        ((2, 3, 129), "float32", "float8_e5m2", {"power_2_scale": False}, "exact"),
        ((5, 1), "float16", "float8_e4m3fn", {"epsilon": 1e-4}, None),
        ((256, 256), "bfloat16", "float8_e4m3fn", {}, None),  # whole tiles: the kernel's unmasked (EVEN) form
    ]
    for seed, (shape, dtype, format, kwargs, core) in enumerate(cases):
        monkeypatch.setattr(fast_fp8, "ROUNDING_CORE", core)
        x, carrier = random_x(shape, dtype, seed)
        if seed == 0:  # a zero block, a subnormal-only block and an all-NaN row
            x[:, :128] = 0
            x[128:, 128:] = torch.tensor(1e-40, dtype=x.dtype)
            x[129, :] = float("nan")
            carrier = x.float().numpy()
        kwargs = {"format": format, "block": block, "usage": usage, "x_dtype": dtype, **kwargs}
        assert_outputs(fp8_block(x, **kwargs), reference_quant.fp8_block(carrier, **kwargs))


@pytest.mark.parametrize(("dtype", "format", "power_2_scale"), [("bfloat16", "float8_e4m3fn", True),
                                                                 ("float32", "float8_e5m2", False)])  # fmt: skip
def test_gluon_block_kernel_compiles_for_sm90_without_a_shared_memory_transpose(
    dtype: str, format: str, power_2_scale: bool
) -> None:
    """The CUDA kernel of 1x128 both on whole tiles (``fast.quant.fp8_block.gluon``) cannot run here (Gluon has
    no interpreter; the GPU tests check its bytes), but it compiles with this Triton for sm_90 (Triton ships
    ptxas), and its PTX shows the design: the hardware conversion, the columnwise codes stored as words, and no byte
    through shared memory.  Compiled in a fresh process: this one's interpreted kernels leave Triton's language
    patched for the interpreter."""
    pytest.importorskip("fast.quant.fp8_block.gluon", exc_type=ImportError)
    program = (
        "import sys; from fast.quant.fp8_block.gluon import sm90_ptx; "
        "print(sm90_ptx(*sys.argv[1:3], sys.argv[3] == 'True'))"
    )
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    args = [sys.executable, "-c", program, dtype, format, str(power_2_scale)]
    ptx = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    assert f"cvt.rn.satfinite.{'e4m3' if format == 'float8_e4m3fn' else 'e5m2'}x2.f32" in ptx
    assert "st.global.b32" in ptx  # a thread's four columnwise codes of a column, one word
    assert not re.search(r"(st|ld)\.shared\.(b8|u8)", ptx)


@pytest.mark.usefixtures("triton_interpreter")
def test_dequant_kernels() -> None:
    codes = np.random.default_rng(2).integers(0, 256, (130, 129), dtype=np.uint8)
    scales = np.array([0.1, 3e-39, 7e33, np.nan, 0.0], dtype=F32)
    for format, out_dtype in [("float8_e4m3fn", "bfloat16"), ("float8_e5m2", "float16"), ("float8_e4m3fn", "float32")]:
        expected = reference_dequant.fp8_tensor(codes, scales[:1], format=format, out_dtype=out_dtype)
        assert_outputs(
            dequant_tensor(torch.from_numpy(codes), torch.from_numpy(scales[:1]), format=format, out_dtype=out_dtype),
            expected,
        )
        for block in ("1x128", "128x128"):
            for operand in ("rowwise", "columnwise"):
                data = codes if operand == "rowwise" else np.ascontiguousarray(codes.T)
                q = reference_quant.fp8_block(np.zeros((130, 129), dtype=F32), format=format, block=block)
                shape = q["scale_inv" if operand == "rowwise" else "columnwise_scale_inv"].shape
                scale = np.random.default_rng(3).choice(scales, shape).astype(F32)
                kwargs = {"format": format, "block": block, "operand": operand, "out_dtype": out_dtype}
                expected = reference_dequant.fp8_block(data, scale, **kwargs)
                assert_outputs(dequant_block(torch.from_numpy(data), torch.from_numpy(scale), **kwargs), expected)


# %% Device functions against the reference


def _code_kernel(
    bits_ptr,
    out_ptr,
    exact_ptr,
    n,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_BITS: tl.constexpr,
    MAGIC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(bits_ptr + offsets, mask=mask, other=0)
    tl.store(out_ptr + offsets, fp8_code(value, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, 1), mask=mask)
    tl.store(exact_ptr + offsets, fp8_code(value, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, 0), mask=mask)


def _scale_kernel(
    amax_ptr,
    scale_ptr,
    inverse_ptr,
    pow2_ptr,
    pow2_inverse_ptr,
    n,
    epsilon,
    value_for_inf,
    FP8_MAX: tl.constexpr,
    MAX_BITS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    amax = tl.load(amax_ptr + offsets, mask=mask, other=0.0)
    scale = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, False)
    tl.store(scale_ptr + offsets, scale, mask=mask)
    tl.store(inverse_ptr + offsets, reciprocal(scale, False), mask=mask)
    pow2 = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, True)
    tl.store(pow2_ptr + offsets, pow2, mask=mask)
    tl.store(pow2_inverse_ptr + offsets, reciprocal(pow2, True), mask=mask)


SWEEP = np.concatenate(
    [
        np.arange(1 << 16, dtype=np.uint32) << 16,  # every bfloat16 pattern
        np.random.default_rng(4).integers(0, 1 << 32, 1 << 15, dtype=np.uint64).astype(np.uint32),
        np.array([0x43E80000, 0x43E7FFFF, 0x43E80001, 0x3C7FFFFF, 0x3C800000, 0x3A800000, 0x3A000000], np.uint32),
    ]
)
"""Every bfloat16 pattern, random float32 patterns, and E4M3's 464 tie, min-normal and min-subnormal edges."""


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e5m2"])
def test_lean_rounding_is_round_to_code_and_the_reference_cast(format: str) -> None:
    meta = {k: v for k, v in FORMAT_META[format].items() if k != "FP8_MAX"}
    x = torch.from_numpy(SWEEP.view(np.int32)).view(torch.float32)
    lean, exact = (torch.empty(x.shape, dtype=torch.uint8) for _ in range(2))
    with fast_fp8.quiet_interpreter(torch.device("cpu")):  # NumPy flags the signalling NaNs of the sweep
        jit(_code_kernel)[(len(SWEEP) // 8192 + 1,)](x, lean, exact, len(SWEEP), **meta, BLOCK=8192)
    expected = reference_cast(SWEEP.view(F32), format=format, overflow="saturate")["codes"]
    assert np.array_equal(exact.numpy(), expected)
    assert np.array_equal(lean.numpy(), expected)


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize(("epsilon", "value_for_inf"), [(0.0, 3.4028234663852886e38), (1e-4, 3.3895313892515355e38)])
def test_scale_device_functions_match_the_reference(format: str, epsilon: float, value_for_inf: float) -> None:
    """Random amaxes, the specials, and the edges of the division-free power-of-two rule: mantissas next to
    fp8_max's (1.75) and amaxes next to fp8_max / FLT_MAX, where the quotient overflows."""
    fp8_max, max_bits = FORMATS[format].max_value, FORMAT_META[format]["MAX_BITS"]
    rng = np.random.default_rng(5)
    overflow_edge = int((F32(fp8_max) / F32(3.4028234663852886e38)).view(np.uint32))
    mantissa_edges = (np.arange(0x01, 0xFE, dtype=np.uint32)[:, None] << 23) | np.uint32(max_bits & 0x7FFFFF)
    amax = np.concatenate(
        [
            rng.integers(0, 0x7F800000, 1 << 14, dtype=np.uint64).astype(np.uint32),
            np.array([0, 1, 0x00400000, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000], np.uint32),
            np.array([0x3E4CCCCD, 0x03E00000, 0x03DFFFFF, 0x03E00001], np.uint32),  # 448 / FLT_MAX neighbourhood
            overflow_edge + np.arange(-3, 4, dtype=np.int64).astype(np.uint32),
            (mantissa_edges + np.array([-1, 0, 1], dtype=np.int64).astype(np.uint32)).reshape(-1),
        ]
    ).view(F32)
    epsilon = float(F32(epsilon))
    out = [torch.empty(amax.shape) for _ in range(4)]
    kernel = jit(_scale_kernel)
    with fast_fp8.quiet_interpreter(torch.device("cpu")):
        kernel[(len(amax) // 4096 + 1,)](
            torch.from_numpy(amax),
            *out,
            len(amax),
            epsilon,
            value_for_inf,
            FP8_MAX=fp8_max,
            MAX_BITS=max_bits,
            BLOCK=4096,
        )
    for pow2, scale, inverse in ((False, out[0], out[1]), (True, out[2], out[3])):
        expected = reference_scale(amax, fp8_max, power_2_scale=pow2, epsilon=epsilon, value_for_inf=value_for_inf)
        assert np.array_equal(scale.numpy().view(np.uint32), expected.view(np.uint32)), pow2
        with np.errstate(divide="ignore"):
            assert np.array_equal(inverse.numpy().view(np.uint32), (F32(1) / expected).view(np.uint32))


# %% Paths and argument checks


def test_forced_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        fp8_block(torch.ones(2, 2), format="float8_e4m3fn")


def test_rounding_core_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fast_fp8.rounding_core(torch.device("cpu")) == fast_fp8.ROUNDING_CORES.index("lean")
    monkeypatch.setattr(fast_fp8, "ROUNDING_CORE", "hardware")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        fast_fp8.rounding_core(torch.device("cpu"))
    monkeypatch.setattr(fast_fp8, "ROUNDING_CORE", "rtz")
    with pytest.raises(ValueError, match="ROUNDING_CORE='rtz'"):
        fast_fp8.rounding_core(torch.device("cuda"))


def test_unknown_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "gpu")
    for call in (
        lambda: fp8_tensor(torch.ones(2, 2), format="float8_e4m3fn"),
        lambda: fp8_block(torch.ones(0, 2), format="float8_e4m3fn"),
        lambda: dequant_tensor(torch.zeros(2, dtype=torch.uint8), torch.ones(1), format="float8_e4m3fn"),
    ):
        with pytest.raises(ValueError, match="QCONFORM_FAST_PATH='gpu'"):
            call()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: fp8_tensor(torch.ones(2, 3).t(), format="float8_e4m3fn"), ValueError, "must be contiguous"),
        (lambda: fp8_tensor(torch.ones(()), format="float8_e4m3fn"), ValueError, r"x.shape=\(\)"),
        (lambda: fp8_tensor(torch.ones(2, dtype=torch.float64), format="float8_e4m3fn"), TypeError, "x.dtype=float64"),
        (lambda: fp8_block(torch.ones(2), format="float8_e4m3fn", x_dtype="bfloat16"), ValueError, "same dtype"),
        (lambda: fp8_block(torch.ones(2), format="float8_e4m3fn", power_2_scale=1), ValueError, "power_2_scale=1"),
        (lambda: fp8_block(torch.ones(2), format="float8_e4m3fn", epsilon=-1.0), ValueError, "epsilon=-1.0"),
        (
            lambda: fp8_delayed(torch.ones(2), torch.zeros(2), torch.ones(1), format="float8_e4m3fn", margin=65),
            ValueError,
            "margin=65",
        ),
        (
            lambda: fp8_delayed(torch.ones(2), torch.zeros(()), torch.ones(1), format="float8_e4m3fn"),
            ValueError,
            r"amax_history.shape=\(\)",
        ),
        (
            lambda: fp8_delayed(
                torch.ones(2), torch.zeros(2), torch.ones(1, dtype=torch.float16), format="float8_e4m3fn"
            ),
            TypeError,
            "scale.dtype=float16",
        ),
        (
            lambda: dequant_block(
                torch.zeros(2, 2, dtype=torch.uint8),
                torch.ones(1, 4),
                format="float8_e4m3fn",
                block="128x128",
                operand="columnwise",
                out_dtype="int8",
            ),
            ValueError,
            "out_dtype='int8'",
        ),
        (
            lambda: dequant_block(torch.zeros((), dtype=torch.uint8), torch.ones(1, 4), format="float8_e4m3fn"),
            ValueError,
            "at least one dimension",
        ),
    ],
)
def test_argument_errors(call, error: type[Exception], match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()


def test_inputs_are_not_modified() -> None:
    x = torch.tensor([[1.0, float("nan"), -3.0]])
    history, scale = torch.tensor([0.0, 5.0]), torch.tensor([2.0])
    before = [t.clone() for t in (x, history, scale)]
    fp8_delayed(x, history, scale, format="float8_e4m3fn")
    fp8_block(x, format="float8_e4m3fn")
    assert all(
        torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(before, (x, history, scale), strict=True)
    )
