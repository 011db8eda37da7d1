"""Block-scale layouts (contracts ``layout.scale_swizzle``, ``layout.scale_unswizzle``): the cuBLAS
128x4 block-scaling-factor layout of MX (E8M0) and NVFP4 (E4M3) scales.

Layout
------
A scale matrix ``S[rows, cols]`` (one row per data row, one column per block along K) is padded with
zeros to ``[128 R, 4 C]`` (``R = ceil(rows / 128)``, ``C = ceil(cols / 4)``).  Tile ``(r, c)`` -- rows
``128 r ..``, columns ``4 c ..`` -- becomes the 512 bytes at ``(r * C + c) * 512``, tiles in row-major
order; inside a tile, row ``i`` and column ``j`` go to byte ``(i % 32) * 16 + (i // 32) * 4 + j``
(rows interleaved by 32).  The swizzled buffer keeps the padded 2-D shape ``[128 R, 4 C]``; only its
byte order matters.  See the cuBLAS documentation ("1D Block Scaling Factors Layout"),
TransformerEngine ``common/cast/mxfp8/swizzle.cuh`` (``gemm_swizzled_scale_idx``) and torchao
``to_blocked``; ``specs/layout/scale_swizzle.yaml``.  Columnwise MX scales ``[M / 32, K]`` are swizzled
transposed (``scale_swizzle(scale.T)``).

Paths
-----
The Triton kernels walk the *output* in chunks of 4096 bytes and gather each byte from the input
(whose strides they take, so a transposed or sliced scale matrix needs no copy); padding bytes are
written as zeros in the same pass.  The torch path pads, then permutes a 5-D view.  The path is
chosen per call by ``QCONFORM_FAST_PATH`` as in ``fast/cast.py`` (``auto``: the kernel for CUDA
tensors when Triton is importable).  :func:`swizzled_offset` is the layout's index map as a Triton
device function, for kernels that write swizzled scales directly (``fast/quant/mx.py``).

This module imports without Triton and queries no device at import time.
"""

from __future__ import annotations

import os

import torch

from fast._triton import device, jit, tl, triton

__all__ = ["TILE_COLS", "TILE_ROWS", "scale_swizzle", "scale_unswizzle", "swizzled_offset", "swizzled_shape"]

TILE_ROWS = 128
TILE_COLS = 4
_PATH_ENV = "QCONFORM_FAST_PATH"
_BLOCK = 4096
"""Output bytes per program of the layout kernels."""


def swizzled_shape(rows: int, cols: int) -> tuple[int, int]:
    """``(round_up(rows, 128), round_up(cols, 4))``: the padded shape of a swizzled ``[rows, cols]`` matrix."""
    return -(-rows // TILE_ROWS) * TILE_ROWS, -(-cols // TILE_COLS) * TILE_COLS


# %% Compute kernels


@device
def swizzled_offset(row, col, TILES_ACROSS):
    """Byte offset of scale ``(row, col)`` in the swizzled layout; ``TILES_ACROSS = ceil(cols / 4)`` tiles per row."""
    tile = (row // 128) * TILES_ACROSS + col // 4
    return tile * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4


def _swizzle_kernel(
    # pointers
    scale_ptr,
    out_ptr,
    # sizes and strides
    rows,
    cols,
    stride_row,
    stride_col,
    n_out,
    tiles_across,
    # tiling
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tile, inner = offsets // 512, offsets % 512
    row = (tile // tiles_across) * 128 + ((inner % 16) // 4) * 32 + inner // 16
    col = (tile % tiles_across) * 4 + inner % 4
    inside = (row < rows) & (col < cols) & (offsets < n_out)
    byte = tl.load(scale_ptr + row * stride_row + col * stride_col, mask=inside, other=0)
    tl.store(out_ptr + offsets, byte, mask=offsets < n_out)


def _unswizzle_kernel(
    # pointers
    swizzled_ptr,
    out_ptr,
    # sizes
    cols,
    n_out,
    tiles_across,
    # tiling
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_out
    source = swizzled_offset(offsets // cols, offsets % cols, tiles_across)
    tl.store(out_ptr + offsets, tl.load(swizzled_ptr + source, mask=mask), mask=mask)


# %% Launchers and torch paths


def _use_triton(device_: torch.device) -> bool:
    choice = os.environ.get(_PATH_ENV, "auto")
    if choice not in ("auto", "triton", "torch"):
        raise ValueError(f"Got {_PATH_ENV}={choice!r}, but {_PATH_ENV} must be one of ['auto', 'triton', 'torch']")
    if choice == "triton" and triton is None:
        raise RuntimeError(f"Got {_PATH_ENV}=triton, but triton is not installed")
    if choice == "triton" and device_.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            f"Got {_PATH_ENV}=triton and a tensor on {device_}, but the Triton kernel runs CPU tensors only in "
            "Triton's interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    return choice == "triton" or (choice == "auto" and device_.type == "cuda" and triton is not None)


def _check_matrix(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor of dtype uint8")
    if value.dtype != torch.uint8:
        raise TypeError(f"Got {name}.dtype={str(value.dtype).removeprefix('torch.')}, but {name} must be uint8")
    if value.dim() != 2:
        raise ValueError(
            f"Got {name}.shape={tuple(value.shape)}, but {name} must be 2-D [rows, cols] (one row per data row, one "
            "column per block along K); flatten leading dimensions first"
        )
    return value


def scale_swizzle(scale: torch.Tensor) -> dict[str, torch.Tensor]:
    """Lay a scale matrix out in the cuBLAS 128x4 block-scaling-factor layout, padding with zeros.

    Contract
    --------
    ``layout.scale_swizzle``: ``swizzled`` is ``uint8 [round_up(rows, 128), round_up(cols, 4)]`` whose
    flat bytes hold ``scale[i, j]`` at ``((i // 128) * C + j // 4) * 512 + (i % 32) * 16 +
    ((i % 128) // 32) * 4 + j % 4`` (``C = ceil(cols / 4)``) and zeros everywhere else (padding).

    Source
    ------
    cuBLAS "1D Block Scaling Factors Layout"; TransformerEngine ``gemm_swizzled_scale_idx`` and
    ``common/swizzle/swizzle.cu`` (zero padding); torchao ``to_blocked``; ``specs/layout/scale_swizzle.yaml``.

    Encoding
    --------
    ``scale``: ``uint8 [rows, cols]`` on any device, any strides (MX E8M0 or NVFP4 E4M3 bytes; pass
    ``scale.T`` for columnwise MX scales).  ``swizzled``: contiguous ``uint8`` on ``scale``'s device.

    Edge cases
    ----------
    Empty matrices give empty results; padding is zero whatever ``scale`` holds around a slice.

    Raises ``TypeError`` unless ``scale`` is a ``uint8`` tensor, ``ValueError`` unless it is 2-D or for an
    unknown ``QCONFORM_FAST_PATH``, ``RuntimeError`` where a forced Triton path cannot run.
    """
    _check_matrix("scale", scale)
    rows, cols = scale.shape
    out = torch.empty(swizzled_shape(rows, cols), dtype=torch.uint8, device=scale.device)
    if out.numel() == 0:
        return {"swizzled": out}
    if _use_triton(scale.device):
        jit(_swizzle_kernel)[(triton.cdiv(out.numel(), _BLOCK),)](
            scale,
            out,
            rows,
            cols,
            scale.stride(0),
            scale.stride(1),
            out.numel(),
            out.shape[1] // TILE_COLS,
            BLOCK=_BLOCK,
            num_warps=4,
        )
        return {"swizzled": out}
    padded = torch.zeros(out.shape, dtype=torch.uint8, device=scale.device)
    padded[:rows, :cols] = scale
    tiles_down, tiles_across = out.shape[0] // TILE_ROWS, out.shape[1] // TILE_COLS
    blocked = padded.view(tiles_down, TILE_ROWS // 32, 32, tiles_across, TILE_COLS).permute(0, 3, 2, 1, 4)
    out.view(tiles_down, tiles_across, 32, TILE_ROWS // 32, TILE_COLS).copy_(blocked)
    return {"swizzled": out}


def scale_unswizzle(swizzled: torch.Tensor) -> dict[str, torch.Tensor]:
    """Undo :func:`scale_swizzle`: the padded compact ``[128 R, 4 C]`` scale matrix from its swizzled bytes.

    Contract
    --------
    ``layout.scale_unswizzle``: ``scale[i, j]`` is the swizzled buffer's byte at ``((i // 128) * C + j // 4)
    * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4``, for every ``i, j`` of the same ``[128 R, 4 C]``
    shape (a permutation of whole tiles; slice ``[:rows, :cols]`` for the logical matrix).

    Source
    ------
    torchao ``from_blocked``; ``specs/layout/scale_unswizzle.yaml``.

    Encoding
    --------
    ``swizzled``: ``uint8 [128 R, 4 C]`` (read as contiguous bytes; a non-contiguous tensor is copied
    first).  ``scale``: contiguous ``uint8`` of the same shape on the same device.

    Raises ``TypeError`` unless ``swizzled`` is a ``uint8`` tensor, ``ValueError`` unless it is 2-D with
    rows a multiple of 128 and columns a multiple of 4.
    """
    _check_matrix("swizzled", swizzled)
    rows, cols = swizzled.shape
    if rows % TILE_ROWS or cols % TILE_COLS:
        raise ValueError(
            f"Got swizzled.shape={tuple(swizzled.shape)}, but a swizzled scale buffer has whole 128x4 tiles: rows a "
            f"multiple of {TILE_ROWS} and columns a multiple of {TILE_COLS}"
        )
    source = swizzled.contiguous()
    out = torch.empty((rows, cols), dtype=torch.uint8, device=swizzled.device)
    if out.numel() == 0:
        return {"scale": out}
    if _use_triton(swizzled.device):
        jit(_unswizzle_kernel)[(triton.cdiv(out.numel(), _BLOCK),)](
            source, out, cols, out.numel(), cols // TILE_COLS, BLOCK=_BLOCK, num_warps=4
        )
        return {"scale": out}
    tiles_down, tiles_across = rows // TILE_ROWS, cols // TILE_COLS
    blocked = source.view(tiles_down, tiles_across, 32, TILE_ROWS // 32, TILE_COLS).permute(0, 3, 2, 1, 4)
    out.view(tiles_down, TILE_ROWS // 32, 32, tiles_across, TILE_COLS).copy_(blocked)
    return {"scale": out}
