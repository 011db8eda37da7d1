"""FP8 blockwise scaling, DeepSeek style (contract ``quant.fp8_block``): one fused Triton kernel for CUDA and a
torch path for the rest.

Contract
--------
``quant.fp8_block`` (:func:`fp8_block`), TransformerEngine's ``Float8BlockScaling``: ``x`` ``[*rest, K]`` viewed
as ``[M, K]``; per 1x128 block of a row (and, for the columnwise copy, per 128x1 block of a column) or per
128x128 tile, ``amax = max|x|`` (NaN ignored, tail elements missing), the scale of
``fast.quant.fp8.scale_from_amax`` with ``value_for_inf`` the input dtype's max, ``scale_inv = 1 / scale``
and ``satfinite_rne(fl32(x * scale))``.  Spec: ``specs/quant/fp8_block.yaml``.

Layouts (GEMM-ready, as TE allocates them; scale padding is left unwritten)
-------------------------------------------------------------------------
- ``data`` ``[*rest, K]`` uint8; ``columnwise_data`` ``[K, *rest]`` uint8 (the columnwise blocks, stored
  transposed so that they run along its rows; for 128x128 it is the transpose of ``data``).
- 1x128: ``scale_inv`` ``[ceil(K/128), roundup(M, 4)]`` float32 with (row r, block b) at ``[b, r]``
  (TE stores the rowwise scales transposed, "GEMM_READY"); ``columnwise_scale_inv``
  ``[ceil(M/128), roundup(K, 4)]`` with (row block b, column k) at ``[b, k]``.
- 128x128: ``scale_inv`` ``[ceil(M/128), roundup(ceil(K/128), 4)]`` with tile (i, j) at ``[i, j]``;
  ``columnwise_scale_inv`` ``[ceil(K/128), roundup(ceil(M/128), 4)]`` with tile (i, j) at ``[j, i]``.

The kernel
----------
One program per tile of ``x`` (a 1-D grid, K-tiles of a row band first); ``TILES`` gives each (block, usage) its
``(BLOCK_M, BLOCK_K, num_warps)``.  A program reads its tile once (widened to float32 with
``fast._triton.float32_bits``) and computes every output from those registers: ``|x|`` with NaN as 0, the
block amaxes (rows of 128 columns, columns of 128 rows, or the whole 128x128 tile), the scales, the codes of
each copy, and the stores -- the columnwise codes through ``tl.trans``, so that each column block is written
as one contiguous 128-byte run of ``columnwise_data``.  Tiles that lie inside ``x`` (``EVEN``) load and store
without masks.  Scales come from ``fast.quant.fp8.scale_from_amax`` (powers of two without a division;
float32 scales by one correctly rounded float32 division) and ``reciprocal``; the codes from
``fast.quant.fp8.fp8_code`` (the hardware ``cvt.rn.satfinite`` on CUDA, integer arithmetic in the interpreter:
``fast/quant/fp8.py``).  Bytes moved from HBM: the input once, each copy's codes once, the scales (1/128 or
1/16384 of the elements).
Tiles and warps come from a GPU sweep (``TILES``), every candidate checked bit for bit against the previous
kernel.  On CUDA, 1x128 both on whole tiles runs instead the Gluon kernel of ``fast.quant.fp8_block.gluon`` (same
device functions, same bytes), whose explicit layout stores the transposed copy straight from registers (faster;
``docs/performance.md``).
After the first call of a shape and recipe, the compiled kernel is launched directly (``_LAUNCHES``), without
the ``JITFunction``'s per-call host work.

Paths are chosen by ``QCONFORM_FAST_PATH`` as in ``fast/cast.py``.  This module imports without Triton
and queries no device at import time.
"""

from __future__ import annotations

import numpy as np
import torch

from fast._checks import check_choice
from fast._triton import selected_path
from fast.formats import FORMATS
from fast.quant.fp8 import DTYPE_MAX, FP8_FORMATS, USAGES, check_epsilon, check_x, dtype_name
from fast.quant.fp8_block.launch import TILES, quantize_triton
from fast.quant.fp8_block.shapes import BLOCKS, scale_shapes
from fast.quant.fp8_block.tiles import quantize_tile
from fast.quant.fp8_block.torch_path import quantize_torch

__all__ = ["BLOCKS", "TILES", "bench", "fp8_block", "quantize_tile"]


# %% Public function


def fp8_block(
    x: torch.Tensor,
    *,
    format: str,
    block: str = "1x128",
    power_2_scale: bool = True,
    epsilon: float = 0.0,
    usage: str = "both",
    x_dtype: str | None = None,
) -> dict[str, torch.Tensor]:
    """Quantize ``x`` to FP8 with one scale per 1x128 or 128x128 block (TE ``Float8BlockScaling``).

    Contract
    --------
    ``quant.fp8_block``: per block, ``amax = max|x|`` (NaN ignored, missing tail elements count as 0),
    ``scale = compute_scale_from_amax(amax, fp8_max, power_2_scale, epsilon, max of x's dtype)``,
    ``scale_inv = fl32(1 / scale)`` and ``satfinite_rne(fl32(x * scale))`` (module docstring).

    Source
    ------
    TE ``quantize_transpose_vector_blockwise.cu`` (1x128) and ``quantize_transpose_square_blockwise.cu``
    (128x128); ``specs/quant/fp8_block.yaml``; the NumPy reference is ``reference.quant.fp8_block``.

    Encoding
    --------
    ``x``: contiguous float32/bfloat16/float16, rank >= 1.  Outputs on x's device (module docstring):
    ``data`` and ``scale_inv`` unless ``usage="columnwise"``; ``columnwise_data`` and
    ``columnwise_scale_inv`` unless ``usage="rowwise"``.  Scale padding is unspecified.

    Edge cases
    ----------
    Zero, infinite and all-NaN blocks get scale 1; a subnormal block amax gives the dtype's max
    (pow2: 2**127, scale_inv 2**-127); empty ``x`` gives empty outputs.

    One read of ``x`` on CUDA.  Raises ``TypeError`` unless ``x`` is a float32/bfloat16/float16 tensor;
    ``ValueError`` for an unknown ``format``, ``block``, ``usage``, ``x_dtype`` or path, an ``x_dtype``
    other than x's dtype, a negative or non-finite ``epsilon``, a 0-d or non-contiguous ``x``;
    ``RuntimeError`` if the Triton path is forced where it cannot run.
    """
    check_choice("format", format, FP8_FORMATS)
    check_choice("block", block, BLOCKS)
    check_choice("power_2_scale", power_2_scale, (False, True))
    check_choice("usage", usage, USAGES)
    check_epsilon(epsilon)
    x2 = check_x(x, x_dtype)
    m, k = x2.shape
    row_shape, col_shape = scale_shapes(block, m, k)
    out: dict[str, torch.Tensor] = {}
    if usage != "columnwise":
        out["data"] = torch.empty((m, k), dtype=torch.uint8, device=x.device)
        out["scale_inv"] = torch.empty(row_shape, dtype=torch.float32, device=x.device)
    if usage != "rowwise":
        out["columnwise_data"] = torch.empty((k, m), dtype=torch.uint8, device=x.device)
        out["columnwise_scale_inv"] = torch.empty(col_shape, dtype=torch.float32, device=x.device)
    rule = {"format": format, "fp8_max": FORMATS[format].max_value, "power_2_scale": power_2_scale}
    rule.update(epsilon=float(np.float32(epsilon)), value_for_inf=DTYPE_MAX[dtype_name(x.dtype)])
    path = selected_path(x.device)  # an unknown QCONFORM_FAST_PATH is refused even for empty x
    if m and k:
        (quantize_triton if path == "triton" else quantize_torch)(x2, out, block, usage, rule)
    shape = tuple(x.shape)
    if "data" in out:
        out["data"] = out["data"].reshape(shape)
    if "columnwise_data" in out:
        out["columnwise_data"] = out["columnwise_data"].reshape((shape[-1], *shape[:-1]))
    return out


# %% Benchmark


def bench(
    shape: tuple[int, int] = (8192, 8192),
    dtype: torch.dtype = torch.bfloat16,
    block: str = "1x128",
    usage: str = "both",
) -> dict[str, float]:
    """Median time of :func:`fp8_block` (E4M3) on a random CUDA tensor and the fraction of copy bandwidth it reaches."""
    from triton.testing import do_bench

    x = (torch.randn(shape, device="cuda") * 64).to(dtype)
    ms = do_bench(lambda: fp8_block(x, format="float8_e4m3fn", block=block, usage=usage), return_mode="median")
    copies = (usage != "columnwise") + (usage != "rowwise")
    moved = x.numel() * (x.element_size() + copies)
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    return {"ms": ms, "fraction_of_copy": (moved / ms) / (2 * x.numel() * x.element_size() / copy_ms)}


if __name__ == "__main__":
    import os

    _device = "cuda" if torch.cuda.is_available() else "cpu"
    _x = (torch.randn(1823, 781, generator=torch.Generator().manual_seed(0)) * 64).to(_device)
    for _block in BLOCKS:
        os.environ["QCONFORM_FAST_PATH"] = "torch"
        _expected = fp8_block(_x, format="float8_e4m3fn", block=_block)
        os.environ["QCONFORM_FAST_PATH"] = "triton"
        _got = fp8_block(_x, format="float8_e4m3fn", block=_block)
        print(_block, {name: bool(torch.equal(_expected[name], _got[name])) for name in ("data", "columnwise_data")})
    if _device == "cuda":
        print(bench())
