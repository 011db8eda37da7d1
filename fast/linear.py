"""A linear layer with quantized GEMM operands (contract ``linear.quantized``): an autograd function.

:class:`QuantizedLinear` is ``y = x w^T + b`` whose forward quantizes ``x`` and ``w`` and whose backward
quantizes ``dy``, each by a recipe (``RECIPES``) with the fast quantizers (``fast.quant``), and runs the
three GEMMs on the operands TransformerEngine's ``Linear`` gives them:

- fprop ``y = X_row W_row^T + b``, dgrad ``dx = dY_row W_col``, wgrad ``dw = dY_col^T X_col`` (``_row``:
  blocks along the GEMM's reduction axis of a rowwise operand; ``_col``: of the columnwise operand);
- ``db = sum_m dy[m]`` from the unquantized ``dy``, in float32.

Recipes: ``fp8_tensor`` (E4M3 ``x``, ``w``; E5M2 ``dy``), ``fp8_block`` (E4M3; 1x128 ``x``, ``dy``; 128x128
``w``), ``mxfp8`` (E4M3, RCEIL, 1x32 / 32x1), ``nvfp4`` (tensor amax; 1x16 ``x``, ``dy``; 16x16 ``w``; no
Hadamard transform) and, in :func:`quantized` only, ``none`` (:func:`torch.nn.functional.linear`, nothing
quantized: bit for bit ``torch.nn.Linear``).  The FP8 recipes run ``torch._scaled_mm`` on the codes where it
has a kernel (``fast.gemm.scaled_mm``: CUDA sm89+, tensorwise; blockwise on sm90 with CUDA >= 12.9 and
dims that are multiples of 128), with float32 output.  Elsewhere, and for MXFP8 and NVFP4 (no GEMM before
sm100), a GEMM dequantizes its operands (``fast.dequant``: float32 values) and multiplies them in float32
(dequantize-then-matmul emulation).  Either way the bias is added in float32 and each output rounded
once to bfloat16.  The forward keeps the columnwise copies of ``x`` and ``w`` for the backward (as TE
does), so a second backward (``retain_graph=True``) gives the same gradients.

Spec: ``specs/linear/quantized.yaml``; TE ``transformer_engine/pytorch/module/linear.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch

from fast import dequant, quant
from fast._checks import check_choice
from fast.gemm import scaled_mm

__all__ = ["RECIPES", "QuantizedLinear", "quantized"]

RECIPES: tuple[str, ...] = ("none", "fp8_tensor", "fp8_block", "mxfp8", "nvfp4")


class _Codes(NamedTuple):
    """FP8 codes ``[rows, K]`` with float32 scales in ``fast.gemm.scaled``'s layout, for ``torch._scaled_mm``."""

    codes: torch.Tensor
    scale: torch.Tensor
    scaling: str


class _Operand(NamedTuple):
    """One quantized copy of an operand as a GEMM ``out = A B^T`` takes it: ``[rows, K]``, K the reduction axis.

    ``values``: the dequantized float32 values; ``fp8``: the codes and scales (None where the recipe has no
    ``torch._scaled_mm`` kernel).
    """

    values: torch.Tensor
    fp8: _Codes | None = None


_Copies = tuple[_Operand, _Operand]
"""An operand's rowwise copy (its own orientation) and columnwise copy (transposed), GEMM-ready."""


def _fp8_tensor(values: torch.Tensor, role: str) -> _Copies:
    fmt = "float8_e5m2" if role == "dy" else "float8_e4m3fn"
    q = quant.fp8_tensor(values, format=fmt, usage="both")
    rowwise = dequant.fp8_tensor(q["data"], q["scale_inv"], format=fmt)["x"]
    fp8, scale = _FP8[fmt], q["scale_inv"].reshape(1, 1)
    return (
        _Operand(rowwise, _Codes(q["data"].view(fp8), scale, "tensorwise")),
        _Operand(rowwise.t(), _Codes(q["columnwise_data"].view(fp8), scale, "tensorwise")),  # the codes, transposed
    )


def _fp8_block(values: torch.Tensor, role: str) -> _Copies:
    block = "128x128" if role == "w" else "1x128"
    q = quant.fp8_block(values, format="float8_e4m3fn", block=block)
    rowwise = dequant.fp8_block(q["data"], q["scale_inv"], format="float8_e4m3fn", block=block)["x"]
    columnwise = dequant.fp8_block(
        q["columnwise_data"], q["columnwise_scale_inv"], format="float8_e4m3fn", block=block, operand="columnwise"
    )["x"]
    rows, cols = values.shape
    # TE's GEMM-ready scales (transposed and padded to 4; fast.quant.fp8_block) to one scale per block
    if block == "1x128":
        row_scale, col_scale = q["scale_inv"][:, :rows].t(), q["columnwise_scale_inv"][:, :cols].t()
    else:
        row_scale = q["scale_inv"][:, : -(-cols // 128)]
        col_scale = q["columnwise_scale_inv"][:, : -(-rows // 128)]
    fp8 = torch.float8_e4m3fn
    return (
        _Operand(rowwise, _Codes(q["data"].view(fp8), row_scale, block)),
        _Operand(columnwise.t(), _Codes(q["columnwise_data"].view(fp8), col_scale, block)),
    )


def _mxfp8(values: torch.Tensor, role: str) -> _Copies:
    q = quant.mx(values, format="float8_e4m3fn", scale_rule="rceil", usage="both")
    rowwise = dequant.mx(q["data_rowwise"], q["scale_rowwise"], format="float8_e4m3fn")["x"]
    columnwise = dequant.mx(q["data_columnwise"], q["scale_columnwise"], format="float8_e4m3fn", usage="columnwise")[
        "x"
    ]
    return _Operand(rowwise), _Operand(columnwise.t())


def _nvfp4(values: torch.Tensor, role: str) -> _Copies:
    q = quant.nvfp4(values, block="16x16" if role == "w" else "1x16")
    rowwise = dequant.nvfp4(q["data"], q["scales"], q["amax"])["x"]
    columnwise = dequant.nvfp4(q["columnwise_data"], q["columnwise_scales"], q["columnwise_amax"])["x"]
    return _Operand(rowwise), _Operand(columnwise)  # the columnwise operand is x.T, quantized rowwise


_RECIPE_OPERANDS: dict[str, Callable[[torch.Tensor, str], _Copies]] = {
    "fp8_tensor": _fp8_tensor,
    "fp8_block": _fp8_block,
    "mxfp8": _mxfp8,
    "nvfp4": _nvfp4,
}
_FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def _gemm(a: _Operand, b: _Operand, bias: torch.Tensor | None = None) -> torch.Tensor:
    """bfloat16 ``a b^T (+ bias)``: ``torch._scaled_mm`` of the codes where it runs, else the dequantized values
    multiplied in float32 (torch's default ``highest`` float32 matmul precision: TF32 would break the bound);
    float32 out, the bias added in float32, one rounding."""
    out = None
    if a.fp8 is not None and b.fp8 is not None:
        out = scaled_mm(a.fp8.codes, b.fp8.codes, a.fp8.scale, b.fp8.scale, scaling_a=a.fp8.scaling,
                        scaling_b=b.fp8.scaling, out_dtype=torch.float32)  # fmt: skip
    if out is None:
        out = a.values @ b.values.t()
    return (out if bias is None else out + bias.float()).to(torch.bfloat16)


class QuantizedLinear(torch.autograd.Function):
    """``y = x w^T + b`` with GEMM operands quantized by a recipe (module docstring); bfloat16 in and out."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, recipe: str) -> torch.Tensor:
        copies = _RECIPE_OPERANDS[recipe]
        x_row, ctx.x_col = copies(x, "x")
        w_row, ctx.w_col = copies(w, "w")
        ctx.recipe = recipe
        return _gemm(x_row, w_row, b)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        dy_row, dy_col = _RECIPE_OPERANDS[ctx.recipe](dy.contiguous(), "dy")
        db = dy.float().sum(0).to(torch.bfloat16)
        return _gemm(dy_row, ctx.w_col), _gemm(dy_col, ctx.x_col), db, None


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
    check_choice("recipe", recipe, RECIPES)
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
    with _float32_reductions():
        if recipe == "none":
            y = torch.nn.functional.linear(x_leaf, w_leaf, b_leaf)
        else:
            y = QuantizedLinear.apply(x_leaf, w_leaf, b_leaf, recipe)
        dx, dw, db = torch.autograd.grad(y, leaves, dy)
    return {"y": y.detach(), "dx": dx, "dw": dw, "db": db}


@contextlib.contextmanager
def _float32_reductions() -> Iterator[None]:
    """cuBLAS bfloat16 GEMMs accumulate in float32 inside: torch allows them reduced-precision reductions by
    default (``allow_bf16_reduced_precision_reduction``), which the contract's float32-accumulation bound does not
    (on the H200 a 14-long ``dx`` sum came out 5 bfloat16 ulps off with it allowed)."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_bf16_reduced_precision_reduction
    matmul.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        matmul.allow_bf16_reduced_precision_reduction = saved


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
