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
from torch.testing._internal.optests.generate_tests import OpCheckError

from fast.buffers import layout
from fast.gemm import FORMS, OUT_DTYPES, SCALED_FORMATS, SCALINGS, empty_grouped_mm
from fast.gemm import _scale_shape as scale_shape
from fast.ops import grouped_mm_op, quantize, quantize_op, scaled_mm_op

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


# %% GEMMs: qconform::grouped_mm and qconform::scaled_mm

FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def grouped_operands(
    form: str, sizes: list[int], m: int = 6, n: int = 10, k: int = 12
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bfloat16 ``a``, ``b`` of the form for groups of ``sizes`` along the split axis, and int32 end offsets."""
    g, s = len(sizes), sum(sizes)
    shapes = {"2d_3d": ((s, k), (g, k, n)), "2d_2d": ((m, s), (s, n)), "3d_2d": ((g, m, k), (k, s))}[form]
    a, b = (torch.randn(shape).to(torch.bfloat16) for shape in shapes)
    return a, b, torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32)


def scaled_operands(
    m: int, n: int, k: int, scalings: tuple[str, ...], formats: tuple[str, ...] = ("float8_e4m3fn",) * 2
) -> tuple[torch.Tensor, ...]:
    """FP8 values in float32 carriers ``a [m, k]``, ``b [n, k]`` and float32 scales of the scalings' shapes."""
    a, b = (torch.randn(rows, k).to(FP8[fmt]).float() for rows, fmt in zip((m, n), formats, strict=True))
    scales = (torch.rand(scale_shape(sc, rows, k)) + 0.5 for sc, rows in zip(scalings, (m, n), strict=True))
    return a, b, *scales


def metadata(tensor: torch.Tensor) -> tuple[object, ...]:
    return tuple(tensor.shape), tensor.dtype, tensor.stride(), tensor.device


@settings(max_examples=9, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_grouped_mm_opcheck_passes_on_fuzzed_forms_and_group_sizes(data: st.DataObject):
    """Ragged and empty groups, with and without the offsets check."""
    form = data.draw(st.sampled_from(FORMS), label="form")
    sizes = data.draw(st.lists(st.integers(0, 12), min_size=1, max_size=4), label="group_sizes")
    m, n, k = (data.draw(st.integers(1, 20), label=d) for d in "MNK")
    check_offsets = data.draw(st.booleans(), label="check_offsets")
    torch.library.opcheck(grouped_mm_op, (*grouped_operands(form, sizes, m, n, k), form, check_offsets))


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_scaled_mm_opcheck_passes_on_fuzzed_scalings_formats_and_shapes(data: st.DataObject):
    """Any scaling pair (the torch path dequantizes every one), partial 128-blocks, both output dtypes."""
    scalings = tuple(data.draw(st.sampled_from(SCALINGS), label=f"scaling_{x}") for x in "ab")
    formats = tuple(data.draw(st.sampled_from(SCALED_FORMATS), label=f"format_{x}") for x in "ab")
    out_dtype = data.draw(st.sampled_from(OUT_DTYPES), label="out_dtype")
    m, n = (data.draw(st.integers(1, 20), label=d) for d in "MN")
    k = data.draw(st.integers(1, 300), label="K")
    operands = scaled_operands(m, n, k, scalings, formats)
    torch.library.opcheck(scaled_mm_op, (*operands, *scalings, *formats, out_dtype))


@pytest.mark.parametrize("form", FORMS)
def test_the_grouped_mm_fake_reads_no_offsets_and_matches_every_split(form: str):
    """Under FakeTensorMode reading ``offs`` raises: the fake answers from shapes alone, as the real op's shape does."""
    for sizes in ([5, 0, 11], [0, 0, 16], [16, 0, 0], [0, 0, 0]):
        a, b, offs = grouped_operands(form, sizes)
        real = grouped_mm_op(a, b, offs, form, True)
        with FakeTensorMode() as mode:
            fake = grouped_mm_op(mode.from_tensor(a), mode.from_tensor(b), mode.from_tensor(offs), form, True)
        assert metadata(fake) == metadata(real), sizes
        s = sum(sizes)
        assert metadata(real)[:2] == ({"2d_3d": (s, 10), "2d_2d": (3, 6, 10), "3d_2d": (6, s)}[form], torch.bfloat16)


@pytest.mark.parametrize("form", FORMS)
def test_grouped_mm_compiles_once_for_every_shape_and_split_and_gives_the_eager_bits(form: str):
    """One dynamic graph (no recompile) serves other sizes and group splits: the fake reads no offsets."""
    torch._dynamo.reset()

    def step(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return grouped_mm_op(a * 2, b, offs, form, True)

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    cases = [([5, 0, 11], 6, 10, 12), ([0, 9, 2, 4], 3, 17, 5), ([7, 7, 7], 9, 4, 20)]
    for i, (sizes, m, n, k) in enumerate(cases):
        a, b, offs = grouped_operands(form, sizes, m, n, k)
        with torch.compiler.set_stance("fail_on_recompile" if i else "default"):
            got = compiled(a, b, offs)
        assert torch.equal(got.view(torch.int16), step(a, b, offs).view(torch.int16)), sizes


@pytest.mark.parametrize("scalings", [("tensorwise", "tensorwise"), ("rowwise", "rowwise"), ("1x128", "128x128")])
def test_scaled_mm_compiles_with_fullgraph_and_dynamic_shapes_and_gives_the_eager_bits(scalings: tuple[str, str]):
    torch._dynamo.reset()

    def step(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
        return scaled_mm_op(a, b, scale_a * 2, scale_b, *scalings, "float8_e4m3fn", "float8_e4m3fn", "bfloat16")

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    for m, n, k in [(5, 16, 130), (17, 32, 300)]:
        operands = scaled_operands(m, n, k, scalings)
        got, want = compiled(*operands), step(*operands)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (m, n, k)


def test_quantize_then_scaled_mm_compile_as_one_graph():
    """An FP8 linear forward (quantize both operands, then the scaled GEMM of their codes) with no graph break."""
    torch._dynamo.reset()

    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        qx = quantize(x, recipe="fp8_tensor", usage="rowwise")
        qw = quantize(w, recipe="fp8_tensor", usage="rowwise")
        codes = [q["data"].view(torch.float8_e4m3fn).float() for q in (qx, qw)]
        scales = [q["scale_inv"].reshape(1, 1) for q in (qx, qw)]
        return scaled_mm_op(*codes, *scales, "tensorwise", "tensorwise", "float8_e4m3fn", "float8_e4m3fn", "bfloat16")

    compiled = torch.compile(forward, fullgraph=True, dynamic=True, backend="aot_eager")
    x, w = torch.randn(24, 64, dtype=torch.bfloat16), torch.randn(16, 64, dtype=torch.bfloat16)
    assert torch.equal(compiled(x, w).view(torch.int32), forward(x, w).view(torch.int32))


@torch.library.custom_op("qconform_test::grouped_mm_with_a_wrong_fake", mutates_args=())
def wrong_fake_op(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, form: str, flaw: str) -> torch.Tensor:
    """``qconform::grouped_mm`` whose fake below is wrong in one way (``flaw``): opcheck must catch it."""
    return grouped_mm_op(a, b, offs, form, True)


@wrong_fake_op.register_fake
def _wrong_fake(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, form: str, flaw: str) -> torch.Tensor:
    out = empty_grouped_mm(a, b, offs, form=form)
    flawed = {
        "dtype": lambda: out.float(),
        "strides": lambda: out.mT.contiguous().mT,
        "shape": lambda: out.new_empty((out.shape[0] + 1, out.shape[1])),
    }
    return flawed[flaw]()


@pytest.mark.parametrize(
    ("flaw", "reason"),
    [("dtype", r"Dtypes torch.bfloat16 and torch.float32"),
     ("strides", r"Stride mismatch! Strides are \(10, 1\) and \(1, 16\)"),
     ("shape", r"Shapes torch.Size\(\[16, 10\]\) and torch.Size\(\[17, 10\]\)")],
)  # fmt: skip
def test_opcheck_catches_a_fake_with_a_wrong_dtype_stride_or_shape(flaw: str, reason: str):
    a, b, offs = grouped_operands("2d_3d", [5, 0, 11])
    with pytest.raises(OpCheckError, match=rf"test_faketensor failed .* mismatched tensor metadata: {reason}"):
        torch.library.opcheck(wrong_fake_op, (a, b, offs, "2d_3d", flaw))


def test_the_gemm_fakes_refuse_what_the_real_ops_refuse():
    """Bad arguments raise ``fast.gemm``'s errors from the fake (tracing) and the real op alike."""
    a, b, offs = grouped_operands("2d_3d", [5, 0, 11])
    sa, sb = torch.ones(16, 1), torch.ones(10, 1)
    cases = [
        (grouped_mm_op, (a, b[:2], offs, "2d_3d", True), ValueError, r"b.shape\[0\]=2, but it must be groups = 3"),
        (grouped_mm_op, (a, b, offs.long(), "2d_3d", True), TypeError, r"offs.dtype=int64, but offs must be int32"),
        (grouped_mm_op, (a, b, offs, "3d_3d", True), ValueError, r"form=.3d_3d., but form must be one of"),
        (scaled_mm_op, (a.float(), b[0].t().float(), sa, sb, "rowwise", "128x128", "float8_e4m3fn", "float8_e4m3fn",
                        "bfloat16"), ValueError, r"scale_b.shape=\(10, 1\), but scaling_b='128x128' needs \[1, 1\]"),
    ]  # fmt: skip
    for op, args, error, message in cases:
        with pytest.raises(error, match=message):
            op(*args)
        with FakeTensorMode() as mode, pytest.raises(error, match=message):
            op(*(mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in args))
