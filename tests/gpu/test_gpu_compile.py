"""``compile.fake_matches_real`` on a CUDA device: the custom ops' fakes against the real CUDA outputs.

On CUDA ``qconform::quantize`` runs the recipes' Triton kernels, ``qconform::grouped_mm`` the Triton grouped
GEMM and ``qconform::scaled_mm`` ``torch._scaled_mm`` (or its dequantize fallback); ``torch.library.opcheck``
compares each with its fake (number, shapes, dtypes, strides, device), and ``torch.compile(fullgraph=True)``
with inductor, the default backend, gives the eager bits.  The CPU twin is ``tests/fast/test_fast_compile.py``.

Run with ``pytest tests/gpu/test_gpu_compile.py -m gpu`` (part of ``nox -s gpu``).
"""

from __future__ import annotations

import pytest
import torch

from fast.gemm import FORMS
from fast.ops import grouped_mm_op, quantize, quantize_op, scaled_mm_op

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

RECIPES = [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"), ("fp8_block", "1d"), ("fp8_block", "2d"),
           ("nvfp4", "1d"), ("nvfp4", "2d")]  # fmt: skip
SCALING_PAIRS = [("tensorwise", "tensorwise"), ("rowwise", "rowwise"), ("1x128", "128x128"), ("1x128", "1x128"),
                 ("128x128", "1x128"), ("rowwise", "1x128")]  # fmt: skip
"""The pairs ``torch._scaled_mm`` runs on Hopper, and one it has no kernel for (the dequantize fallback)."""
BLOCK_ROWS = {"tensorwise": None, "rowwise": 1, "1x128": 1, "128x128": 128}


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ops run their CUDA kernels (an error if Triton is missing, never a silent torch fallback)."""
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def grouped_operands(form: str, sizes: list[int], m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    g, s = len(sizes), sum(sizes)
    shapes = {"2d_3d": ((s, k), (g, k, n)), "2d_2d": ((m, s), (s, n)), "3d_2d": ((g, m, k), (k, s))}[form]
    a, b = (torch.randn(shape, device="cuda").to(torch.bfloat16) for shape in shapes)
    return a, b, torch.tensor(sizes, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)


def scaled_operands(m: int, n: int, k: int, scalings: tuple[str, str]) -> tuple[torch.Tensor, ...]:
    """E4M3 values in float32 carriers ``a [m, k]``, ``b [n, k]`` and positive float32 scales of the scalings."""
    a, b = (torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn).float() for rows in (m, n))
    shapes = [
        (1, 1) if sc == "tensorwise" else (-(-rows // BLOCK_ROWS[sc]), 1 if sc == "rowwise" else -(-k // 128))
        for sc, rows in zip(scalings, (m, n), strict=True)
    ]
    return a, b, *(torch.rand(shape, device="cuda") + 0.5 for shape in shapes)


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
@pytest.mark.parametrize("shape", [(256, 512), (96, 160)])
def test_quantize_opcheck_on_cuda(recipe: str, block: str, shape: tuple[int, int]) -> None:
    for usage in ("both", "rowwise", "columnwise"):
        x = torch.randn(shape, device="cuda").to(torch.bfloat16)
        torch.library.opcheck(quantize_op, (x, recipe, block, usage, "compact"))
    if recipe == "mxfp8":
        torch.library.opcheck(quantize_op, (x, recipe, block, "both", "swizzled"))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("sizes", [[40, 0, 88], [0, 0, 64], [0, 0, 0]])
def test_grouped_mm_opcheck_on_cuda(form: str, sizes: list[int]) -> None:
    """The Triton grouped GEMM, ragged and empty groups, with and without the offsets check."""
    for check_offsets in (True, False):
        torch.library.opcheck(grouped_mm_op, (*grouped_operands(form, sizes, 48, 80, 64), form, check_offsets))


@pytest.mark.parametrize("scalings", SCALING_PAIRS)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_scaled_mm_opcheck_on_cuda(scalings: tuple[str, str], out_dtype: str) -> None:
    operands = scaled_operands(256, 128, 384, scalings)
    torch.library.opcheck(scaled_mm_op, (*operands, *scalings, "float8_e4m3fn", "float8_e4m3fn", out_dtype))


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # inductor's import
def test_quantize_grouped_mm_and_scaled_mm_compile_with_inductor_and_give_the_eager_bits() -> None:
    """One inductor graph each (fullgraph: no break), bit-equal to eager; the grouped graph serves other splits."""
    torch._dynamo.reset()

    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        qx = quantize(x * 2, recipe="fp8_tensor", usage="rowwise")
        qw = quantize(w, recipe="fp8_tensor", usage="rowwise")
        codes = [q["data"].view(torch.float8_e4m3fn).float() for q in (qx, qw)]
        scales = [q["scale_inv"].reshape(1, 1) for q in (qx, qw)]
        return scaled_mm_op(*codes, *scales, "tensorwise", "tensorwise", "float8_e4m3fn", "float8_e4m3fn", "bfloat16")

    x, w = (torch.randn(shape, device="cuda").to(torch.bfloat16) for shape in ((256, 512), (128, 512)))
    got = torch.compile(forward, fullgraph=True)(x, w)
    assert torch.equal(got.view(torch.int16), forward(x, w).view(torch.int16))

    def grouped_step(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return grouped_mm_op(a * 2, b, offs, "2d_3d", True)

    compiled = torch.compile(grouped_step, fullgraph=True, dynamic=True)
    for i, sizes in enumerate(([40, 0, 88], [64, 64, 0], [1, 2, 125])):
        a, b, offs = grouped_operands("2d_3d", sizes, 0, 80, 64)
        with torch.compiler.set_stance("fail_on_recompile" if i else "default"):
            got = compiled(a, b, offs)
        assert torch.equal(got.view(torch.int16), grouped_step(a, b, offs).view(torch.int16)), sizes
