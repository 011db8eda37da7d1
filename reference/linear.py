"""A linear layer with quantized GEMM operands (contract ``linear.quantized``): float64 sums, compared within a bound.

A linear layer ``y = x w^T + b`` runs three GEMMs, forward (fprop), data gradient (dgrad) and weight
gradient (wgrad), each with both operands quantized by a recipe along that GEMM's reduction axis, as
TransformerEngine's ``Linear`` does:

- fprop ``y = X w^T + b``: ``x`` and ``w`` rowwise (blocks along ``K``);
- dgrad ``dx = dY W``: ``dy`` rowwise (blocks along ``N``), ``w`` columnwise (blocks along ``N``);
- wgrad ``dw = dY^T X``: ``dy`` and ``x`` columnwise (blocks along ``M``);
- ``db = sum_m dy[m]`` from the unquantized ``dy`` (TE fuses it with the quantization of ``dy``).

Capitals are the dequantized operands (float32 values: each quantizer's dequantize contract).  The
reference sums the exact products of the dequantized operands in float64 and rounds once to bfloat16;
kernels multiply the codes in their own order and precision (FP8 tensor cores, or dequantize then a
float32 matmul where the GPU has no GEMM for the format), so each output is compared within a bound
from its ``*_abs`` magnitude (``sum |A| |B|``, plus ``|b|`` for ``y``), as the GEMM contracts are
(:mod:`reference.gemm`).

Recipes (the quantizer contracts, with TransformerEngine's defaults for each recipe):

- ``none``: no quantization; the operands are the bfloat16 inputs;
- ``fp8_tensor`` (``Float8CurrentScaling``, format ``HYBRID``): ``quant.fp8_tensor``, E4M3 for ``x``
  and ``w``, E5M2 for ``dy``; one scale per tensor, so rowwise and columnwise values agree;
- ``fp8_block`` (``Float8BlockScaling``): ``quant.fp8_block`` E4M3 with power-of-two scales,
  1x128 blocks for ``x`` and ``dy`` (128x1 columnwise), 128x128 for ``w``;
- ``mxfp8`` (``MXFP8BlockScaling``): ``quant.mx`` E4M3, RCEIL scales, 1x32 rowwise, 32x1 columnwise;
- ``nvfp4`` (``NVFP4BlockScaling``): ``quant.nvfp4`` with one tensor amax per operand, 1x16 blocks for
  ``x`` and ``dy``, 16x16 for ``w``, round to nearest even and no Hadamard transform (TE's random
  Hadamard transform of wgrad operands and stochastic rounding of gradients are their own contracts).

Source: NVIDIA/TransformerEngine@d0067d0:transformer_engine/pytorch/module/linear.py (``_Linear.forward`` /
``backward``: which usage of which quantized tensor each GEMM takes),
NVIDIA/TransformerEngine@d0067d0:transformer_engine/common/recipe/__init__.py (recipe defaults).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reference import dequant, quant
from reference._checks import check_array, check_choice
from reference._opmath import bfloat16_from_float64, is_dtype_value

__all__ = ["RECIPES", "quantized"]

RECIPES: tuple[str, ...] = ("none", "fp8_tensor", "fp8_block", "mxfp8", "nvfp4")
"""The recipes of the module docstring."""

_Dequantized = tuple[np.ndarray, np.ndarray]
"""An operand's rowwise and columnwise dequantized values, both float32 of the operand's own shape."""


def quantized(x: np.ndarray, w: np.ndarray, b: np.ndarray, dy: np.ndarray, *, recipe: str) -> dict[str, np.ndarray]:
    """Forward and backward of ``y = x w^T + b`` with GEMM operands quantized by ``recipe``.

    Contract
    --------
    ``linear.quantized``: with the dequantized operands of the module docstring,
    ``y = round(X_row W_row^T + b)``, ``dx = round(dY_row W_col)``, ``dw = round(dY_col^T X_col)`` and
    ``db = round(sum_m dy[m])``, each sum exact in float64 and rounded once to bfloat16 (nearest even;
    returned as float32 carriers).  ``y_abs``, ``dx_abs``, ``dw_abs``, ``db_abs`` (float64) are the same
    sums of magnitudes, ``|X_row| |W_row|^T + |b|`` and so on: the scale of any summation's error.
    With ``recipe="none"`` the operands are the inputs themselves.

    Source
    ------
    The module docstring: TE ``Linear`` forward and backward, and the quantizer and dequantizer
    contracts ``quant.*`` / ``dequant.*`` for the operands.

    Encoding
    --------
    ``x`` ``[M, K]``, ``w`` ``[N, K]``, ``b`` ``[N]`` and ``dy`` ``[M, N]`` hold bfloat16 values (float32
    carriers); ``y`` ``[M, N]``, ``dx`` ``[M, K]``, ``dw`` ``[N, K]``, ``db`` ``[N]``.

    Edge cases
    ----------
    The recipes' own (zero tensors and blocks give zero scales or scale 1 and zero codes); a sum
    beyond bfloat16's range rounds to +-Inf.  ``mxfp8`` needs ``M``, ``N``, ``K`` multiples of 32 and
    ``nvfp4`` multiples of 16 (their columnwise blocks); the quantizers raise otherwise.

    Raises ``ValueError`` for an unknown ``recipe`` or shapes that disagree (naming the axes);
    ``TypeError`` for inputs that are not bfloat16 values.
    """
    check_choice("recipe", recipe, RECIPES)
    for name, value in (("x", x), ("w", w), ("b", b), ("dy", dy)):
        check_array(name, value, (np.float32,))
        if not is_dtype_value(value, "bfloat16").all():
            raise TypeError(f"Got {name} with values that are not bfloat16, but {name} must be bfloat16")
    _check_shapes(x.shape, w.shape, b.shape, dy.shape)
    x_row, x_col = _dequantize(x, recipe, "x")
    w_row, w_col = _dequantize(w, recipe, "w")
    dy_row, dy_col = _dequantize(dy, recipe, "dy")
    b64 = b.astype(np.float64)
    products = {
        "y": (x_row, w_row.T, b64),
        "dx": (dy_row, w_col, None),
        "dw": (dy_col.T, x_col, None),
        "db": (np.ones((1, dy.shape[0])), dy, None),
    }
    out: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", over="ignore"):
        for name, (left, right, bias) in products.items():
            left64, right64 = left.astype(np.float64), right.astype(np.float64)
            exact, magnitude = left64 @ right64, np.abs(left64) @ np.abs(right64)
            if bias is not None:
                exact, magnitude = exact + bias, magnitude + np.abs(bias)
            if name == "db":
                exact, magnitude = exact[0], magnitude[0]
            out[name] = bfloat16_from_float64(exact)
            out[f"{name}_abs"] = magnitude
    return out


def _check_shapes(x: tuple[int, ...], w: tuple[int, ...], b: tuple[int, ...], dy: tuple[int, ...]) -> None:
    """``ValueError`` unless ``x [M, K]``, ``w [N, K]``, ``b [N]`` and ``dy [M, N]`` agree."""
    if len(x) != 2 or len(w) != 2 or len(dy) != 2 or len(b) != 1:
        raise ValueError(
            f"Got x.shape={x}, w.shape={w}, b.shape={b} and dy.shape={dy}, but they must be [M, K], [N, K], [N] "
            "and [M, N]"
        )
    checks = (
        ("w.shape[1]", w[1], x[1], "x.shape[1] (K)"),
        ("b.shape[0]", b[0], w[0], "w.shape[0] (N)"),
        ("dy.shape[0]", dy[0], x[0], "x.shape[0] (M)"),
        ("dy.shape[1]", dy[1], w[0], "w.shape[0] (N)"),
    )
    for axis, got, want, meaning in checks:
        if got != want:
            raise ValueError(
                f"Got x.shape={x}, w.shape={w}, b.shape={b} and dy.shape={dy}: {axis}={got}, but it must be "
                f"{meaning} = {want}"
            )


def _fp8_tensor(values: np.ndarray, role: str) -> _Dequantized:
    fmt = "float8_e5m2" if role == "dy" else "float8_e4m3fn"
    q = quant.fp8_tensor(values, format=fmt, x_dtype="bfloat16")
    rowwise = dequant.fp8_tensor(q["data"], q["scale_inv"], format=fmt)["x"]
    return rowwise, rowwise  # one scale: the columnwise copy holds the same codes, transposed


def _fp8_block(values: np.ndarray, role: str) -> _Dequantized:
    block = "128x128" if role == "w" else "1x128"
    q = quant.fp8_block(values, format="float8_e4m3fn", block=block, x_dtype="bfloat16")
    rowwise = dequant.fp8_block(q["data"], q["scale_inv"], format="float8_e4m3fn", block=block)["x"]
    columnwise = dequant.fp8_block(
        q["columnwise_data"], q["columnwise_scale_inv"], format="float8_e4m3fn", block=block, operand="columnwise"
    )["x"]
    return rowwise, columnwise


def _mxfp8(values: np.ndarray, role: str) -> _Dequantized:
    q = quant.mx(values, format="float8_e4m3fn", scale_rule="rceil", usage="both")
    rowwise = dequant.mx(q["data_rowwise"], q["scale_rowwise"], format="float8_e4m3fn")["x"]
    columnwise = dequant.mx(q["data_columnwise"], q["scale_columnwise"], format="float8_e4m3fn", usage="columnwise")[
        "x"
    ]
    return rowwise, columnwise


def _nvfp4(values: np.ndarray, role: str) -> _Dequantized:
    q = quant.nvfp4(values, block="16x16" if role == "w" else "1x16")
    rowwise = dequant.nvfp4(q["data"], q["scales"], q["amax"])["x"]
    columnwise = dequant.nvfp4(q["columnwise_data"], q["columnwise_scales"], q["columnwise_amax"])["x"]
    return rowwise, columnwise.T  # the columnwise operand is x.T, quantized rowwise


_RECIPE_OPERANDS: dict[str, Callable[[np.ndarray, str], _Dequantized]] = {
    "fp8_tensor": _fp8_tensor,
    "fp8_block": _fp8_block,
    "mxfp8": _mxfp8,
    "nvfp4": _nvfp4,
}


def _dequantize(values: np.ndarray, recipe: str, role: str) -> _Dequantized:
    """The rowwise and columnwise dequantized values of operand ``role`` (``x``, ``w`` or ``dy``)."""
    if recipe == "none":
        return values, values
    return _RECIPE_OPERANDS[recipe](values, role)
