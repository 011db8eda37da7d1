"""``fast.buffers`` (``buffers.describe``): the description is what the fast quantizers produce; flatten and
rebuild round-trip bit for bit.

Second oracles: the buffers ``fast.quant`` actually returns (torch path on fuzzed shapes, Triton kernels in
the interpreter on small ones), and ``reference.buffers.layout``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference.buffers
from fast.buffers import ALIGNMENT, byte_offsets, describe, flatten, layout, quantize, quantizer, rebuild

PATH_ENV = "QCONFORM_FAST_PATH"
RECIPES = [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"), ("fp8_block", "1d"), ("fp8_block", "2d"),
           ("nvfp4", "1d"), ("nvfp4", "2d")]  # fmt: skip
USAGES = ["both", "rowwise", "columnwise"]
FUZZ = settings(
    max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@st.composite
def shapes(draw: st.DrawFn) -> tuple[int, ...]:
    """Any shape of 1 to 3 dims up to 70 (valid or not for a recipe): boundary dims weighted in."""
    dim = st.one_of(st.sampled_from([0, 1, 16, 32, 64, 128]), st.integers(0, 70))
    return tuple(draw(st.lists(dim, min_size=1, max_size=3), label="shape"))


def metadata(buffers: dict[str, torch.Tensor]) -> dict[str, tuple[tuple[int, ...], torch.dtype, bool]]:
    return {name: (tuple(t.shape), t.dtype, t.is_contiguous()) for name, t in buffers.items()}


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
@FUZZ
@given(shape=shapes(), usage=st.sampled_from(USAGES))
def test_description_is_what_the_quantizer_produces_and_it_refuses_what_the_quantizer_refuses(
    monkeypatch: pytest.MonkeyPatch, recipe: str, block: str, shape: tuple[int, ...], usage: str
):
    monkeypatch.setenv(PATH_ENV, "torch")
    x = torch.randn(shape, dtype=torch.bfloat16)
    try:
        real = quantizer(recipe, block, usage, "compact")(x)
    except ValueError:
        with pytest.raises(ValueError, match=r"Got shape="):
            layout(shape, recipe=recipe, block=block, usage=usage)
        return
    described = layout(shape, recipe=recipe, block=block, usage=usage)
    assert list(real) == list(described)  # names and order
    assert metadata(real) == {n: (b.shape, b.dtype, True) for n, b in described.items()}
    expected = reference.buffers.layout(shape, recipe=recipe, block=block, usage=usage)
    assert {n: (b.shape, str(b.dtype).removeprefix("torch.")) for n, b in described.items()} == expected


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
def test_description_matches_the_triton_kernels(monkeypatch: pytest.MonkeyPatch, recipe: str, block: str):
    """The kernels (interpreted) allocate exactly the described buffers, for each usage."""
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    shape = (32, 64) if recipe in ("mxfp8", "nvfp4") else (2, 5, 130)
    x = torch.randn(shape, dtype=torch.bfloat16)
    for usage in USAGES:
        described = layout(shape, recipe=recipe, block=block, usage=usage)
        got = quantize(x, recipe=recipe, block=block, usage=usage)
        assert metadata(got) == {n: (b.shape, b.dtype, True) for n, b in described.items()}, usage


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
@FUZZ
@given(data=st.data())
def test_flatten_and_rebuild_round_trip_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, recipe: str, block: str, data: Any
):
    monkeypatch.setenv(PATH_ENV, "torch")
    step = {"mxfp8": 32, "nvfp4": 16}.get(recipe, 1)
    low = 1 if recipe in ("mxfp8", "nvfp4") else 0
    m, k = (data.draw(st.integers(low, 96 // step), label=d) * step for d in "MK")
    usage = data.draw(st.sampled_from(USAGES), label="usage")
    x = torch.randn(m, k, dtype=torch.bfloat16) * 100
    x.view(-1)[:: max(1, x.numel() // 5)] = float("nan")
    quantized = quantize(x, recipe=recipe, block=block, usage=usage)
    described = layout(x.shape, recipe=recipe, block=block, usage=usage)
    flat = flatten(quantized, described)
    offsets = byte_offsets(described)
    assert flat.dtype == torch.uint8 and flat.numel() == offsets[-1]
    assert all(o % ALIGNMENT == 0 for o in offsets)
    rebuilt = rebuild(flat, described)
    assert list(rebuilt) == list(quantized)
    for name, tensor in quantized.items():
        again = rebuilt[name]
        assert again.shape == tensor.shape and again.dtype == tensor.dtype, name
        assert torch.equal(again.view(torch.uint8), tensor.view(torch.uint8)), name  # bits, NaNs included
        assert again.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()  # views of flat
    assert torch.equal(flatten(rebuilt, described), flat)


def test_quantize_zeroes_the_padding_so_outputs_are_a_function_of_x(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(PATH_ENV, "torch")
    x = torch.randn(5, 130, dtype=torch.bfloat16)
    for _ in range(2):
        torch.full((1 << 16,), 7.0).sum()  # dirty the allocator's blocks
        out = quantize(x, recipe="fp8_block", block="1d")
        assert not out["scale_inv"][:, 5:].any() and not out["columnwise_scale_inv"][:, 130:].any()


def test_describe_allocates_zeros_of_the_description_on_the_device_of_x():
    x = torch.empty(3, 64, 96, dtype=torch.float16)
    got = describe(x, recipe="mxfp8", block="1d", usage="rowwise")
    assert metadata(got) == {
        "data_rowwise": ((3, 64, 96), torch.uint8, True),
        "scale_rowwise": ((256, 4), torch.uint8, True),
    }
    assert not any(t.any() for t in got.values())
    with pytest.raises(TypeError, match="x of type ndarray"):
        describe(np.zeros((2, 2)), recipe="fp8_tensor")


def test_flatten_and_rebuild_reject_what_does_not_fit_the_description():
    described = layout((4, 4), recipe="fp8_tensor", usage="rowwise")
    good = {"amax": torch.zeros(1), "scale": torch.zeros(1), "scale_inv": torch.zeros(1),
            "data": torch.zeros(4, 4, dtype=torch.uint8)}  # fmt: skip
    with pytest.raises(ValueError, match=r"Got data of shape \(4, 3\) and dtype torch.uint8.*\(4, 4\)"):
        flatten({**good, "data": torch.zeros(4, 3, dtype=torch.uint8)}, described)
    with pytest.raises(ValueError, match=r"Got buffers \['amax', 'scale', 'scale_inv'\]"):
        flatten({k: v for k, v in good.items() if k != "data"}, described)
    with pytest.raises(ValueError, match=r"packs into 64"):
        rebuild(torch.zeros(63, dtype=torch.uint8), described)
    with pytest.raises(ValueError, match=r"contiguous 1-D uint8"):
        rebuild(torch.zeros(64), described)
    with pytest.raises(ValueError, match=r"only mxfp8 has swizzled"):
        quantize(torch.zeros(4, 4), recipe="fp8_tensor", scale_layout="swizzled")
