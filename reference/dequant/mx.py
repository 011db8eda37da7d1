"""MX dequantization: element codes times their block's E8M0 scale (contract ``dequant.mx``).

The inverse direction of ``quant.mx``: each code's exact value (``decode.fp8`` / ``decode.fp6`` /
``decode.fp4``) times ``2**(s - 127)`` for its block's scale byte ``s``, in float32.  Both factors
are exact float32 values and their product has at most 4 significant bits, so the product is exact
wherever it is representable: the only rounding is overflow to ±Inf (E4M3 448 at ``s = 254``).
"""

from __future__ import annotations

import numpy as np

import reference.decode
from reference._checks import check_array, check_choice, check_codes
from reference.formats import get_format
from reference.layout import scale_unswizzle

__all__ = ["DEQUANT_USAGES", "MX_FORMATS", "SCALE_LAYOUTS", "mx"]

MX_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
"""MX element formats (as ``quant.mx``)."""
DEQUANT_USAGES: tuple[str, ...] = ("rowwise", "columnwise")
"""Which blocks the scales belong to: 1x32 along K (rowwise) or 32x1 along M (columnwise)."""
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
"""The layout of ``scale`` (as ``quant.mx``'s ``scale_layout``)."""

_BLOCK = 32


def mx(
    data: np.ndarray, scale: np.ndarray, *, format: str, usage: str = "rowwise", scale_layout: str = "compact"
) -> dict[str, np.ndarray]:
    """Dequantize MX data: ``decode(code) * 2**(s - 127)`` per element, in float32.

    Contract
    --------
    ``dequant.mx``: for data ``[M, K]`` (viewed so: leading dimensions flattened into ``M``) and the
    scale matrix of ``usage``, ``x[r, c] = fl32(value(code[r, c]) * 2**(s - 127))`` with ``s =
    scale[r, c // 32]`` (rowwise) or ``scale[r // 32, c]`` (columnwise); ``s = 255`` gives NaN.  The
    product is exact unless it overflows, which gives ±Inf (round to nearest).

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 (value = ``X * P_i``); TransformerEngine
    ``common/cast/mxfp8/dequantize_mxfp8.cuh`` (``exp2f`` of the scale, times the element); torchao
    ``to_dtype`` (``elem * 2**(s - 127)``, NaN for 255) (pytorch/ao@36027d8:torchao/prototype/mx_formats/mx_tensor.py).

    Encoding
    --------
    ``data``: ``uint8`` codes as ``quant.mx`` writes them, at least 2-D (FP8 one per byte, FP6 one per
    byte in the low 6 bits, FP4 two per byte along the last axis, element ``2i`` in the low nibble,
    so ``K = 2 * data.shape[-1]``).  ``scale``: ``uint8`` E8M0 bytes in ``quant.mx``'s padded shapes,
    ``[round_up(M, 128), round_up(K / 32, 4)]`` (rowwise) or ``[round_up(M / 32, 4), round_up(K,
    128)]`` (columnwise), in the ``compact`` or ``swizzled`` layout; padding is ignored.  ``x``:
    ``float32`` with ``data``'s leading shape and ``K`` columns.

    Edge cases
    ----------
    - Scale 0xFF: NaN for the whole block (payload don't-care); scale 0: ``2**-127``.
    - NaN codes (E4M3 0x7F/0xFF, E5M2 0x7D..0x7F and their negatives) give NaN, E5M2 ±Inf codes ±Inf.
    - ±0 codes keep their sign (unless the scale is NaN).
    - E4M3 448 (0x7E) with scale 254: ``448 * 2**127`` overflows to +Inf.

    Raises ``TypeError`` unless ``data`` and ``scale`` are ``uint8`` ``numpy.ndarray``; ``ValueError``
    for an unknown parameter, ``data`` with fewer than 2 dimensions or no elements, a shape that
    does not make whole blocks (``K % 32`` rowwise, ``M % 32`` columnwise), a ``scale`` of the wrong
    shape, and a code above the format's width (FP6: 63).
    """
    check_choice("format", format, MX_FORMATS)
    check_choice("usage", usage, DEQUANT_USAGES)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    fmt = get_format(format)
    check_array("data", data, (np.uint8,))
    check_array("scale", scale, (np.uint8,))
    if data.ndim < 2 or data.size == 0:
        raise ValueError(
            f"Got data.shape={data.shape}, but data must be non-empty with at least 2 dimensions [..., M, K]"
        )
    if fmt.bits == 6:
        check_codes("data", data, 6)
    rows = int(np.prod(data.shape[:-1]))
    packed = fmt.bits == 4
    cols = data.shape[-1] * (2 if packed else 1)
    if usage == "rowwise" and cols % _BLOCK:
        raise ValueError(f"Got data.shape={data.shape}, but rowwise blocks of 32 need K % 32 == 0 (K = {cols})")
    if usage == "columnwise" and rows % _BLOCK:
        raise ValueError(f"Got data.shape={data.shape}, but columnwise blocks of 32 need M % 32 == 0 (M = {rows})")
    if usage == "rowwise":
        logical = (rows, cols // _BLOCK)
        expected = (_round_up(logical[0], 128), _round_up(logical[1], 4))
    else:
        logical = (rows // _BLOCK, cols)
        expected = (_round_up(logical[0], 4), _round_up(logical[1], 128))
    if scale.shape != expected:
        raise ValueError(
            f"Got scale.shape={scale.shape}, but {usage} scales of data.shape={data.shape} ({format}) must have the "
            f"padded shape {expected}"
        )
    if scale_layout == "swizzled":
        if usage == "rowwise":
            scale = scale_unswizzle(scale)["scale"]
        else:  # swizzled as the transpose [K, M / 32], stored in the [M / 32, K] shape
            transposed = (expected[1], expected[0])
            scale = np.ascontiguousarray(scale_unswizzle(scale.reshape(transposed))["scale"].T)
    logical_scale = scale[: logical[0], : logical[1]]

    codes = data.reshape(rows, data.shape[-1])
    if packed:
        codes = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(rows, cols)
    decoder = {8: reference.decode.fp8, 6: reference.decode.fp6, 4: reference.decode.fp4}[fmt.bits]
    values = decoder(codes, format=format)["values"]
    axis = 1 if usage == "rowwise" else 0
    factor = reference.decode.e8m0(np.repeat(logical_scale, _BLOCK, axis=axis))["values"]
    with np.errstate(over="ignore", invalid="ignore"):
        x = values * factor
    return {"x": x.reshape(*data.shape[:-1], cols)}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
