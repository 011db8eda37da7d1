"""NVFP4 dequantization (contract ``dequant.nvfp4``): E2M1 codes times E4M3 block scales times the tensor scale.

Source: NVIDIA/TransformerEngine@d0067d0 ``common/cast/nvfp4/dequantize_nvfp4.cuh``
(``dequantize_fp4_kernel``); pytorch/ao@36027d8 ``torchao/prototype/mx_formats/nvfp4_tensor.py``
(``NVFP4Tensor.dequantize`` / ``get_hp_scales``).
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice
from reference.formats import get_format

__all__ = ["AMAX_SCOPES", "OUT_DTYPES", "SCALE_RULES", "nvfp4"]

SCALE_RULES: tuple[str, ...] = ("te", "torchao")
"""TE scales by the amax (``amax * fl32(1/2688)``), torchao by its stored per-tensor scale."""
AMAX_SCOPES: tuple[str, ...] = ("tensor", "row")
"""One amax for the tensor, or one per row (TE ``row_scaled_nvfp4``)."""
OUT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""The dtype the result is rounded to (TE ``OType``, torchao ``output_dtype``)."""

_INV_2688 = np.float32(1.0 / (6.0 * 448.0))
"""TE's ``factor_inv = 1.0f / (6.0f * 448.0f)``: fl32(1/2688)."""
_E2M1_VALUES = get_format("float4_e2m1fn").decode_table.astype(np.float32)
_E4M3_VALUES = get_format("float8_e4m3fn").decode_table.astype(np.float32)
_F32_INF_BITS = 0x7F80_0000


def nvfp4(
    data: np.ndarray,
    scales: np.ndarray,
    amax: np.ndarray | None = None,
    tensor_scale: np.ndarray | None = None,
    *,
    scale_rule: str = "te",
    amax_scope: str = "tensor",
    out_dtype: str = "float32",
) -> dict[str, np.ndarray]:
    """Dequantize NVFP4 data (one operand, ``[M, K]``) to ``out_dtype`` values.

    Contract
    --------
    ``dequant.nvfp4``: element ``(m, k)`` is the E2M1 code ``q`` in nibble ``k % 2`` of
    ``data[m, k // 2]`` (low nibble first) and ``sf = scales[m, k // 16]`` an E4M3 code; then

    - ``te``: ``x = out(fl32(q * fl32(fl32(sf * amax) * fl32(1/2688))))``, with ``amax[0]`` or,
      for ``amax_scope="row"``, ``amax[m]``;
    - ``torchao``: ``x = out(fl32(q * fl32(tensor_scale * sf)))``, ``tensor_scale[0]`` being
      torchao's ``per_tensor_scale`` (``amax / 2688``);

    where ``fl32`` is one float32 rounding and ``out`` rounds to nearest even in ``out_dtype``
    (float16 overflow gives ±Inf).

    Source
    ------
    TE ``dequantize_fp4_kernel``: ``final_scale = static_cast<float>(scale) * amax * factor_inv``
    (left to right), then ``static_cast<OType>(current.x * final_scale)``; it uses
    ``amax / 2688`` rather than the quantizer's ``S_dec = 1 / fl32(2688 / amax)``, so a round trip
    can differ from the quantizer's own scale by one float32 ulp.  torchao ``get_hp_scales``
    (``per_tensor_scale * scale.to(float)``) and ``dequantize`` (``data_f32 * scale`` then
    ``.to(output_dtype)``).

    Encoding
    --------
    ``data``: uint8 ``[M, K/2]``; ``scales``: uint8 ``[M, K/16]`` (any E4M3 code: the sign and the
    NaN codes 0x7F/0xFF are honoured); ``amax`` (``te``): float32 ``[1]`` or ``[M]``;
    ``tensor_scale`` (``torchao``): float32 ``[1]``.  ``x``: float32 ``[M, K]`` holding values of
    ``out_dtype``.

    Edge cases
    ----------
    A NaN scale code or a NaN amax / tensor scale gives NaN; ``0 * Inf`` gives NaN; code 0x8
    gives -0 times the scale (``-0.0`` for a positive scale).

    Raises ``TypeError`` for arrays of other dtypes; ``ValueError`` for an unknown parameter,
    ``amax_scope="row"`` with ``torchao``, ``amax`` given with ``torchao`` or ``tensor_scale``
    with ``te`` (or the one needed missing), a ``data`` that is not 2-D, empty, or whose byte
    count per row is not a multiple of 8, and ``scales`` / ``amax`` / ``tensor_scale`` of the
    wrong shape.
    """
    check_choice("scale_rule", scale_rule, SCALE_RULES)
    check_choice("amax_scope", amax_scope, AMAX_SCOPES)
    check_choice("out_dtype", out_dtype, OUT_DTYPES)
    if scale_rule == "torchao" and amax_scope != "tensor":
        raise ValueError("Got scale_rule='torchao' and amax_scope='row', but torchao has one per-tensor scale")
    check_array("data", data, (np.uint8,))
    check_array("scales", scales, (np.uint8,))
    if data.ndim != 2 or data.size == 0 or data.shape[1] % 8:
        raise ValueError(
            f"Got data.shape={data.shape}, but data must be a non-empty 2-D [M, K/2] array with K a multiple of 16"
        )
    rows, cols = data.shape[0], 2 * data.shape[1]
    if scales.shape != (rows, cols // 16):
        raise ValueError(f"Got scales.shape={scales.shape}, but data.shape={data.shape} needs ({rows}, {cols // 16})")
    needed, unwanted = ("amax", "tensor_scale") if scale_rule == "te" else ("tensor_scale", "amax")
    scale_input, other = (amax, tensor_scale) if scale_rule == "te" else (tensor_scale, amax)
    if other is not None:
        raise ValueError(f"Got {unwanted} with scale_rule={scale_rule!r}, but that rule takes {needed} only")
    if scale_input is None:
        raise ValueError(f"Got scale_rule={scale_rule!r} and no {needed}, but that rule needs {needed}")
    check_array(needed, scale_input, (np.float32,))
    expected = (rows,) if amax_scope == "row" else (1,)
    if scale_input.shape != expected:
        raise ValueError(f"Got {needed}.shape={scale_input.shape}, but amax_scope={amax_scope!r} needs {expected}")

    codes = np.stack([data & 0xF, data >> 4], axis=-1).reshape(rows, cols)
    values = _E2M1_VALUES[codes]
    block_scale = _E4M3_VALUES[scales]
    with np.errstate(invalid="ignore", over="ignore"):
        if scale_rule == "te":
            scale = (block_scale * scale_input.reshape(-1, 1)) * _INV_2688
        else:
            scale = scale_input.reshape(-1, 1) * block_scale
        product = values.reshape(rows, cols // 16, 16) * scale[:, :, None]
    return {"x": _round_to(product.reshape(rows, cols), out_dtype)}


def _round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to nearest even in ``dtype``, as float32 (NaN stays NaN; overflow -> ±Inf)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "float32":
        return values
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF_0000
    nan = (bits & 0x7FFF_FFFF) > _F32_INF_BITS
    return np.where(nan, (bits | 0x0040_0000) & 0xFFFF_0000, rounded).astype(np.uint32).view(np.float32)
