"""Dequantization of TransformerEngine's FP8 recipes (contracts ``dequant.fp8_tensor``, ``dequant.fp8_block``).

Every element is ``round_out(fl32(decode(code) * scale_inv))``: the FP8 code decoded exactly, one
float32 multiply by its block's ``scale_inv``, then one rounding to nearest even to ``out_dtype``
(TE's ``static_cast<OType>(float)``, torch's ``.to(dtype)``).  The result travels as float32 holding
exact values of ``out_dtype``.

Source: NVIDIA/TransformerEngine@d0067d0 ``common/cast/fp8/dequantize_fp8.cuh``
(``dequantize_func``: ``value * scale_inv``), ``pytorch/tensor/storage/float8_blockwise_tensor_storage.py``
(``_dequantize_vectorwise``: ``q.float() * scale_inv`` then ``.to(dtype)``; columnwise data
dequantized and transposed back).
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice
from reference._opmath import ARITHMETIC_DTYPES, to_dtype
from reference.decode import fp8 as decode_fp8
from reference.quant.fp8 import FP8_FORMATS
from reference.quant.fp8_blockwise import BLOCKS, TILE, scale_shapes

__all__ = ["OPERANDS", "OUT_DTYPES", "fp8_block", "fp8_tensor"]

OUT_DTYPES: tuple[str, ...] = ARITHMETIC_DTYPES
"""float32, bfloat16, float16."""
OPERANDS: tuple[str, ...] = ("rowwise", "columnwise")
"""Which copy of a blockwise tensor is dequantized: ``data`` ``[*rest, K]`` or ``columnwise_data`` ``[K, *rest]``."""
F32 = np.float32


def fp8_tensor(
    data: np.ndarray, scale_inv: np.ndarray, *, format: str, out_dtype: str = "float32"
) -> dict[str, np.ndarray]:
    """Dequantize per-tensor scaled FP8 codes (TE ``Float8Tensor.dequantize``).

    Contract
    --------
    ``dequant.fp8_tensor``: ``x = round_out(fl32(decode(data) * scale_inv[0]))``, elementwise.

    Source
    ------
    TE ``dequantize_fp8.cuh`` (``VectorizedUnaryKernelLauncher`` with ``value * scale_inv``);
    ``specs/dequant/fp8_tensor.yaml``.

    Encoding
    --------
    ``data``: uint8 FP8 codes of any shape (rowwise data or its transposed copy alike);
    ``scale_inv``: float32 ``[1]``.  ``x``: float32 of ``data``'s shape, holding ``out_dtype`` values.

    Edge cases
    ----------
    NaN codes (E4M3 0x7F/0xFF, E5M2 0x7D-0x7F/0xFD-0xFF), NaN ``scale_inv`` and 0 * Inf give NaN
    (payload unspecified); E5M2 Inf codes give ±Inf (or NaN with a zero ``scale_inv``); products
    beyond ``out_dtype``'s range round to ±Inf; -0 codes keep their sign.

    Raises ``TypeError`` unless ``data`` is a uint8 and ``scale_inv`` a float32 array, ``ValueError``
    for an unknown ``format`` or ``out_dtype`` and a ``scale_inv`` not of shape ``[1]``.
    """
    check_array("data", data, (np.uint8,))
    check_array("scale_inv", scale_inv, (np.float32,))
    check_choice("format", format, FP8_FORMATS)
    check_choice("out_dtype", out_dtype, OUT_DTYPES)
    if scale_inv.shape != (1,):
        raise ValueError(f"Got scale_inv.shape={scale_inv.shape}, but scale_inv must have shape [1]")
    return {"x": _scaled(decode_fp8(data, format=format)["values"], scale_inv[0], out_dtype)}


def fp8_block(
    data: np.ndarray,
    scale_inv: np.ndarray,
    *,
    format: str,
    block: str = "1x128",
    operand: str = "rowwise",
    out_dtype: str = "float32",
) -> dict[str, np.ndarray]:
    """Dequantize blockwise scaled FP8 codes in TE's GEMM-ready layouts (TE ``Float8BlockwiseQTensor``).

    Contract
    --------
    ``dequant.fp8_block``: with ``x`` viewed as ``[M, K]``, ``x[m, k] = round_out(fl32(decode(q) *
    s))`` where, for ``operand="rowwise"``, ``q = data[m, k]`` and ``s`` is ``scale_inv[k // 128, m]``
    (1x128) or ``scale_inv[m // 128, k // 128]`` (128x128); for ``"columnwise"``, ``q =
    data[k, m]`` (data ``[K, *rest]``) and ``s`` is ``scale_inv[m // 128, k]`` (1x128) or
    ``scale_inv[k // 128, m // 128]`` (128x128).  Padding entries of ``scale_inv`` are never read.

    Source
    ------
    TE ``_dequantize_vectorwise`` (float32 product, then ``.to(dtype)``; the columnwise result is
    permuted back to the rowwise shape); the layouts of :mod:`reference.quant.fp8_blockwise`;
    ``specs/dequant/fp8_block.yaml``.

    Encoding
    --------
    ``data``: uint8 codes, ``[*rest, K]`` (rowwise) or ``[K, *rest]`` (columnwise), rank >= 1;
    ``scale_inv``: float32 of the layout's shape.  ``x``: float32 ``[*rest, K]`` holding ``out_dtype`` values.

    Edge cases
    ----------
    As :func:`fp8_tensor`, per block.

    Raises ``TypeError`` unless ``data`` is uint8 and ``scale_inv`` float32; ``ValueError`` for an
    unknown ``format``, ``block``, ``operand`` or ``out_dtype``, a 0-d ``data`` and a ``scale_inv``
    whose shape is not the layout's (the message gives the expected shape).
    """
    check_array("data", data, (np.uint8,))
    check_array("scale_inv", scale_inv, (np.float32,))
    check_choice("format", format, FP8_FORMATS)
    check_choice("block", block, BLOCKS)
    check_choice("operand", operand, OPERANDS)
    check_choice("out_dtype", out_dtype, OUT_DTYPES)
    if data.ndim == 0:
        raise ValueError(f"Got data.shape={data.shape}, but data must have at least one dimension")
    shape = data.shape if operand == "rowwise" else (*data.shape[1:], data.shape[0])
    k = shape[-1]
    m = int(np.prod(shape[:-1]))
    expected = scale_shapes(block, m, k)[0 if operand == "rowwise" else 1]
    if scale_inv.shape != expected:
        raise ValueError(
            f"Got scale_inv.shape={scale_inv.shape}, but {operand} {block} scales of data.shape={data.shape} "
            f"must have shape {list(expected)}"
        )
    codes = data.reshape(m, k) if operand == "rowwise" else data.reshape(k, m).T
    rows, cols = np.arange(m)[:, None] // TILE, np.arange(k)[None, :] // TILE
    if block == "1x128" and operand == "rowwise":
        s = scale_inv[cols, np.arange(m)[:, None]]
    elif block == "1x128":
        s = scale_inv[rows, np.arange(k)[None, :]]
    elif operand == "rowwise":
        s = scale_inv[rows, cols]
    else:
        s = scale_inv[cols, rows]
    values = decode_fp8(np.ascontiguousarray(codes), format=format)["values"]
    return {"x": _scaled(values, s, out_dtype).reshape(shape)}


def _scaled(values: np.ndarray, scale_inv: np.ndarray, out_dtype: str) -> np.ndarray:
    """``round_out(fl32(values * scale_inv))`` as float32."""
    with np.errstate(over="ignore", invalid="ignore"):
        product = (values * np.asarray(scale_inv, dtype=F32)).astype(F32)
    return to_dtype(product, out_dtype)
