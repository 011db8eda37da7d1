"""The FP8 blockwise torch path: block amaxes, scales and codes with torch ops and ``fast.quant.fp8``'s casts."""

from __future__ import annotations

from typing import Any

import torch

from fast.quant.fp8 import torch_abs_no_nan, torch_reciprocal, torch_scale_from_amax
from fast.quant.fp8_block.shapes import TILE


def quantize_torch(
    x2: torch.Tensor, out: dict[str, torch.Tensor], block: str, usage: str, rule: dict[str, Any]
) -> None:
    """The kernel's arithmetic with torch ops: block amaxes over a zero-padded view, then ``fast.cast.fp8``."""
    from fast.cast import fp8 as cast_fp8

    m, k = x2.shape
    mb, kb = -(-m // TILE), -(-k // TILE)
    padded = torch.zeros((mb * TILE, kb * TILE), dtype=torch.float32, device=x2.device)
    padded[:m, :k] = torch_abs_no_nan(x2)
    tiles = padded.reshape(mb, TILE, kb, TILE)

    def cast(scale: torch.Tensor) -> torch.Tensor:
        return cast_fp8(x2.float() * scale, format=rule["format"], overflow="saturate")["codes"]

    def expand(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        return scale.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[:m, :k]

    def scales(amax: torch.Tensor) -> torch.Tensor:
        return torch_scale_from_amax(
            amax,
            rule["fp8_max"],
            power_2_scale=rule["power_2_scale"],
            epsilon=rule["epsilon"],
            value_for_inf=rule["value_for_inf"],
        )

    if block == "128x128":
        tile_scale = scales(tiles.amax(dim=(1, 3)))  # [MB, KB]
        codes = cast(expand(tile_scale, TILE, TILE))
        inverse = torch_reciprocal(tile_scale)
        if "data" in out:
            out["data"].copy_(codes)
            out["scale_inv"][:, :kb] = inverse
        if "columnwise_data" in out:
            out["columnwise_data"].copy_(codes.t())
            out["columnwise_scale_inv"][:, :mb] = inverse.t()
        return
    if "data" in out:
        row_scale = scales(tiles.amax(dim=3).reshape(mb * TILE, kb)[:m])  # [M, KB]
        out["data"].copy_(cast(expand(row_scale, 1, TILE)))
        out["scale_inv"][:, :m] = torch_reciprocal(row_scale).t()
    if "columnwise_data" in out:
        col_scale = scales(tiles.amax(dim=1).reshape(mb, kb * TILE)[:, :k])  # [MB, K]
        out["columnwise_data"].copy_(cast(expand(col_scale, TILE, 1)).t())
        out["columnwise_scale_inv"][:, :k] = torch_reciprocal(col_scale)
