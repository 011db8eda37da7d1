"""fast.linear: torch.nn.Linear bit for bit unquantized, repeatable backward, errors, the reference bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import fast.linear
import reference.linear
from conformance.compare import compare_outputs
from conformance.registry import load_spec

SPEC = load_spec(Path(__file__).parents[2] / "specs" / "linear" / "quantized.yaml")
QUANTIZED = [r for r in fast.linear.RECIPES if r != "none"]


def _inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    shapes = ((m, k), (n, k), (n,), (m, n))
    return tuple(torch.randn(shape, generator=generator).to(torch.bfloat16) for shape in shapes)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().view(torch.int16).numpy().view(np.uint16)


def test_without_quantization_it_is_torch_nn_linear_bit_for_bit() -> None:
    x, w, b, dy = _inputs(48, 40, 72)
    layer = torch.nn.Linear(72, 40, dtype=torch.bfloat16)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    x_leaf = x.clone().requires_grad_(True)
    y = layer(x_leaf)
    y.backward(dy)
    assert layer.weight.grad is not None and layer.bias.grad is not None and x_leaf.grad is not None
    got = fast.linear.quantized(x, w, b, dy, recipe="none")
    expected = {"y": y, "dx": x_leaf.grad, "dw": layer.weight.grad, "db": layer.bias.grad}
    for name, value in expected.items():
        np.testing.assert_array_equal(_bits(got[name]), _bits(value), err_msg=name)


@pytest.mark.parametrize("recipe", QUANTIZED)
def test_backward_twice_with_retain_graph_gives_the_same_gradients(recipe: str) -> None:
    x, w, b, dy = _inputs(64, 32, 128, seed=1)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    y = fast.linear.QuantizedLinear.apply(*leaves, recipe)
    y.backward(dy, retain_graph=True)
    first = [t.grad.clone() for t in leaves]  # type: ignore[union-attr]
    for t in leaves:
        t.grad = None
    y.backward(dy)
    for name, before, leaf in zip(("dx", "dw", "db"), first, leaves, strict=True):
        np.testing.assert_array_equal(_bits(leaf.grad), _bits(before), err_msg=name)  # type: ignore[arg-type]


@pytest.mark.parametrize("recipe", fast.linear.RECIPES)
def test_within_the_bound_of_the_reference_and_quantization_is_visible(recipe: str) -> None:
    x, w, b, dy = _inputs(64, 32, 160, seed=2)
    got = fast.linear.quantized(x, w, b, dy, recipe=recipe)
    carriers = [t.float().numpy() for t in (x, w, b, dy)]
    ref = reference.linear.quantized(*carriers, recipe=recipe)
    outputs = dict(SPEC.outputs)
    dtypes = dict.fromkeys(outputs, "bfloat16")
    reference_bits = {
        **{name: (ref[name].view(np.uint32) >> 16).astype(np.uint16) for name in outputs},
        **{f"{name}_abs": ref[f"{name}_abs"] for name in outputs},
    }
    got_bits = {name: _bits(value) for name, value in got.items()}
    assert compare_outputs(outputs, dtypes, {"recipe": recipe}, reference_bits, got_bits) == []
    plain = reference.linear.quantized(*carriers, recipe="none")
    differs = not np.array_equal(plain["y"], ref["y"])
    assert differs == (recipe != "none")


@pytest.mark.parametrize(
    ("shapes", "fragments"),
    [
        (((2, 4), (3, 5), (3,), (2, 3)), ["w.shape[1]=5", "x.shape[1] (K) = 4"]),
        (((2, 4), (3, 4), (2,), (2, 3)), ["b.shape[0]=2", "w.shape[0] (N) = 3"]),
        (((2, 4), (3, 4), (3,), (2, 2)), ["dy.shape[1]=2", "w.shape[0] (N) = 3"]),
        (((2, 4, 1), (3, 4), (3,), (2, 3)), ["x.shape=(2, 4, 1)", "[M, K]"]),
    ],
)
def test_bad_shapes_are_named_as_the_reference_names_them(shapes: tuple, fragments: list[str]) -> None:
    tensors = [torch.ones(shape, dtype=torch.bfloat16) for shape in shapes]
    for implementation, args in (
        (fast.linear.quantized, tensors),
        (reference.linear.quantized, [t.float().numpy() for t in tensors]),
    ):
        with pytest.raises(ValueError) as error:
            implementation(*args, recipe="fp8_tensor")
        for fragment in fragments:
            assert fragment in str(error.value)


def test_bad_recipe_dtype_and_block_sizes() -> None:
    x, w, b, dy = _inputs(8, 8, 8)
    with pytest.raises(ValueError, match="recipe must be one of"):
        fast.linear.quantized(x, w, b, dy, recipe="fp8")
    with pytest.raises(TypeError, match="Got w of float32, but w must be bfloat16"):
        fast.linear.quantized(x, w.float(), b, dy, recipe="none")
    with pytest.raises(ValueError, match="32"):  # MXFP8's columnwise blocks of 32 along M = 8
        fast.linear.quantized(x, w, b, dy, recipe="mxfp8")
