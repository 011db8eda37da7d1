"""A linear layer with quantized GEMM operands (contract ``linear.quantized``): an autograd function.

:class:`QuantizedLinear` is ``y = x w^T + b`` whose forward quantizes ``x`` and ``w`` and whose backward
quantizes ``dy``, each by a recipe (``RECIPES``) with the fast quantizers (``fast.quant``), and runs the
three GEMMs on the operands TransformerEngine's ``Linear`` gives them:

- fprop ``y = X_row W_row^T + b``, dgrad ``dx = dY_row W_col``, wgrad ``dw = dY_col^T X_col`` (``_row``:
  blocks along the GEMM's reduction axis of a rowwise operand; ``_col``: of the columnwise operand);
- ``db = sum_m dy[m]`` from the unquantized ``dy``, in float32.

Recipes: ``fp8_tensor`` (E4M3 ``x``, ``w``; E5M2 ``dy``), ``fp8_block`` (E4M3; 1x128 ``x``, ``dy``; 128x128
``w``), ``mxfp8`` (E4M3, RCEIL, 1x32 / 32x1), ``nvfp4`` (tensor amax; 1x16 ``x``, ``dy``; 16x16 ``w``; no
Hadamard transform) and ``none`` (:func:`torch.nn.functional.linear`, nothing quantized: bit for bit
``torch.nn.Linear``).  Each GEMM dequantizes its operands (``fast.dequant``: float32 values) and multiplies
them in float32 (exact products of FP8 and FP4 values and their scales, float32 accumulation), rounding
once to bfloat16: the emulation of a low-precision GEMM where the GPU has none (MXFP8 and NVFP4 before
sm100), run for every recipe so that one path serves CPU and CUDA; ``gemm.scaled`` certifies
``torch._scaled_mm`` itself.  The forward saves the dequantized columnwise ``x`` and ``w`` for the
backward (TE saves the quantized tensors), so a second backward (``retain_graph=True``) gives the same
gradients.

Spec: ``specs/linear/quantized.yaml``; TE ``transformer_engine/pytorch/module/linear.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fast import dequant, quant

__all__ = ["RECIPES", "QuantizedLinear", "quantized"]

RECIPES: tuple[str, ...] = ("none", "fp8_tensor", "fp8_block", "mxfp8", "nvfp4")

_Dequantized = tuple[torch.Tensor, torch.Tensor]
"""An operand's rowwise and columnwise dequantized values, both float32 of the operand's own shape."""


def _fp8_tensor(values: torch.Tensor, role: str) -> _Dequantized:
    fmt = "float8_e5m2" if role == "dy" else "float8_e4m3fn"
    q = quant.fp8_tensor(values, format=fmt, usage="rowwise")
    rowwise = dequant.fp8_tensor(q["data"], q["scale_inv"], format=fmt)["x"]
    return rowwise, rowwise  # one scale: the columnwise copy holds the same codes, transposed


def _fp8_block(values: torch.Tensor, role: str) -> _Dequantized:
    block = "128x128" if role == "w" else "1x128"
    q = quant.fp8_block(values, format="float8_e4m3fn", block=block)
    rowwise = dequant.fp8_block(q["data"], q["scale_inv"], format="float8_e4m3fn", block=block)["x"]
    columnwise = dequant.fp8_block(
        q["columnwise_data"], q["columnwise_scale_inv"], format="float8_e4m3fn", block=block, operand="columnwise"
    )["x"]
    return rowwise, columnwise


def _mxfp8(values: torch.Tensor, role: str) -> _Dequantized:
    q = quant.mx(values, format="float8_e4m3fn", scale_rule="rceil", usage="both")
    rowwise = dequant.mx(q["data_rowwise"], q["scale_rowwise"], format="float8_e4m3fn")["x"]
    columnwise = dequant.mx(q["data_columnwise"], q["scale_columnwise"], format="float8_e4m3fn", usage="columnwise")[
        "x"
    ]
    return rowwise, columnwise


def _nvfp4(values: torch.Tensor, role: str) -> _Dequantized:
    q = quant.nvfp4(values, block="16x16" if role == "w" else "1x16")
    rowwise = dequant.nvfp4(q["data"], q["scales"], q["amax"])["x"]
    columnwise = dequant.nvfp4(q["columnwise_data"], q["columnwise_scales"], q["columnwise_amax"])["x"]
    return rowwise, columnwise.t()  # the columnwise operand is x.T, quantized rowwise


_RECIPE_OPERANDS: dict[str, Callable[[torch.Tensor, str], _Dequantized]] = {
    "fp8_tensor": _fp8_tensor,
    "fp8_block": _fp8_block,
    "mxfp8": _mxfp8,
    "nvfp4": _nvfp4,
}


class _no_tf32:
    """Full float32 matmuls on CUDA for the duration (TF32 would round the operands to 10 bits)."""

    def __enter__(self) -> None:
        self.previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False

    def __exit__(self, *exc: object) -> None:
        torch.backends.cuda.matmul.allow_tf32 = self.previous


class QuantizedLinear(torch.autograd.Function):
    """``y = x w^T + b`` with GEMM operands quantized by a recipe (module docstring); bfloat16 in and out."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, recipe: str) -> torch.Tensor:
        quantize = _RECIPE_OPERANDS[recipe]
        x_row, x_col = quantize(x, "x")
        w_row, w_col = quantize(w, "w")
        ctx.save_for_backward(x_col, w_col)
        ctx.recipe = recipe
        with _no_tf32():
            y = torch.addmm(b.float(), x_row, w_row.t())
        return y.to(torch.bfloat16)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        x_col, w_col = ctx.saved_tensors
        dy_row, dy_col = _RECIPE_OPERANDS[ctx.recipe](dy.contiguous(), "dy")
        with _no_tf32():
            dx = dy_row @ w_col
            dw = dy_col.t() @ x_col
        db = dy.float().sum(0)
        return dx.to(torch.bfloat16), dw.to(torch.bfloat16), db.to(torch.bfloat16), None


def quantized(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor, *, recipe: str
) -> dict[str, torch.Tensor]:
    """``linear.quantized``: ``y`` of :class:`QuantizedLinear` and its gradients for the output gradient ``dy``.

    ``x`` ``[M, K]``, ``w`` ``[N, K]``, ``b`` ``[N]``, ``dy`` ``[M, N]`` bfloat16; returns ``y`` ``[M, N]``, ``dx``,
    ``dw``, ``db`` (bfloat16) from one forward and one backward through autograd.  ``recipe="none"`` runs
    :func:`torch.nn.functional.linear`.

    Raises ``ValueError`` for an unknown ``recipe``, shapes that disagree (naming the axes) or tensors on
    several devices, and the quantizers' errors for shapes their blocks do not divide; ``TypeError``
    unless every input is a bfloat16 tensor.
    """
    if recipe not in RECIPES:
        raise ValueError(f"Got recipe={recipe!r}, but recipe must be one of {list(RECIPES)}")
    for name, value in (("x", x), ("w", w), ("b", b), ("dy", dy)):
        if not isinstance(value, torch.Tensor) or value.dtype != torch.bfloat16:
            got = str(value.dtype).removeprefix("torch.") if isinstance(value, torch.Tensor) else type(value).__name__
            raise TypeError(f"Got {name} of {got}, but {name} must be bfloat16")
    _check_shapes(tuple(x.shape), tuple(w.shape), tuple(b.shape), tuple(dy.shape))
    if len({t.device for t in (x, w, b, dy)}) != 1:
        raise ValueError(f"Got x on {x.device}, w on {w.device}, b on {b.device} and dy on {dy.device}, but they "
                         "must be on one device")  # fmt: skip
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
    x_leaf, w_leaf, b_leaf = leaves
    if recipe == "none":
        y = torch.nn.functional.linear(x_leaf, w_leaf, b_leaf)
    else:
        y = QuantizedLinear.apply(x_leaf, w_leaf, b_leaf, recipe)
    dx, dw, db = torch.autograd.grad(y, leaves, dy)
    return {"y": y.detach(), "dx": dx, "dw": dw, "db": db}


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
