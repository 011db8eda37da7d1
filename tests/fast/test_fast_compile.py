"""``fast.ops`` (``compile.fake_matches_real``): the quantizers as torch custom ops whose fake implementations,
built from ``fast.buffers.layout``, match the real outputs, and which trace with no graph break.

``torch.library.opcheck`` runs the real op and its fake on fuzzed shapes and usages and compares the
outputs' number, shapes, dtypes and strides (and checks the schema, autograd registration and the
AOT dispatcher, dynamic shapes included).  ``torch.compile(fullgraph=True)`` fails on any graph break;
the ``aot_eager`` backend traces through the fake implementation without compiling kernels, which keeps
this cheap on CPU.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

from fast.buffers import layout
from fast.ops import quantize, quantize_op

RECIPES = [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"), ("fp8_block", "1d"), ("fp8_block", "2d"),
           ("nvfp4", "1d"), ("nvfp4", "2d")]  # fmt: skip
USAGES = ["both", "rowwise", "columnwise"]


@pytest.fixture(autouse=True)
def torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCONFORM_FAST_PATH", "torch")


@st.composite
def valid_shapes(draw: st.DrawFn, recipe: str) -> tuple[int, ...]:
    """A shape the recipe accepts: 2-D multiples of 32 (mxfp8) or 16 (nvfp4), else 1 to 3 dims from 0."""
    if recipe in ("mxfp8", "nvfp4"):
        step = 32 if recipe == "mxfp8" else 16
        return tuple(draw(st.integers(1, 4), label=d) * step for d in "MK")
    return tuple(draw(st.lists(st.integers(0, 140), min_size=1, max_size=3), label="shape"))


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_opcheck_passes_on_fuzzed_shapes_and_usages(recipe: str, block: str, data: st.DataObject):
    shape = data.draw(valid_shapes(recipe))
    usage = data.draw(st.sampled_from(USAGES), label="usage")
    scale_layout = data.draw(st.sampled_from(["compact", "swizzled"] if recipe == "mxfp8" else ["compact"]))
    dtype = data.draw(st.sampled_from([torch.bfloat16, torch.float32, torch.float16]), label="dtype")
    x = torch.randn(shape).to(dtype)
    torch.library.opcheck(quantize_op, (x, recipe, block, usage, scale_layout))


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
def test_fake_outputs_are_the_description_and_the_real_metadata(recipe: str, block: str):
    shape = (64, 96) if recipe in ("mxfp8", "nvfp4") else (3, 5, 130)
    x = torch.randn(shape, dtype=torch.bfloat16)
    for usage in USAGES:
        real = quantize_op(x, recipe, block, usage, "compact")
        with FakeTensorMode() as mode:
            fake = quantize_op(mode.from_tensor(x), recipe, block, usage, "compact")
        described = layout(shape, recipe=recipe, block=block, usage=usage)
        as_meta = [(tuple(t.shape), t.dtype, t.stride(), t.device) for t in fake]
        assert as_meta == [(tuple(t.shape), t.dtype, t.stride(), t.device) for t in real], usage
        assert [(s, d) for s, d, _, _ in as_meta] == [(b.shape, b.dtype) for b in described.values()], usage


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
def test_compiles_with_fullgraph_and_dynamic_shapes_and_gives_the_eager_bits(recipe: str, block: str):
    torch._dynamo.reset()

    def step(x: torch.Tensor) -> dict[str, torch.Tensor]:
        return quantize(x * 2, recipe=recipe, block=block, usage="both")

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    shapes = [(64, 96), (32, 160)] if recipe in ("mxfp8", "nvfp4") else [(3, 5, 130), (7, 260)]
    for shape in shapes:
        x = torch.randn(shape, dtype=torch.bfloat16)
        got, want = compiled(x), step(x)
        assert list(got) == list(want)
        for name in want:
            assert torch.equal(got[name].view(torch.uint8), want[name].view(torch.uint8)), (shape, name)


def test_the_fake_refuses_what_the_real_op_refuses():
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(16, 32))
        with pytest.raises(ValueError, match=r"flattened rows \(16\) a multiple of 32"):
            quantize_op(x, "mxfp8", "1d", "both", "compact")
        with pytest.raises(ValueError, match=r"only mxfp8 has swizzled"):
            quantize_op(x, "fp8_block", "1d", "both", "swizzled")
    with pytest.raises(ValueError, match=r"flattened rows \(16\) a multiple of 32"):
        quantize_op(torch.zeros(16, 32), "mxfp8", "1d", "both", "compact")
