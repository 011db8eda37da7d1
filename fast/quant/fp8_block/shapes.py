"""FP8 blockwise layouts: the block names, the 128-element block edge and the GEMM-ready scale shapes (TE's
``Float8BlockQuantizer::get_scale_shape``), shared with ``fast.dequant.fp8``."""

from __future__ import annotations

BLOCKS: tuple[str, ...] = ("1x128", "128x128")
TILE = 128


def _round4(n: int) -> int:
    return -(-n // 4) * 4


def scale_shapes(block: str, m: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Shapes of ``scale_inv`` and ``columnwise_scale_inv`` for an ``[M, K]`` view (module docstring)."""
    mb, kb = -(-m // TILE), -(-k // TILE)
    if block == "1x128":
        return (kb, _round4(m)), (mb, _round4(k))
    return (mb, _round4(kb)), (kb, _round4(mb))
