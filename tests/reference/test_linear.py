"""reference.linear: the three GEMMs on the right operands of each recipe, against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reference import dequant, quant
from reference._opmath import bfloat16_from_float64
from reference.linear import RECIPES, quantized


def _inputs(m: int, n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [bfloat16_from_float64(rng.standard_normal(shape) * 4) for shape in ((m, k), (n, k), (n,), (m, n))]


def test_unquantized_forward_and_backward_are_torch_autograd_in_float64_rounded_once() -> None:
    x, w, b, dy = _inputs(5, 7, 9)
    leaves = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x, w, b)]
    y = torch.nn.functional.linear(*leaves)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    got = quantized(x, w, b, dy, recipe="none")
    expected = {"y": y, "dx": leaves[0].grad, "dw": leaves[1].grad, "db": leaves[2].grad}
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], bfloat16_from_float64(value.detach().numpy()), err_msg=name)
    x64, w64, b64, dy64 = (np.abs(v.astype(np.float64)) for v in (x, w, b, dy))
    np.testing.assert_allclose(got["y_abs"], x64 @ w64.T + b64, rtol=1e-15)
    np.testing.assert_allclose(got["db_abs"], dy64.sum(0), rtol=1e-15)


def test_fp8_tensor_takes_e4m3_forward_and_e5m2_gradients() -> None:
    x, w, b, dy = _inputs(16, 32, 64, seed=1)
    got = quantized(x, w, b, dy, recipe="fp8_tensor")
    operand = {}
    for name, value, fmt in (("x", x, "float8_e4m3fn"), ("w", w, "float8_e4m3fn"), ("dy", dy, "float8_e5m2")):
        q = quant.fp8_tensor(value, format=fmt, x_dtype="bfloat16")
        operand[name] = dequant.fp8_tensor(q["data"], q["scale_inv"], format=fmt)["x"].astype(np.float64)
    np.testing.assert_array_equal(got["y"], bfloat16_from_float64(operand["x"] @ operand["w"].T + b))
    np.testing.assert_array_equal(got["dx"], bfloat16_from_float64(operand["dy"] @ operand["w"]))
    np.testing.assert_array_equal(got["dw"], bfloat16_from_float64(operand["dy"].T @ operand["x"]))
    np.testing.assert_array_equal(got["db"], bfloat16_from_float64(dy.astype(np.float64).sum(0)))


def test_mxfp8_dgrad_takes_the_columnwise_weight_and_wgrad_the_columnwise_activations() -> None:
    """The rowwise and columnwise MXFP8 copies differ, and each GEMM takes the one blocked along its K."""
    x, w, b, dy = _inputs(64, 32, 96, seed=2)
    for value in (x, w, dy):  # an outlier per row: its rowwise block flushes small values that its columns keep
        value[np.arange(value.shape[0]), np.arange(value.shape[0]) % value.shape[1]] *= 2**14
    got = quantized(x, w, b, dy, recipe="mxfp8")

    def copies(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = quant.mx(value, format="float8_e4m3fn", scale_rule="rceil", usage="both")
        row = dequant.mx(q["data_rowwise"], q["scale_rowwise"], format="float8_e4m3fn")["x"]
        col = dequant.mx(q["data_columnwise"], q["scale_columnwise"], format="float8_e4m3fn", usage="columnwise")
        return row.astype(np.float64), col["x"].astype(np.float64)

    (x_row, x_col), (w_row, w_col), (dy_row, dy_col) = copies(x), copies(w), copies(dy)
    assert not np.array_equal(w_row, w_col) and not np.array_equal(x_row, x_col)
    np.testing.assert_array_equal(got["dx"], bfloat16_from_float64(dy_row @ w_col))
    np.testing.assert_array_equal(got["dw"], bfloat16_from_float64(dy_col.T @ x_col))
    assert not np.array_equal(got["dx"], bfloat16_from_float64(dy_row @ w_row))


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_stays_near_the_unquantized_layer(recipe: str) -> None:
    x, w, b, dy = _inputs(32, 32, 128, seed=3)
    got, plain = quantized(x, w, b, dy, recipe=recipe), quantized(x, w, b, dy, recipe="none")
    relative = {"none": 0.0, "fp8_tensor": 0.15, "fp8_block": 0.1, "mxfp8": 0.1, "nvfp4": 0.5}[recipe]
    for name in ("y", "dx", "dw"):
        error = np.abs(got[name].astype(np.float64) - plain[name]) / plain[f"{name}_abs"]
        assert error.max() <= relative + 2**-7, (name, error.max())
    np.testing.assert_array_equal(got["db"], plain["db"])  # from the unquantized dy


def test_bad_recipe_shapes_and_dtypes_are_named() -> None:
    x, w, b, dy = _inputs(2, 3, 4)
    with pytest.raises(ValueError, match=r"Got recipe='fp8', but recipe must be one of"):
        quantized(x, w, b, dy, recipe="fp8")
    with pytest.raises(ValueError, match=r"dy.shape\[0\]=3, but it must be x.shape\[0\] \(M\) = 2"):
        quantized(x, w, b, np.zeros((3, 3), np.float32), recipe="none")
    with pytest.raises(TypeError, match="Got b with values that are not bfloat16, but b must be bfloat16"):
        quantized(x, w, b + np.float32(2**-12), dy, recipe="none")
    with pytest.raises(TypeError, match=r"w\.dtype=float64"):
        quantized(x, w.astype(np.float64), b, dy, recipe="none")
