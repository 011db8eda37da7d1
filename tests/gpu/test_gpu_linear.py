"""``fast.linear`` on a CUDA device (run by ``nox -s gpu``): every recipe within the bound of the reference.

The fast quantizers run their Triton kernels and the GEMMs ``torch._scaled_mm`` (FP8 recipes, where it has a
kernel) or cuBLAS float32 (dequantized operands); the outputs and all
three gradients must stay within ``specs/linear/quantized.yaml``'s bound of the NumPy reference, a second
backward with ``retain_graph=True`` must repeat the gradients bit for bit, and without quantization the
layer must be ``torch.nn.Linear`` bit for bit on the GPU too.  One command:
``python -m pytest tests/gpu/test_gpu_linear.py -m gpu -q``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import fast.linear
import reference.linear
from conformance.compare import compare_outputs
from conformance.registry import load_spec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    # autograd's device thread runs the first backward matmul before torch has made a CUDA context current there
    pytest.mark.filterwarnings("ignore:Attempting to run cuBLAS, but there was no current CUDA context"),
]

SPEC = load_spec(Path(__file__).parents[2] / "specs" / "linear" / "quantized.yaml")


def _inputs(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    shapes = ((m, k), (n, k), (n,), (m, n))
    return tuple(torch.randn(s, device="cuda", generator=generator).to(torch.bfloat16) for s in shapes)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().cpu().view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("shape", [(128, 96, 160), (128, 128, 256), (128, 512, 512)])
@pytest.mark.parametrize("recipe", fast.linear.RECIPES)
def test_every_recipe_within_the_bound_and_backward_repeats(
    recipe: str, shape: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FP8 GEMMs run ``torch._scaled_mm`` on sm90: tensorwise always, blockwise where ``fast.gemm`` claims it."""
    calls = []
    scaled_mm = torch._scaled_mm
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: calls.append(1) or scaled_mm(*a, **k))
    m, n, k = shape
    if recipe == "none" and max(shape) > 160:
        pytest.skip("the spec's bound without quantization is derived for sums of at most 160 products")
    x, w, b, dy = _inputs(m, n, k, seed=0)
    got = fast.linear.quantized(x, w, b, dy, recipe=recipe)  # the reduction axes of fprop, dgrad and wgrad: K, N, M
    # fp8_block: fprop and dgrad take the 128x128 weight (reduction 512 * j), wgrad two 1x128 operands (128 * j)
    blockwise = (k % 512 == 0) + (n % 512 == 0) + (m % 128 == 0)
    fp8_gemms = {"fp8_tensor": 3, "fp8_block": blockwise}.get(recipe, 0)
    assert len(calls) == (fp8_gemms if torch.cuda.get_device_capability() == (9, 0) else 0)
    ref = reference.linear.quantized(*(t.float().cpu().numpy() for t in (x, w, b, dy)), recipe=recipe)
    outputs = dict(SPEC.outputs)
    reference_bits = {name: (ref[name].view(np.uint32) >> 16).astype(np.uint16) for name in outputs}
    reference_bits.update({f"{name}_abs": ref[f"{name}_abs"] for name in outputs})
    problems = compare_outputs(
        outputs, dict.fromkeys(outputs, "bfloat16"), {"recipe": recipe}, reference_bits,
        {name: _bits(value) for name, value in got.items()},
    )  # fmt: skip
    assert problems == [], [p.message for p in problems]
    if recipe == "none":
        return
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    y = fast.linear.QuantizedLinear.apply(*leaves, recipe)
    first = torch.autograd.grad(y, leaves, dy, retain_graph=True)
    second = torch.autograd.grad(y, leaves, dy)
    for before, after in zip(first, second, strict=True):
        np.testing.assert_array_equal(_bits(after), _bits(before))


def test_without_quantization_it_is_torch_nn_linear_bit_for_bit() -> None:
    x, w, b, dy = _inputs(64, 48, 80, seed=1)
    layer = torch.nn.Linear(80, 48, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    x_leaf = x.clone().requires_grad_(True)
    y = layer(x_leaf)
    y.backward(dy)
    got = fast.linear.quantized(x, w, b, dy, recipe="none")
    expected = {"y": y, "dx": x_leaf.grad, "dw": layer.weight.grad, "db": layer.bias.grad}
    for name, value in expected.items():
        assert value is not None
        np.testing.assert_array_equal(_bits(got[name]), _bits(value), err_msg=name)
