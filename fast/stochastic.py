"""Fast ``stochastic.fp8``: stochastic rounding to FP8 with torch's own random numbers.

Contract (specs/stochastic/fp8.yaml): ``draws`` independent stochastic roundings of each
element; each must be one of the two neighbouring codes, upward with probability equal to the
fraction of the way to the next code.  The random bits come from ``torch.randint`` on the
input's device (Philox on CUDA), 32 per element per draw, and go through ``fast.cast.fp8``'s
explicit-bits path, so this checks the kernel's rounding with a real generator, not a fixed one.
"""

from __future__ import annotations

import torch

from fast.cast import fp8 as cast_fp8

__all__ = ["fp8", "nvfp4"]


def fp8(x: torch.Tensor, *, format: str, overflow: str, draws: int) -> dict[str, torch.Tensor]:
    """``draws`` stochastic roundings of ``x``: uint8 codes of shape ``[draws, *x.shape]``."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws <= 0:
        raise ValueError(f"Got draws={draws!r}, but draws must be a positive int")
    wide = x.expand(draws, *x.shape).contiguous()
    bits = torch.randint(-(2**31), 2**31, wide.shape, dtype=torch.int32, device=x.device).view(torch.uint32)
    return cast_fp8(wide, format=format, overflow=overflow, rounding="stochastic", random_bits=bits)


def nvfp4(x: torch.Tensor, *, draws: int) -> dict[str, torch.Tensor]:
    """``draws`` NVFP4 stochastic roundings of ``x``'s rowwise operand: unpacked E2M1 codes ``[draws, M, K]``.

    The draws are stacked along the rows of one ``quant.nvfp4`` call (``[draws * M, K]``: the same amax
    and the same block scales, since every row block is a copy) with ``torch.randint`` 32-bit random
    bits, so this checks ``fast.quant.nvfp4``'s stochastic path (the Triton kernel on CUDA) with a real
    generator.
    """
    # Imported here: stochastic.fp8 must not depend on the quantizer package importing.
    from fast.quant.nvfp4 import nvfp4 as quant_nvfp4

    if isinstance(draws, bool) or not isinstance(draws, int) or draws <= 0:
        raise ValueError(f"Got draws={draws!r}, but draws must be a positive int")
    quant_nvfp4(x, usage="rowwise")  # the argument checks, before a tensor draws times as large is built
    wide = x.repeat(draws, 1)
    bits = torch.randint(-(2**31), 2**31, wide.shape, dtype=torch.int32, device=x.device).view(torch.uint32)
    data = quant_nvfp4(wide, usage="rowwise", rounding="stochastic", random_bits=bits)["data"]
    codes = torch.stack([data & 15, data >> 4], dim=-1).reshape(draws, *x.shape)
    return {"codes": codes}
