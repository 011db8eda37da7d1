"""FP8 blockwise launches: tiles and warps per (block, usage) (:data:`TILES`), the launch cache, and the Triton path
(:func:`quantize_triton`), which takes the Gluon kernel (``fast.quant.fp8_block.gluon``) for 1x128 both on whole
tiles on CUDA."""

from __future__ import annotations

import functools
import types
from typing import Any

import torch

from fast._triton import LaunchCache, jit, triton
from fast.quant.fp8 import FORMAT_META, INPUT_IDS, quiet_interpreter, rounding_core
from fast.quant.fp8_block.kernels import RUNTIME_ARGS, fp8_block_kernel
from fast.quant.fp8_block.shapes import TILE

# %% Launcher

TILES: dict[tuple[str, str], tuple[int, int, int]] = {
    ("1x128", "rowwise"): (32, 128, 4),
    ("1x128", "columnwise"): (128, 64, 4),
    ("1x128", "both"): (128, 128, 4),
    ("128x128", "rowwise"): (128, 128, 8),
    ("128x128", "columnwise"): (128, 128, 8),
    ("128x128", "both"): (128, 128, 8),
}
"""(BLOCK_M, BLOCK_K, num_warps) per (block, usage): programs of BLOCK_M rows by BLOCK_K columns, each reading its
tile once.  A program holds whole blocks: BLOCK_K = 128 where rowwise 1x128 blocks are cast and for 128x128;
BLOCK_M = 128 where column blocks (or 128x128 tiles) are cast.  The fastest of a GPU sweep
(``docs/performance.md``)."""


_LAUNCHES = LaunchCache(fp8_block_kernel, RUNTIME_ARGS)
"""Compiled launches by shape, recipe, dtype, device, input alignment and tile (``fast._triton.LaunchCache``)."""


@functools.cache
def _gluon_kernel() -> types.ModuleType | None:
    """``fast.quant.fp8_block.gluon`` (1x128 both on whole tiles), or None where Triton has no Gluon."""
    try:
        from fast.quant.fp8_block import gluon as fp8_blockwise_gluon
    except ImportError:
        return None
    return fp8_blockwise_gluon


def quantize_triton(
    x2: torch.Tensor, out: dict[str, torch.Tensor], block: str, usage: str, rule: dict[str, Any]
) -> None:
    m, k = x2.shape
    tile = TILES[block, usage]
    block_m, block_k, num_warps = tile
    placeholder = next(iter(out.values()))
    scale_inv = out.get("scale_inv", placeholder)
    columnwise_scale_inv = out.get("columnwise_scale_inv", placeholder)
    args = (
        x2,
        out.get("data", placeholder),
        scale_inv,
        out.get("columnwise_data", placeholder),
        columnwise_scale_inv,
        m,
        k,
        scale_inv.shape[-1] if "scale_inv" in out else 0,
        columnwise_scale_inv.shape[-1] if "columnwise_scale_inv" in out else 0,
        rule["epsilon"],
        rule["value_for_inf"],
    )
    core = rounding_core(x2.device)
    key = (
        m,
        k,
        block,
        usage,
        rule["format"],
        rule["power_2_scale"],
        core,
        x2.dtype,
        x2.device,
        x2.data_ptr() % 16,
        tile,
    )
    if x2.device.type == "cuda" and _LAUNCHES.launch(key, args):
        return
    if block == "1x128" and usage == "both" and core == 2 and m % TILE == 0 and k % TILE == 0:
        gluon_kernel = _gluon_kernel()
        if gluon_kernel is not None:  # on CUDA: core 2 is the hardware conversion
            gluon_kernel.quantize_both(x2, args, key, rule)
            return
    meta = {
        "POW2": rule["power_2_scale"],
        **FORMAT_META[rule["format"]],
        "CORE": core,
        "TWO_D": block == "128x128",
        "ROWWISE": usage != "columnwise",
        "COLWISE": usage != "rowwise",
        "INPUT": INPUT_IDS[x2.dtype],
        "BLOCK_M": block_m,
        "BLOCK_K": block_k,
        "EVEN": m % block_m == 0 and k % block_k == 0,
    }
    grid = triton.cdiv(m, block_m) * triton.cdiv(k, block_k)
    with quiet_interpreter(x2.device):
        compiled = jit(fp8_block_kernel)[(grid,)](*args, **meta, num_warps=num_warps)
    if x2.device.type == "cuda":
        _LAUNCHES.store(key, compiled, grid, meta)
