"""Decoding of FP8 codes to float32 values (contract ``decode.fp8``): a 256-entry table and a gather.

The table is built from the formats' bit fields with torch integer ops (no torch float8 dtype is
involved), once per format and device, and indexed with the codes; ``table[codes.long()]`` is a
single gather on any device, so there is no separate kernel.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

__all__ = ["FP8_FORMATS", "fp8"]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")

_F32_QUIET_NAN = 0x7FC00000
_F32_INF = 0x7F800000


class _Fp8Format(NamedTuple):
    """Bit fields of an FP8 format."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    has_inf: bool


_FORMATS: dict[str, _Fp8Format] = {
    "float8_e4m3fn": _Fp8Format(exponent_bits=4, mantissa_bits=3, bias=7, has_inf=False),
    "float8_e5m2": _Fp8Format(exponent_bits=5, mantissa_bits=2, bias=15, has_inf=True),
}


def fp8(codes: torch.Tensor, *, format: str) -> dict[str, torch.Tensor]:
    """Exact float32 value of every FP8 code.

    Contract
    --------
    ``decode.fp8``: ``values = table[codes]`` elementwise, where ``table`` holds the value of each
    of the 256 codes of ``format``: ``(-1)**S * 2**(E - bias) * 1.M`` for normal codes and
    ``(-1)**S * 2**(1 - bias) * 0.M`` for subnormal ones.  Every FP8 value is exact in float32.

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (E4M3 and E5M2 encodings);
    ``specs/decode/fp8.yaml``.

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element: ``S.EEEE.MMM`` (E4M3FN, bias 7) or ``S.EEEEE.MM``
    (E5M2, bias 15).  ``values`` is float32 with the shape of ``codes``, on its device.

    Edge cases
    ----------
    - 0x00 -> +0.0 and 0x80 -> -0.0.
    - NaN codes (E4M3FN 0x7F/0xFF; E5M2 0x7D-0x7F/0xFD-0xFF) -> a float32 NaN (here the quiet NaN
      with the code's sign; the contract leaves payload and sign free).
    - E5M2 0x7C/0xFC -> ±Inf; E4M3FN has no infinity (0x78-0x7E are 256..448).

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` tensor, ``ValueError`` for an unknown ``format``.
    """
    if format not in _FORMATS:
        raise ValueError(f"Got format={format!r}, but format must be one of {list(FP8_FORMATS)}")
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"Got codes of type {type(codes).__name__}, but codes must be a torch.Tensor of dtype uint8")
    if codes.dtype != torch.uint8:
        raise TypeError(f"Got codes.dtype={codes.dtype}, but codes must be torch.uint8")
    return {"values": _table(format, codes.device)[codes.long()]}


@functools.cache
def _table(format: str, device: torch.device) -> torch.Tensor:
    """The 256 float32 values of ``format`` on ``device``, built from the bit fields in int32."""
    fmt = _FORMATS[format]
    mantissa_mask = (1 << fmt.mantissa_bits) - 1
    exponent_all_ones = (1 << fmt.exponent_bits) - 1
    code = torch.arange(256, dtype=torch.int32)
    sign = (code & 0x80) << 24
    exponent = (code >> fmt.mantissa_bits) & exponent_all_ones
    mantissa = code & mantissa_mask
    zero = (code & 0x7F) == 0
    special = exponent == exponent_all_ones
    nan = special & (mantissa != 0) if fmt.has_inf else special & (mantissa == mantissa_mask)
    infinity = special & (mantissa == 0) if fmt.has_inf else torch.zeros_like(special)

    # Subnormal codes (E = 0, M != 0) are float32 normals: shift M up to its leading one (at most
    # mantissa_bits steps), lowering the exponent by one per step from the subnormal exponent 1 - bias.
    subnormal = (exponent == 0) & ~zero
    exponent = torch.where(subnormal, 1, exponent)
    for _ in range(fmt.mantissa_bits):
        unnormalized = subnormal & (mantissa <= mantissa_mask)
        mantissa = torch.where(unnormalized, mantissa << 1, mantissa)
        exponent = torch.where(unnormalized, exponent - 1, exponent)

    bits = ((exponent + (127 - fmt.bias)) << 23) | ((mantissa & mantissa_mask) << (23 - fmt.mantissa_bits))
    bits = bits.masked_fill(zero, 0).masked_fill(infinity, _F32_INF).masked_fill(nan, _F32_QUIET_NAN)
    return (bits | sign).view(torch.float32).to(device)
