"""Block-scale layouts for block-scaled GEMMs (contract family ``layout``).

The cuBLAS "block scaling factors layout" (used by MXFP8/MXFP6/MXFP4 E8M0 scales and by NVFP4's
E4M3 scales) stores a scale matrix ``S[rows, cols]`` -- one row per row of the data (M or N), one
column per block of 32 (MX) or 16 (NVFP4) along K -- in tiles of 128 rows by 4 columns.  The
matrix is first padded with zeros to ``[round_up(rows, 128), round_up(cols, 4)]``; tile ``(r, c)``
(rows ``128r .. 128r+127``, columns ``4c .. 4c+3``) then occupies the 512 bytes at
``(r * C + c) * 512`` of the output, tiles in row-major order (``C = ceil(cols / 4)`` tiles per
tile row).  Inside a tile the 128 rows are interleaved by 32: row ``i`` and column ``j`` go to
byte ``(i % 32) * 16 + (i // 32) * 4 + j``, so the 16 bytes at ``16 * t`` hold rows
``t, t + 32, t + 64, t + 96`` (four scales each).

That is ``S.reshape(R, 4, 32, C, 4).transpose(0, 3, 2, 1, 4)`` flattened, for the padded
``S``.  The output keeps the padded 2-D shape ``[128 R, 4 C]``; only its row-major byte order
matters (torchao views the same bytes as ``[32 R, 16 C]``).

Sources: cuBLAS documentation, "1D Block Scaling Factors Layout";
NVIDIA/TransformerEngine@d0067d0:transformer_engine/common/cast/mxfp8/swizzle.cuh ``gemm_swizzled_scale_idx`` and
NVIDIA/TransformerEngine@d0067d0:transformer_engine/common/swizzle/swizzle.cu (which writes zeros into the padding);
pytorch/ao@36027d8:torchao/prototype/mx_formats/utils.py ``to_blocked`` / ``from_blocked``.
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array

__all__ = ["TILE_COLS", "TILE_ROWS", "scale_swizzle", "scale_unswizzle"]

TILE_ROWS = 128
"""Rows of one tile of the swizzled layout."""
TILE_COLS = 4
"""Columns (scale blocks along K) of one tile of the swizzled layout."""
_INTERLEAVE = 32
"""Rows are interleaved in groups of 32 inside a tile."""


def swizzled_index(row: np.ndarray, col: np.ndarray, cols: int) -> np.ndarray:
    """Flat byte offset of scale ``(row, col)`` in the swizzled layout of a matrix with ``cols`` columns.

    ``((row // 128) * C + col // 4) * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4`` with
    ``C = ceil(cols / 4)`` (TransformerEngine ``gemm_swizzled_scale_idx``).  Any integer arrays of one
    shape (or broadcastable); the result is int64.
    """
    row, col = np.asarray(row, dtype=np.int64), np.asarray(col, dtype=np.int64)
    tiles_per_row = -(-int(cols) // TILE_COLS)
    tile = (row // TILE_ROWS) * tiles_per_row + col // TILE_COLS
    inner = (row % _INTERLEAVE) * (_INTERLEAVE // 2) + ((row % TILE_ROWS) // _INTERLEAVE) * TILE_COLS + col % TILE_COLS
    return tile * (TILE_ROWS * TILE_COLS) + inner


def scale_swizzle(scale: np.ndarray) -> dict[str, np.ndarray]:
    """Lay a scale matrix out in the cuBLAS 128x4 block-scaling-factor layout, padding with zeros.

    Contract
    --------
    ``layout.scale_swizzle``: for ``scale`` of shape ``[rows, cols]``, ``swizzled`` has shape
    ``[round_up(rows, 128), round_up(cols, 4)]`` and, read as a flat row-major buffer,
    ``swizzled.flat[swizzled_index(i, j, cols)] = scale[i, j]`` for every ``i < rows``,
    ``j < cols``; every other byte (the padding rows and columns) is 0.

    Source
    ------
    cuBLAS "1D Block Scaling Factors Layout"; TransformerEngine ``gemm_swizzled_scale_idx``
    (``common/cast/mxfp8/swizzle.cuh``) and the standalone swizzle ``common/swizzle/swizzle.cu``,
    which zero-fills the padding; torchao ``to_blocked`` (``prototype/mx_formats/utils.py``), which
    pads with zeros and returns the same bytes viewed as ``[32 R, 16 C]``.  Zero padding matters:
    TransformerEngine#3070 (garbage padding in the swizzled buffer gave NaN losses).

    Encoding
    --------
    Bytes are moved, not interpreted: E8M0 scales (MX) and E4M3 scales (NVFP4) alike.  ``scale``
    is ``uint8 [rows, cols]`` (the unpadded, compact scale matrix: one row per data row, one
    column per block along K); ``swizzled`` is ``uint8 [128 R, 4 C]``, ``R = ceil(rows / 128)``,
    ``C = ceil(cols / 4)``.  Columnwise MX scales ``[M / 32, K]`` are swizzled transposed:
    ``scale_swizzle(scale.T)`` (TransformerEngine ``tests/pytorch/mxfp8/mxfp8_utils.py``).

    Edge cases
    ----------
    - ``rows`` or ``cols`` zero: an empty ``[0, *]`` / ``[*, 0]`` result (no tiles).
    - A ``[128, 4]`` matrix is one tile: byte ``16 * t + 4 * g + j`` holds ``scale[32 * g + t, j]``.
    - Padding (rows ``>= rows``, columns ``>= cols``) is always 0, never copied from anywhere.

    Raises ``TypeError`` unless ``scale`` is a ``uint8`` ``numpy.ndarray``, and ``ValueError``
    unless it is 2-D.
    """
    _check_matrix("scale", scale)
    rows, cols = scale.shape
    padded = np.zeros((_round_up(rows, TILE_ROWS), _round_up(cols, TILE_COLS)), dtype=np.uint8)
    padded[:rows, :cols] = scale
    tiles_down, tiles_across = padded.shape[0] // TILE_ROWS, padded.shape[1] // TILE_COLS
    blocked = padded.reshape(tiles_down, TILE_ROWS // _INTERLEAVE, _INTERLEAVE, tiles_across, TILE_COLS)
    swizzled = np.ascontiguousarray(blocked.transpose(0, 3, 2, 1, 4)).reshape(padded.shape)
    return {"swizzled": swizzled}


def scale_unswizzle(swizzled: np.ndarray) -> dict[str, np.ndarray]:
    """Undo :func:`scale_swizzle`: the padded compact scale matrix from its swizzled bytes.

    Contract
    --------
    ``layout.scale_unswizzle``: for ``swizzled`` of shape ``[128 R, 4 C]``, ``scale`` has the same
    shape and ``scale[i, j] = swizzled.flat[swizzled_index(i, j, 4 C)]`` for every ``i, j``: the
    inverse permutation over whole tiles.  Padding comes back as it is in ``swizzled`` (zero when
    :func:`scale_swizzle` wrote it); slice ``scale[:rows, :cols]`` for the logical matrix.

    Source
    ------
    torchao ``from_blocked`` (``prototype/mx_formats/utils.py``); the inverse of TransformerEngine's
    ``gemm_swizzled_scale_idx``.

    Encoding
    --------
    ``swizzled`` and ``scale`` are ``uint8 [128 R, 4 C]``; bytes are moved, not interpreted.

    Edge cases
    ----------
    - ``R`` or ``C`` zero: an empty result of the same shape.
    - ``scale_unswizzle(scale_swizzle(s)["swizzled"])["scale"][:rows, :cols]`` is ``s``, and the rest zero.

    Raises ``TypeError`` unless ``swizzled`` is a ``uint8`` ``numpy.ndarray``, and ``ValueError``
    unless it is 2-D with rows a multiple of 128 and columns a multiple of 4.
    """
    _check_matrix("swizzled", swizzled)
    rows, cols = swizzled.shape
    if rows % TILE_ROWS or cols % TILE_COLS:
        raise ValueError(
            f"Got swizzled.shape={swizzled.shape}, but a swizzled scale buffer has whole 128x4 tiles: rows a multiple "
            f"of {TILE_ROWS} and columns a multiple of {TILE_COLS}"
        )
    tiles_down, tiles_across = rows // TILE_ROWS, cols // TILE_COLS
    blocked = swizzled.reshape(tiles_down, tiles_across, _INTERLEAVE, TILE_ROWS // _INTERLEAVE, TILE_COLS)
    scale = np.ascontiguousarray(blocked.transpose(0, 3, 2, 1, 4)).reshape(rows, cols)
    return {"scale": scale}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _check_matrix(name: str, value: object) -> None:
    array = check_array(name, value, (np.uint8,))
    if array.ndim != 2:
        raise ValueError(
            f"Got {name}.shape={array.shape}, but {name} must be 2-D [rows, cols] (one row per data row, one column "
            "per block along K); flatten leading dimensions first"
        )
