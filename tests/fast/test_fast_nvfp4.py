"""``fast.quant.nvfp4``, ``fast.dequant.nvfp4`` and ``fast.stochastic.nvfp4`` on CPU: the torch paths and the
Triton kernels (in Triton's interpreter, small shapes) against ``reference``, bit for bit; the kernels' device
functions on every bfloat16 pattern; path selection.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import fast._triton
from fast._triton import jit, round_to_code, tl
from fast.dequant.nvfp4 import dequantize as fast_dequantize_native
from fast.dequant.nvfp4 import nvfp4 as fast_dequantize
from fast.quant.nvfp4 import PATH_ENV, e2m1_rne, hadamard_16_columns
from fast.quant.nvfp4 import nvfp4 as fast_nvfp4
from fast.stochastic import nvfp4 as fast_stochastic
from reference.cast import fp4 as reference_fp4
from reference.cast import fp8 as reference_fp8
from reference.dequant.nvfp4 import nvfp4 as reference_dequantize
from reference.quant.nvfp4 import hadamard_16 as reference_hadamard
from reference.quant.nvfp4 import nvfp4 as reference_nvfp4

launch_module = importlib.import_module("fast.quant.nvfp4.launch")
_e4m3_rne = importlib.import_module("fast.quant.nvfp4.rounding")._e4m3_rne

GENERATOR = torch.Generator().manual_seed(20261122)


def carrier(x: torch.Tensor) -> np.ndarray:
    """The reference's input: float32 (bfloat16 widened by bits), float16 as is."""
    if x.dtype == torch.bfloat16:
        return (x.view(torch.int16).numpy().astype(np.int32).astype(np.uint32) << 16).view(np.float32)
    return x.numpy()


def matrix(shape: tuple[int, int], dtype: torch.dtype, kind: str) -> torch.Tensor:
    """``normal`` values with block magnitudes spread over 2**±20, or uniformly random bit patterns (``wide``)."""
    if kind == "normal":
        spread = 2.0 ** torch.randint(-20, 20, (shape[0], shape[1] // 16, 1), generator=GENERATOR).float()
        x = torch.randn((shape[0], shape[1] // 16, 16), generator=GENERATOR) * spread
        return x.reshape(shape).to(dtype)
    bits = torch.randint(-(2**31), 2**31, shape, generator=GENERATOR, dtype=torch.int64).to(torch.int32)
    return bits.view(torch.float32) if dtype == torch.float32 else bits.to(torch.int16).view(dtype)


def random_bits(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    drawn = torch.randint(-(2**31), 2**31, shape, generator=GENERATOR, dtype=torch.int64).to(torch.int32)
    return drawn.view(torch.uint32) if dtype == torch.uint32 else drawn.to(torch.uint8)


def assert_matches_reference(x: torch.Tensor, **params: Any) -> None:
    """Every output of ``fast.quant.nvfp4`` equals the reference's (NaN scales and don't-care bytes as the spec)."""
    __tracebackhide__ = True
    as_numpy = {k: v.numpy() for k, v in params.items() if isinstance(v, torch.Tensor)}
    settings = {k: v for k, v in params.items() if not isinstance(v, torch.Tensor)}
    expected = reference_nvfp4(carrier(x), **settings, **as_numpy)
    got = fast_nvfp4(x, **params)
    assert set(got) == {k for k in expected if not k.endswith("dont_care")}
    for name, tensor in got.items():
        g, e = tensor.numpy(), expected[name]
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


def valid_combinations() -> list[dict[str, Any]]:
    """Every parameter set the spec has a row for."""
    combos = []
    for usage, block, scope, rht, rounding, rule, zero in itertools.product(
        ["both", "rowwise", "columnwise"],
        ["1x16", "16x16"],
        ["tensor", "row"],
        [False, True],
        ["rne", "stochastic"],
        ["te", "torchao", "torchao_cuda"],
        ["flt_max", "zero"],
    ):
        if scope == "row" and (rht or block != "1x16" or rounding != "rne" or usage == "columnwise"):
            continue
        if rule != "te" and (block != "1x16" or rht or rounding != "rne" or scope != "tensor" or zero != "flt_max"):
            continue
        if usage == "rowwise" and rht:
            continue
        combos.append(
            {"usage": usage, "block": block, "amax_scope": scope, "rht": rht, "rounding": rounding}
            | {"scale_rule": rule, "zero_scale": zero}
        )
    return combos


def with_bits(
    params: dict[str, Any], shape: tuple[int, int], dtypes: tuple[torch.dtype, torch.dtype]
) -> dict[str, Any]:
    if params["rounding"] != "stochastic":
        return params
    extra = {}
    if params["usage"] != "columnwise":
        extra["random_bits"] = random_bits(shape, dtypes[0])
    if params["usage"] != "rowwise":
        extra["columnwise_random_bits"] = random_bits((shape[1], shape[0]), dtypes[1])
    return params | extra


def given_amaxes(x: torch.Tensor, params: dict[str, Any], which: str) -> dict[str, Any]:
    """``params`` with ``amax_source="given"`` and amaxes for the operands ``usage`` keeps: ``which`` is ``below``
    (a quarter of the data's amax: saturating blocks), ``above`` (three times it) or a float32 value."""
    true = float(np.abs(carrier(x).astype(np.float32)).max())
    value = {"below": true / 4, "above": true * 3}.get(which, which)
    amax = torch.tensor([float(value)], dtype=torch.float32, device=x.device)
    extra: dict[str, Any] = {"amax_source": "given"}
    if params.get("usage", "both") != "columnwise":
        extra["amax"] = amax
    if params.get("usage", "both") != "rowwise":
        extra["columnwise_amax"] = -amax if which == "below" else amax  # a negative one too
    return params | extra


# %% The torch path


@pytest.fixture
def torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "torch")


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("params", valid_combinations(), ids=lambda p: ",".join(f"{v}" for v in p.values()))
def test_torch_path_matches_reference(params: dict[str, Any]) -> None:
    for dtype, kind in itertools.product([torch.bfloat16, torch.float32, torch.float16], ["normal", "wide"]):
        shape = (48, 80)
        assert_matches_reference(matrix(shape, dtype, kind), **with_bits(params, shape, (torch.uint8, torch.uint32)))


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize(
    "params",
    [p for p in valid_combinations() if p["amax_scope"] == "tensor"],
    ids=lambda p: ",".join(f"{v}" for v in p.values()),
)
def test_torch_path_given_amax_matches_reference(params: dict[str, Any]) -> None:
    for dtype, which in itertools.product([torch.bfloat16, torch.float32, torch.float16], ["below", "above", "nan"]):
        shape = (48, 80)
        x = matrix(shape, dtype, "normal")
        value = float("nan") if which == "nan" else which
        assert_matches_reference(x, **given_amaxes(x, with_bits(params, shape, (torch.uint8, torch.uint8)), value))


@pytest.mark.usefixtures("torch_path")
def test_torch_path_special_values() -> None:
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40, 3.4e38, -6.0])
    x = specials[torch.randint(0, 8, (32, 32), generator=GENERATOR)]
    for params in ({}, {"block": "16x16", "rht": True}, {"scale_rule": "torchao"}, {"zero_scale": "zero"}):
        assert_matches_reference(x, **params)


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(("scale_rule", "amax_scope"), [("te", "tensor"), ("te", "row"), ("torchao", "tensor")])
def test_dequantize_torch_path(out_dtype: str, scale_rule: str, amax_scope: str) -> None:
    check_dequantize(out_dtype, scale_rule, amax_scope)


def check_dequantize(out_dtype: str, scale_rule: str, amax_scope: str, shape: tuple[int, int] = (24, 40)) -> None:
    """Random data and scale codes (every nibble and E4M3 code, NaN and -0 scales), ``shape`` data bytes."""
    rows, data_bytes = shape
    data = torch.randint(0, 256, shape, generator=GENERATOR, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(0, 256, (rows, data_bytes // 8), generator=GENERATOR, dtype=torch.int32).to(torch.uint8)
    scale = (torch.rand(rows if amax_scope == "row" else 1, generator=GENERATOR) * 4000).float()
    scale[0] = float("inf") if amax_scope == "row" else scale[0]
    name = "amax" if scale_rule == "te" else "tensor_scale"
    params = {"scale_rule": scale_rule, "amax_scope": amax_scope, "out_dtype": out_dtype}
    got = fast_dequantize(data, scales, **{name: scale}, **params)["x"].numpy()
    expected = reference_dequantize(data.numpy(), scales.numpy(), **{name: scale.numpy()}, **params)["x"]
    same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
    assert same.all(), np.argwhere(~same)[:4]


@pytest.mark.usefixtures("torch_path")
def test_dequantize_native_dtype() -> None:
    data = torch.randint(0, 256, (16, 8), generator=GENERATOR, dtype=torch.int32).to(torch.uint8)
    scales = torch.full((16, 1), 0x38, dtype=torch.uint8)
    out = fast_dequantize_native(data, scales, amax=torch.tensor([3.0]), out_dtype="bfloat16")
    assert out.dtype == torch.bfloat16 and out.shape == (16, 16)
    wide = fast_dequantize(data, scales, amax=torch.tensor([3.0]), out_dtype="bfloat16")["x"]
    assert torch.equal(out.float(), wide)


@pytest.mark.usefixtures("torch_path")
def test_stochastic_draws_are_neighbours_and_unbiased() -> None:
    x = matrix((16, 32), torch.bfloat16, "normal")
    codes = fast_stochastic(x, draws=300)["codes"].numpy()
    reference = reference_nvfp4(
        carrier(x), usage="rowwise", rounding="stochastic", random_bits=np.zeros((16, 32), np.uint8)
    )
    lower = np.stack([reference["data"] & 15, reference["data"] >> 4], axis=-1).reshape(16, 32)
    up = reference_nvfp4(
        carrier(x), usage="rowwise", rounding="stochastic", random_bits=np.full((16, 32), 0xFFFFFFFF, np.uint32)
    )
    upper = np.stack([up["data"] & 15, up["data"] >> 4], axis=-1).reshape(16, 32)
    assert ((codes == lower) | (codes == upper)).all()
    moving = lower != upper
    assert 0.2 < (codes == upper)[:, moving].mean() < 0.8


# %% The Triton kernels in the interpreter


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(PATH_ENV, "triton")


KERNEL_CASES = [
    # (params, shape, input dtype, random bits dtypes)
    ({}, (32, 48), torch.bfloat16, None),
    ({}, (128, 128), torch.bfloat16, None),  # whole tiles: the unmasked (EVEN) variant, both operands' tiling
    ({"usage": "columnwise", "rht": True}, (128, 64), torch.bfloat16, None),  # whole columnwise-only tiles
    # Ragged operands of several tiles, whole and partial (masks at 16-row / 16-column granularity)
    ({}, (144, 128), torch.bfloat16, None),  # ragged rows only
    ({}, (128, 80), torch.bfloat16, None),  # ragged columns only
    ({"usage": "columnwise"}, (272, 112), torch.float16, None),  # both ragged, columnwise-only tiles
    ({"usage": "columnwise"}, (144, 64), torch.bfloat16, None),
    ({"rounding": "stochastic"}, (144, 80), torch.bfloat16, (torch.uint8, torch.uint32)),
    ({"rounding": "stochastic"}, (64, 128), torch.bfloat16, (torch.uint8, torch.uint8)),  # whole stochastic tiles
    ({"usage": "rowwise"}, (16, 128), torch.bfloat16, None),
    ({"usage": "rowwise"}, (16, 2048), torch.bfloat16, None),  # whole tiles: the unmasked (EVEN) rowwise kernel
    ({"usage": "rowwise", "block": "16x16", "zero_scale": "zero"}, (32, 2048), torch.float16, None),
    ({"usage": "rowwise"}, (48, 144), torch.float16, None),
    ({"usage": "rowwise", "block": "16x16"}, (48, 160), torch.float32, None),
    ({"usage": "columnwise", "block": "16x16"}, (48, 32), torch.float32, None),
    ({"block": "16x16", "zero_scale": "zero"}, (48, 80), torch.float32, None),  # x.T shares x's tile scales and codes
    ({"block": "16x16"}, (128, 128), torch.bfloat16, None),  # the same on whole tiles
    ({"block": "16x16", "rht": True}, (32, 64), torch.bfloat16, None),
    ({"rht": True, "zero_scale": "zero"}, (16, 48), torch.float32, None),
    ({"amax_scope": "row"}, (48, 32), torch.bfloat16, None),
    ({"amax_scope": "row", "usage": "rowwise"}, (16, 144), torch.float32, None),
    ({"scale_rule": "torchao"}, (32, 48), torch.bfloat16, None),
    ({"scale_rule": "torchao_cuda", "usage": "rowwise"}, (16, 64), torch.float32, None),
    ({"rounding": "stochastic"}, (32, 48), torch.bfloat16, (torch.uint8, torch.uint32)),
    ({"rounding": "stochastic", "usage": "rowwise"}, (16, 2048), torch.bfloat16, (torch.uint8, torch.uint8)),
    ({"rounding": "stochastic", "usage": "rowwise"}, (16, 80), torch.float32, (torch.uint32, torch.uint8)),
    (
        {"rounding": "stochastic", "usage": "rowwise", "block": "16x16"},
        (16, 48),
        torch.float16,
        (torch.uint32, torch.uint8),
    ),
    (
        {"rounding": "stochastic", "rht": True, "usage": "columnwise"},
        (32, 32),
        torch.float32,
        (torch.uint8, torch.uint8),
    ),
]


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize(("params", "shape", "dtype", "bits"), KERNEL_CASES)
def test_kernels_match_reference(
    params: dict[str, Any], shape: tuple[int, int], dtype: torch.dtype, bits: tuple[torch.dtype, torch.dtype] | None
) -> None:
    full = {"usage": "both", "rounding": "rne"} | params
    for kind in ("wide", "normal"):
        x = matrix(shape, dtype, kind)
        extra = with_bits(full, shape, bits) if bits else full
        assert_matches_reference(x, **extra)


GIVEN_KERNEL_CASES = [
    # (params, shape, input dtype): the quantize kernels alone, from given amaxes
    ({}, (128, 128), torch.bfloat16),  # whole tiles, both operands
    ({}, (144, 80), torch.bfloat16),  # ragged, both operands
    ({"usage": "rowwise"}, (16, 2048), torch.bfloat16),  # whole tiles of the rowwise kernel
    ({"usage": "rowwise"}, (48, 144), torch.float16),
    ({"usage": "columnwise", "rht": True}, (32, 64), torch.bfloat16),
    ({"block": "16x16", "zero_scale": "zero"}, (48, 80), torch.float32),
    ({"scale_rule": "torchao_cuda", "usage": "rowwise"}, (16, 64), torch.float32),
    ({"scale_rule": "torchao"}, (32, 48), torch.bfloat16),
    ({"rounding": "stochastic"}, (32, 48), torch.bfloat16),
]


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize(("params", "shape", "dtype"), GIVEN_KERNEL_CASES)
def test_kernels_from_a_given_amax_match_reference(
    params: dict[str, Any], shape: tuple[int, int], dtype: torch.dtype
) -> None:
    full = with_bits({"usage": "both", "rounding": "rne"} | params, shape, (torch.uint8, torch.uint32))
    x = matrix(shape, dtype, "normal")
    for which in ("below", "above", float("nan"), 0.0):
        assert_matches_reference(x, **given_amaxes(x, full, which))


@pytest.mark.usefixtures("interpreter")
def test_kernels_from_a_given_amax_skip_the_amax_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    x = matrix((32, 48), torch.bfloat16, "normal")
    expected = fast_nvfp4(x)
    monkeypatch.setattr(launch_module, "_amax_pass", None)  # calling it would raise
    got = fast_nvfp4(x, amax_source="given", amax=expected["amax"], columnwise_amax=expected["columnwise_amax"])
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    assert got["amax"].data_ptr() != expected["amax"].data_ptr()  # a copy, not the caller's tensor


@pytest.mark.usefixtures("interpreter")
def test_kernels_on_special_values() -> None:
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40, 3.4e38, -6.0])
    x = specials[torch.randint(0, 8, (16, 32), generator=GENERATOR)]
    assert_matches_reference(x)
    assert_matches_reference(x, scale_rule="torchao", usage="rowwise")


@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize(("scale_rule", "amax_scope"), [("te", "tensor"), ("te", "row"), ("torchao", "tensor")])
def test_dequantize_kernel(scale_rule: str, amax_scope: str) -> None:
    for out_dtype in ("float32", "bfloat16", "float16"):
        check_dequantize(out_dtype, scale_rule, amax_scope)
        check_dequantize(out_dtype, scale_rule, amax_scope, shape=(16, 256))  # whole tiles: the unmasked kernel


# %% Device functions, on every bfloat16 pattern


def _probe_kernel(x_ptr, out_ptr, n, WHICH: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    if WHICH == 0:
        tl.store(out_ptr + offsets, e2m1_rne(x), mask=mask)
    elif WHICH == 1:
        bits = x.to(tl.int32, bitcast=True)
        tl.store(out_ptr + offsets, round_to_code(bits, bits, 0, 1, 1, 28, 8, True, 7, 7, 7, 0, 0), mask=mask)
    else:
        code, _ = _e4m3_rne(x)
        tl.store(out_ptr + offsets, code, mask=mask)


def probe(x: torch.Tensor, which: int) -> np.ndarray:
    out = torch.empty(x.shape, dtype=torch.int32)
    with np.errstate(all="ignore"):
        jit(_probe_kernel)[(-(-x.numel() // 8192),)](x, out, x.numel(), WHICH=which, BLOCK=8192)
    return out.numpy()


ALL_BF16 = (torch.arange(1 << 16, dtype=torch.int32) << 16).view(torch.float32)
RANDOM_F32 = torch.randint(-(2**31), 2**31, (1 << 16,), generator=GENERATOR, dtype=torch.int64).to(torch.int32)


@pytest.mark.usefixtures("interpreter")
def test_e2m1_rne_equals_the_generic_rounding_and_the_reference() -> None:
    for x in (ALL_BF16, RANDOM_F32.view(torch.float32), ALL_BF16 * 2.0**-120, ALL_BF16 * 2.0**120):
        got = probe(x, 0)
        np.testing.assert_array_equal(got, probe(x, 1))
        np.testing.assert_array_equal(got, reference_fp4(x.numpy(), format="float4_e2m1fn", nan="max")["codes"])


@pytest.mark.usefixtures("interpreter")
def test_e4m3_rne_on_every_sign() -> None:
    """Both signs (a negative given amax gives negative block scales under te), infinities saturating to +-448."""
    for x in (ALL_BF16, RANDOM_F32.view(torch.float32), ALL_BF16 * 2.0**-10):
        x = x[~x.isnan()]
        expected = reference_fp8(x.numpy(), format="float8_e4m3fn", overflow="saturate")["codes"]
        np.testing.assert_array_equal(probe(x, 2), expected)


def _hadamard_kernel(x_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """The transform of the rows of ``x [ROWS, COLS]``, as the kernels apply it: to the columns of ``x.T``."""
    offsets = tl.arange(0, COLS)[:, None] + tl.arange(0, ROWS)[None, :] * COLS  # x.T [COLS, ROWS]
    tl.store(out_ptr + offsets, hadamard_16_columns(tl.load(x_ptr + offsets), COLS, ROWS))


@pytest.mark.usefixtures("interpreter")
def test_hadamard_device_function() -> None:
    # Signed zeros and the smallest subnormals (whose terms s_i v_i / 4 underflow to signed zeros): a zero sum is
    # -0 only where both addends are -0, so every butterfly must add its two partners (a GPU default-profile run
    # found a reduction over the pair that gave +0)
    tiny = torch.tensor([0.0, -0.0, 1e-45, -1e-45])[torch.randint(0, 4, (32, 64), generator=GENERATOR)]
    x = torch.cat([matrix((16, 64), torch.float32, "normal"), matrix((16, 64), torch.float32, "wide"), tiny])
    out = torch.empty_like(x)
    with np.errstate(all="ignore"):
        jit(_hadamard_kernel)[(1,)](x, out, ROWS=64, COLS=64)
    expected = reference_hadamard(x.numpy())
    same = (out.numpy().view(np.uint32) == expected.view(np.uint32)) | (np.isnan(out.numpy()) & np.isnan(expected))
    assert same.all()


# %% Path selection and arguments


def test_forced_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        fast_nvfp4(torch.ones(16, 16))


def test_forced_triton_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast._triton, "triton", None)
    monkeypatch.setenv(PATH_ENV, "triton")
    with pytest.raises(RuntimeError, match="triton is not installed"):
        fast_nvfp4(torch.ones(16, 16))


def test_unknown_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "cuda")
    with pytest.raises(ValueError, match="QCONFORM_FAST_PATH='cuda'"):
        fast_nvfp4(torch.ones(16, 16))


@pytest.mark.parametrize(
    ("call", "error", "fragment"),
    [
        (lambda: fast_nvfp4(np.zeros((16, 16), np.float32)), TypeError, "torch.Tensor"),
        (lambda: fast_nvfp4(torch.ones(16, 16), rht="yes"), ValueError, "rht='yes'"),
        (lambda: fast_nvfp4(torch.ones(16, 16), usage="rowwise", rounding="stochastic",
                            random_bits=torch.zeros(16, 16, dtype=torch.int8)), TypeError, "random_bits.dtype=int8"),
        (lambda: fast_dequantize(torch.zeros(2, 8, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8),
                                 amax=torch.ones(1), amax_scope="row"), ValueError, "amax.shape=(1,)"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="fixed"), ValueError, "amax_source='fixed'"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="given", usage="rowwise"), ValueError, "no amax"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax=torch.ones(1)), ValueError,
         "amax with amax_source='computed'"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="given", usage="rowwise", amax=torch.ones(1),
                            columnwise_amax=torch.ones(1)), ValueError, "columnwise_amax with usage"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="given", usage="rowwise", amax=np.ones(1, np.float32)),
         TypeError, "amax of type ndarray"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="given", usage="rowwise",
                            amax=torch.ones(1, dtype=torch.float16)), TypeError, "amax.dtype=float16"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="given", usage="rowwise", amax=torch.ones(())),
         ValueError, "amax.shape=()"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="given", usage="columnwise",
                            columnwise_amax=torch.ones(1, device="meta")), ValueError, "columnwise_amax on meta"),
        (lambda: fast_nvfp4(torch.ones(16, 16), amax_source="given", amax_scope="row"), ValueError,
         "amax_scope='row'"),
    ],
)  # fmt: skip
def test_bad_arguments(call: Callable[[], object], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        call()


_STORES_PROGRAM = """
import importlib, json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from fast._triton import jit

for module, name, settings in json.loads(sys.argv[1]):
    kernel = jit(getattr(importlib.import_module(module), name))
    signature, constexprs = {}, {}
    for index, arg in enumerate(kernel.arg_names):
        if index in kernel.constexprs:
            signature[arg], constexprs[arg] = "constexpr", settings[arg]
        else:
            signature[arg] = settings.get(arg, "*u8" if arg.endswith("_ptr") else "i32")
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    print(json.dumps(re.findall(r"st[.]global[.][a-zA-Z0-9_.:]*", ptx)))
"""


def test_kernels_hint_their_stores_as_asked() -> None:
    """``STORE_EVICTION`` reaches the stores (``fast.quant.nvfp4.launch.store_eviction``): the single quantize and
    rowwise kernels and ``fast.group``'s grouped kernel, compiled for sm_90 with
    ``evict_first`` or ``evict_last``, store their codes and scales with that L2 hint, with none without one.
    Compiled in a fresh process: this one's interpreted kernels leave Triton's language patched for the interpreter."""
    pytest.importorskip("triton")
    words = {"words_ptr": "*i32", "random_ptr": "*i32", "amax_ptr": "*i32", "amax_source_ptr": "*i32"}
    operands = {
        "x_ptr": "*bf16", "amax_ptr": "*i32", "columnwise_amax_ptr": "*i32", "amax_source_ptr": "*i32",
        "columnwise_amax_source_ptr": "*i32", "INPUT": 1, "ROWWISE": False, "COLUMNWISE": True, "TILE_2D": False,
        "ROW_AMAX": False, "RHT": False, "ROUNDING": 0, "RANDOM_BITS": 0, "COLUMNWISE_RANDOM_BITS": 0, "RULE": 0,
        "ZERO_ENC": False, "BM": 128, "BK": 64, "EVEN": True, "SANITIZE": False, "SAME_AMAX": True, "STAGES": 1,
        "SOURCES": 1024,
    }  # fmt: skip
    rowwise = {
        **words, "INPUT": 1, "TILE_2D": False, "ROW_AMAX": False, "ROUNDING": 0, "RANDOM_BITS": 0, "RULE": 0,
        "ZERO_ENC": False, "BR": 2, "NB": 128, "V": 4, "EVEN": True, "SANITIZE": False, "SOURCES": 1024,
    }  # fmt: skip
    grouped = {
        "x_ptr": "*bf16", "words_ptr": "*i32", "amax_bits_ptr": "*i32", "table_ptr": "*i64", "INPUT": 1,
        "ROWWISE": True, "COLUMNWISE": True, "TILE_2D": False, "BM": 128, "BK": 64, "V": 4, "EVEN": True,
        "SANITIZE": False, "MEMBERS": 16,
    }  # fmt: skip
    hints = ("evict_first", "evict_last", "")
    kernels = [
        ("fast.quant.nvfp4.kernels", "nvfp4_quantize_kernel", {**operands, "ROWWISE": both, "STORE_EVICTION": hint})
        for both in (False, True)
        for hint in hints
    ]
    kernels += [
        ("fast.quant.nvfp4.kernels", "nvfp4_rowwise_kernel", {**rowwise, "STORE_EVICTION": hint}) for hint in hints
    ]
    kernels += [("fast.group.kernels", "grouped_nvfp4_kernel", {**grouped, "STORE_EVICTION": hint}) for hint in hints]
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    args = [sys.executable, "-c", _STORES_PROGRAM, json.dumps(kernels)]
    lines = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    stores = [json.loads(line) for line in lines[-len(kernels) :]]
    # every code and scale store, all but program 0's per-tensor scale and amax words (2 an operand; the grouped
    # kernel's program 0 copies the members' amaxes: 1 store)
    for (_, name, constexprs), kernel_stores in zip(kernels, stores, strict=True):
        others = 1 if name.startswith("grouped") else 2 * (1 + constexprs.get("ROWWISE", False))
        hint = constexprs["STORE_EVICTION"]
        counts = {kind: sum(f"L1::{kind}" in store for store in kernel_stores) for kind in hints[:2]}
        expected = {kind: len(kernel_stores) - others if kind == hint else 0 for kind in hints[:2]}
        assert counts == expected and len(kernel_stores) > others, (name, hint, kernel_stores)


def test_store_hint_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """``store_eviction``'s table (its docstring gives the H100 figures behind each entry): ``evict_first`` up to 4
    times the L2, above it ``evict_last`` except for the rowwise operand alone with a given amax or RHT and both
    operands with RHT; no hint off CUDA."""
    nv = importlib.import_module("fast.quant.nvfp4.launch")
    nv_settings = importlib.import_module("fast.quant.nvfp4.settings")
    l2 = 50 << 20
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(L2_cache_size=l2))

    defaults = {"usage": "both", "block": "1x16", "amax_scope": "tensor", "rht": False, "rounding": "rne",
                "scale_rule": "te", "zero_scale": "flt_max"}  # fmt: skip

    def hint(elements: int, device: str = "cuda", **settings: Any) -> str:
        x = types.SimpleNamespace(device=torch.device(device), numel=lambda: elements, element_size=lambda: 2)
        return nv.store_eviction(x, nv_settings.Settings(**{**defaults, **settings}))

    small, large = 2 * l2 // 2, 4 * l2 // 2 + 1  # elements of 2 bytes: at most and just above 4 x the L2
    assert hint(large, device="cpu") == ""
    for usage in ("rowwise", "columnwise", "both"):
        for rht in (False, True):
            for given in ("computed", "given"):
                assert hint(small, usage=usage, rht=rht, amax_source=given) == "evict_first"
                first = (rht and usage != "columnwise") or (given == "given" and usage == "rowwise")
                expected = "evict_first" if first else "evict_last"
                assert hint(large, usage=usage, rht=rht, amax_source=given) == expected, (usage, rht, given)


_GLUON_STORES_PROGRAM = """
import json, re, sys
from fast.quant.nvfp4.gluon import sm90_ptx

for zero_enc, eviction in json.loads(sys.argv[1]):
    print(json.dumps(re.findall(r"st[.]global[.][a-zA-Z0-9_.:]*", sm90_ptx(zero_enc, eviction))))
"""


def test_gluon_columnwise_kernel_compiles_for_sm90_with_wide_transposed_stores() -> None:
    """The CUDA kernel of the columnwise operand on whole tiles (``fast.quant.nvfp4.gluon``) cannot run here (Gluon
    has no interpreter; the GPU tests check its bytes), but it compiles with this Triton for sm_90 (the shared device
    functions bound for Gluon), and its PTX shows the design: per tile a thread stores its codes as two 16-byte
    vectors and its scales as one 4-byte word, hinted ``evict_first`` when asked; the only other stores are program
    0's amax and tensor scale.  Compiled in a fresh process (see the test above)."""
    pytest.importorskip("fast.quant.nvfp4.gluon", exc_type=ImportError)
    cases = [(False, "evict_first"), (True, "evict_first"), (False, "")]
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    args = [sys.executable, "-c", _GLUON_STORES_PROGRAM, json.dumps(cases)]
    lines = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    hinted = "st.global.L1::evict_first.L2::cache_hint"
    for stores in (json.loads(line) for line in lines[-3:-1]):
        assert sorted(stores) == sorted(["st.global.b32"] * 2 + [f"{hinted}.v4.b32"] * 2 + [f"{hinted}.b32"])
    assert sorted(json.loads(lines[-1])) == sorted(["st.global.b32"] * 3 + ["st.global.v4.b32"] * 2)
