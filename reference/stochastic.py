"""Stochastic rounding judged statistically (contract family ``stochastic``).

``cast.fp8`` with ``rounding="stochastic"`` takes its random bits as an input, so every
implementation can be checked bit for bit.  Kernels in the wild draw their own random numbers
(Philox in TransformerEngine, ``torch.rand``), so their stochastic rounding can only be judged
statistically: this contract runs the cast ``draws`` times on each input and checks that every
draw is one of the two neighbouring codes and that the number of upward roundings is consistent
with the exact probability (the comparator's ``stochastic`` kind, a binomial bound).

Source: NVIDIA/TransformerEngine@d0067d0:tests/pytorch/nvfp4/test_nvfp4_sr_quantize.py checks stochastic rounding
the same way (results are adjacent grid values, unbiased).
"""

from __future__ import annotations

import numpy as np

from reference.cast import fp4 as cast_fp4
from reference.cast import fp8 as cast_fp8
from reference.formats import get_format

__all__ = ["fp8", "nvfp4"]

_SEED = 20261122


def fp8(x: np.ndarray, *, format: str, overflow: str, draws: int) -> dict[str, np.ndarray]:
    """Stochastic rounding of ``x`` to ``format``, ``draws`` times, with its own random numbers.

    Contract: ``codes[i]`` is ``cast.fp8(x, format, overflow, rounding="stochastic", random_bits=r_i)``
    for independent uniform 32-bit ``r_i``; so each code is ``lower`` (the magnitude truncated)
    or ``upper`` (rounded up in magnitude), and ``upper`` comes with probability ``p_upper`` =
    ``(|x| - |lower|) / step``, the fraction of the way from one code to the next.

    Outputs: ``codes`` uint8 [draws, *x.shape] (this implementation's draws, from a fixed seed);
    ``lower``, ``upper`` uint8 [*x.shape]; ``p_upper`` float64 [*x.shape] (0 where the two agree:
    exact values, NaN, and overflow that saturates both ways).

    Edge cases: NaN and +-Inf are deterministic (as in ``cast.fp8``); an upward rounding past the
    largest finite code overflows by ``overflow``, so ``upper`` can be the NaN or Inf code.
    """
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws <= 0:
        raise ValueError(f"Got draws={draws!r}, but draws must be a positive int")
    lower = cast_fp8(x, format=format, overflow=overflow, rounding="rtz")["codes"]
    all_ones = np.full(np.shape(x), 0xFFFFFFFF, dtype=np.uint32)
    upper = cast_fp8(x, format=format, overflow=overflow, rounding="stochastic", random_bits=all_ones)["codes"]
    fmt = get_format(format)
    exponent_field = (lower.astype(np.int64) & fmt.magnitude_mask) >> fmt.mantissa_bits
    step = np.ldexp(1.0, np.maximum(exponent_field, 1) - fmt.bias - fmt.mantissa_bits)
    with np.errstate(invalid="ignore"):
        fraction = (np.abs(np.asarray(x, dtype=np.float64)) - np.abs(fmt.decode_table[lower])) / step
    p_upper = np.where(lower == upper, 0.0, fraction)
    rng = np.random.default_rng(_SEED)
    bits = rng.integers(0, 1 << 32, size=(draws, *np.shape(x)), dtype=np.uint64).astype(np.uint32)
    wide = np.broadcast_to(np.asarray(x), bits.shape)
    codes = cast_fp8(
        np.ascontiguousarray(wide), format=format, overflow=overflow, rounding="stochastic", random_bits=bits
    )
    return {"codes": codes["codes"], "lower": lower, "upper": upper, "p_upper": p_upper}


def nvfp4(x: np.ndarray, *, draws: int) -> dict[str, np.ndarray]:
    """NVFP4 stochastic rounding of ``x``'s rowwise operand, ``draws`` times, with its own random numbers.

    Contract: ``codes[i]`` holds the E2M1 codes (one per byte, unpacked) of ``quant.nvfp4(x,
    usage="rowwise", rounding="stochastic", random_bits=r_i)`` for independent uniform 32-bit ``r_i``
    (TE scale rule, 1x16 blocks, per-tensor amax): the block scales do not depend on the random bits,
    so each code is ``lower`` (the scaled value ``fl32(v * enc)`` truncated to E2M1) or ``upper``
    (rounded up in magnitude, saturating at 6), and ``upper`` comes with probability ``p_upper``, the
    fraction of the way from ``|lower|`` to the next E2M1 magnitude (0 where the two agree: exact
    values, NaN, saturation).

    Source: NVIDIA/TransformerEngine@d0067d0:tests/pytorch/nvfp4/test_nvfp4_sr_quantize.py (results adjacent, unbiased);
    ``quant.nvfp4`` ``rounding="stochastic"``
    (NVIDIA/TransformerEngine@d0067d0:transformer_engine/common/util/ptx.cuh ``stochastic_round_fp4_e2m1``).

    Outputs: ``codes`` uint8 ``[draws, M, K]`` (this implementation's draws, from a fixed seed);
    ``lower``, ``upper`` uint8 ``[M, K]``; ``p_upper`` float64 ``[M, K]``.  Raises as ``quant.nvfp4``
    for a bad ``x`` and ``ValueError`` unless ``draws`` is a positive int.
    """
    # Imported here: stochastic.fp8 must not depend on the quantizer package importing.
    from reference.quant.nvfp4 import nvfp4 as quant_nvfp4
    from reference.quant.nvfp4 import scaled_operand

    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws <= 0:
        raise ValueError(f"Got draws={draws!r}, but draws must be a positive int")
    quant_nvfp4(x, usage="rowwise")  # the argument checks
    scaled = scaled_operand(
        np.asarray(x, dtype=np.float32), block="1x16", amax_scope="tensor", scale_rule="te", zero_scale="flt_max"
    )["scaled"]
    lower = cast_fp4(scaled, format="float4_e2m1fn", rounding="rtz")["codes"]
    all_ones = np.full(scaled.shape, 0xFFFFFFFF, dtype=np.uint32)
    upper = cast_fp4(scaled, format="float4_e2m1fn", rounding="stochastic", random_bits=all_ones)["codes"]
    step = np.where((lower & 7) >= 6, 2.0, np.where((lower & 7) >= 4, 1.0, 0.5))
    with np.errstate(invalid="ignore"):
        fraction = (np.abs(scaled.astype(np.float64)) - np.abs(get_format("float4_e2m1fn").decode_table[lower])) / step
    p_upper = np.where(lower == upper, 0.0, fraction)
    rng = np.random.default_rng(_SEED)
    bits = rng.integers(0, 1 << 32, size=(draws, *scaled.shape), dtype=np.uint64).astype(np.uint32)
    wide = np.ascontiguousarray(np.broadcast_to(scaled, bits.shape))
    codes = cast_fp4(wide, format="float4_e2m1fn", rounding="stochastic", random_bits=bits)["codes"]
    return {"codes": codes, "lower": lower, "upper": upper, "p_upper": p_upper}
