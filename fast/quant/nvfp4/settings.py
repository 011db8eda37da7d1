"""NVFP4 quantization parameters: the contract's domains, the float32 constants of its scale arithmetic, and the
checked settings record that the kernels, the launch code and ``fast.group`` share."""

from __future__ import annotations

import struct
from typing import NamedTuple

import torch

from fast._triton import tl
from fast.formats import FORMATS

USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
AMAX_SOURCES: tuple[str, ...] = ("computed", "given")
BLOCKS: tuple[str, ...] = ("1x16", "16x16")
AMAX_SCOPES: tuple[str, ...] = ("tensor", "row")
ROUNDINGS: tuple[str, ...] = ("rne", "stochastic")
SCALE_RULES: tuple[str, ...] = ("te", "torchao", "torchao_cuda")
ZERO_SCALES: tuple[str, ...] = ("flt_max", "zero")
RHT_SIGN_MASK = 0xD7E8
"""TE's fixed RHT signs: bit ``i`` set where ``s_i = -1`` (``get_wgrad_sign_vector``)."""


def _f32(value: float) -> float:
    """``value`` rounded to float32 (round to nearest even), as a Python float."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


FLT_MAX = _f32(3.4028234663852886e38)
SIXTH = _f32(1.0 / 6.0)
"""fl32(1/6) = 0x3E2AAAAB (TE's ``fp4_max_inv``)."""
INV_2688 = _f32(1.0 / 2688.0)
"""fl32(1/2688): torch's CUDA ``amax / 2688.0`` multiplies by it; TE's dequantizer's ``factor_inv``."""
TORCHAO_FLOOR = 2.0**-6
E4M3_MAX = FORMATS["float8_e4m3fn"].max_value
"""The E4M3 block scales' largest value (``fast.formats``: 448)."""
E4M3_MAX_CONSTEXPR = tl.constexpr(E4M3_MAX) if tl is not None else E4M3_MAX
"""The same as a Triton constexpr, for device code (Triton reads only constexpr globals)."""
INPUT_DTYPES: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
RANDOM_DTYPES: dict[torch.dtype, int] = {torch.uint8: 8, torch.uint32: 32}
RULE_IDS: dict[str, int] = {"te": 0, "torchao": 1, "torchao_cuda": 2}
F32_INF = 0x7F800000


class Settings(NamedTuple):
    """The contract's parameters, checked."""

    usage: str
    block: str
    amax_scope: str
    rht: bool
    rounding: str
    scale_rule: str
    zero_scale: str
    amax_source: str = "computed"  # fast.group builds settings without it

    @property
    def rowwise(self) -> bool:
        return self.usage != "columnwise"

    @property
    def columnwise(self) -> bool:
        return self.usage != "rowwise"
