"""FP8 blockwise scaling, DeepSeek style (contract ``quant.fp8_block``), TransformerEngine's ``Float8BlockScaling``.

Blocks
------
``x`` of shape ``[*rest, K]`` is viewed as ``[M, K]`` (``M = prod(rest)``).

- ``block="1x128"``: rowwise blocks are 128 consecutive elements of a row (one scale per row and
  128 columns); the columnwise copy quantizes 128x1 blocks (128 consecutive rows of a column) and
  is stored transposed, ``[K, *rest]``, so that its blocks are again runs of 128 along its rows.
- ``block="128x128"``: one amax per 128x128 tile gives one scale to the whole tile; the
  columnwise data is the exact transpose of the rowwise data.

Ragged tails are partial blocks: the missing elements count as zeros (they cannot raise an amax).

GEMM-ready scale layouts (``scale_inv``, float32; padding is not written by TE, so it is
don't-care here: the reference writes 0 and names it in the ``*_padding`` masks)
--------------------------------------------------------------------------------------------
=============  =========================================  =====================================
block          rowwise ``scale_inv``                      ``columnwise_scale_inv``
=============  =========================================  =====================================
1x128          ``[ceil(K/128), roundup(M, 4)]``,           ``[ceil(M/128), roundup(K, 4)]``,
               transposed: (row r, block b) at ``[b, r]``   (block b, column k) at ``[b, k]``
128x128        ``[ceil(M/128), roundup(ceil(K/128), 4)]``  ``[ceil(K/128), roundup(ceil(M/128), 4)]``
               tile (i, j) at ``[i, j]``                   tile (i, j) at ``[j, i]``
=============  =========================================  =====================================

Source: NVIDIA/TransformerEngine@d0067d0 ``common/transpose/quantize_transpose_vector_blockwise.cu``
(1x128), ``quantize_transpose_square_blockwise.cu`` (128x128), ``common/recipe/recipe_common.cuh``
``compute_scale_from_types`` (value_for_inf = the input dtype's max), ``pytorch/csrc/quantizer.cpp``
``Float8BlockQuantizer::get_scale_shape`` / ``create_tensor`` (shapes), ``docs/.../fp8_blockwise_scaling.rst``.
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_choice
from reference.cast import fp8 as cast_fp8
from reference.formats import get_format
from reference.quant.fp8 import (
    _DTYPE_MAX,
    FP8_FORMATS,
    USAGES,
    _check_epsilon,
    _check_x,
    _reciprocal,
    _without_nan,
    scale_from_amax,
)

__all__ = ["BLOCKS", "TILE", "fp8_block", "scale_shapes"]

BLOCKS: tuple[str, ...] = ("1x128", "128x128")
"""Block shapes: 1-D (activations and gradients) and 2-D (weights)."""
TILE = 128
F32 = np.float32


def scale_shapes(block: str, m: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Shapes of the rowwise and the columnwise ``scale_inv`` (GEMM-ready) for an ``[M, K]`` view."""
    mb, kb = -(-m // TILE), -(-k // TILE)
    if block == "1x128":
        return (kb, _round4(m)), (mb, _round4(k))
    return (mb, _round4(kb)), (kb, _round4(mb))


def fp8_block(
    x: np.ndarray,
    *,
    format: str,
    block: str = "1x128",
    power_2_scale: bool = True,
    epsilon: float = 0.0,
    usage: str = "both",
    x_dtype: str | None = None,
) -> dict[str, np.ndarray]:
    """Quantize ``x`` to FP8 with one scale per 1x128 or 128x128 block (TE ``Float8BlockScaling``).

    Contract
    --------
    ``quant.fp8_block``: per block, ``amax = max|x|`` over the block (NaN ignored, missing tail
    elements count as 0), ``scale = scale_from_amax(amax, fp8_max, power_2_scale, epsilon,
    value_for_inf = max of x_dtype)`` (:func:`reference.quant.fp8.scale_from_amax`),
    ``scale_inv = fl32(1 / scale)``, and each element ``satfinite_rne(fl32(x * scale))``.

    Source
    ------
    TE blockwise kernels (module docstring); the recipe defaults are E4M3, ``power_2_scale=True``
    (``NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1`` turns it off, Hopper only) and ``epsilon=0``.  TE's
    Python reference (``tests/pytorch/references/blockwise_quantizer_reference.py``,
    ``quantize_scale_calc.py``) agrees except that with pow2 an infinite amax gives scale 0
    there; this contract follows the kernel (scale 1).  ``specs/quant/fp8_block.yaml``.

    Encoding
    --------
    ``x``: float32 or float16 array of rank >= 1 (bfloat16 values as float32 with
    ``x_dtype="bfloat16"``).  Outputs (module docstring for the layouts): ``data`` uint8 ``x.shape``
    and ``scale_inv`` (unless ``usage="columnwise"``); ``columnwise_data`` uint8 ``[K, *rest]`` and
    ``columnwise_scale_inv`` (unless ``usage="rowwise"``); boolean ``scale_inv_padding`` /
    ``columnwise_scale_inv_padding`` masks of the padding (don't-care) entries.

    Edge cases
    ----------
    - A zero block (amax 0), a block holding ±Inf (amax Inf), an all-NaN block -> scale 1.
    - A block whose amax is a float32 subnormal (only float32/bfloat16 inputs) -> ``value_for_inf``
      (bfloat16 ``0x1.FEp127``, float32 FLT_MAX); with pow2 2**127 and ``scale_inv`` 2**-127.
    - One outlier per block: the outlier maps near ``fp8_max``, the rest keeps its relative precision.
    - Empty ``x`` (M or K = 0): empty data and empty scale arrays.
    - Elements: as :func:`reference.quant.fp8.fp8_tensor` (saturation, -0 -> 0x80, NaN -> a NaN code).

    Raises ``TypeError`` unless ``x`` is a float32 or float16 array; ``ValueError`` for an unknown
    ``format``, ``block``, ``usage`` or ``x_dtype``, an ``x_dtype`` that contradicts ``x``, a
    negative or non-finite ``epsilon``, and a 0-d ``x``.
    """
    x32, dtype = _check_x(x, x_dtype)
    check_choice("format", format, FP8_FORMATS)
    check_choice("block", block, BLOCKS)
    check_choice("power_2_scale", power_2_scale, (False, True))
    check_choice("usage", usage, USAGES)
    _check_epsilon(epsilon)
    k = x32.shape[-1]
    m = x32.size // k if k else int(np.prod(x32.shape[:-1]))
    matrix = x32.reshape(m, k)
    fp8_max = get_format(format).max_finite

    def scales(amax: np.ndarray) -> np.ndarray:
        return scale_from_amax(
            amax, fp8_max, power_2_scale=power_2_scale, epsilon=epsilon, value_for_inf=_DTYPE_MAX[dtype]
        )

    row_shape, col_shape = scale_shapes(block, m, k)
    out: dict[str, np.ndarray] = {}
    if block == "1x128":
        row_scale = scales(_block_amax(matrix, 1, TILE))  # [M, KB]
        col_scale = scales(_block_amax(matrix, TILE, 1))  # [MB, K]
        row_codes = _cast(matrix, _expand(row_scale, 1, TILE, m, k), format)
        col_codes = _cast(matrix, _expand(col_scale, TILE, 1, m, k), format)
        row_layout, col_layout = _reciprocal(row_scale).T, _reciprocal(col_scale)
    else:
        tile_scale = scales(_block_amax(matrix, TILE, TILE))  # [MB, KB]
        row_codes = col_codes = _cast(matrix, _expand(tile_scale, TILE, TILE, m, k), format)
        row_layout, col_layout = _reciprocal(tile_scale), _reciprocal(tile_scale).T
    if usage != "columnwise":
        out["data"] = row_codes.reshape(x32.shape)
        out["scale_inv"], out["scale_inv_padding"] = _padded(row_layout, row_shape)
    if usage != "rowwise":
        out["columnwise_data"] = np.ascontiguousarray(col_codes.T).reshape((k, *x32.shape[:-1]))
        out["columnwise_scale_inv"], out["columnwise_scale_inv_padding"] = _padded(col_layout, col_shape)
    return out


def _round4(n: int) -> int:
    return -(-n // 4) * 4


def _block_amax(matrix: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """max|x| of every ``rows x cols`` block, NaN ignored, missing tail elements counted as 0."""
    m, k = matrix.shape
    mb, kb = -(-m // rows), -(-k // cols)
    padded = np.zeros((mb * rows, kb * cols), dtype=F32)
    padded[:m, :k] = _without_nan(np.abs(matrix))
    blocks = padded.reshape(mb, rows, kb, cols)
    return blocks.max(axis=(1, 3), initial=F32(0)).astype(F32)


def _expand(block_scales: np.ndarray, rows: int, cols: int, m: int, k: int) -> np.ndarray:
    """Each block's scale repeated over its ``rows x cols`` elements, cut to ``[M, K]``."""
    return np.repeat(np.repeat(block_scales, rows, axis=0), cols, axis=1)[:m, :k]


def _cast(matrix: np.ndarray, scale: np.ndarray, format: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (matrix * scale).astype(F32)
    return cast_fp8(scaled, format=format, overflow="saturate")["codes"]


def _padded(values: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """``values`` in the top-left corner of a zero ``shape`` array, and the mask of the rest."""
    out = np.zeros(shape, dtype=F32)
    padding = np.ones(shape, dtype=bool)
    rows, cols = values.shape
    out[:rows, :cols] = values
    padding[:rows, :cols] = False
    return out, padding
