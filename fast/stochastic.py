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

__all__ = ["fp8"]


def fp8(x: torch.Tensor, *, format: str, overflow: str, draws: int) -> dict[str, torch.Tensor]:
    """``draws`` stochastic roundings of ``x``: uint8 codes of shape ``[draws, *x.shape]``."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws <= 0:
        raise ValueError(f"Got draws={draws!r}, but draws must be a positive int")
    wide = x.expand(draws, *x.shape).contiguous()
    bits = torch.randint(-(2**31), 2**31, wide.shape, dtype=torch.int32, device=x.device).view(torch.uint32)
    return cast_fp8(wide, format=format, overflow=overflow, rounding="stochastic", random_bits=bits)
