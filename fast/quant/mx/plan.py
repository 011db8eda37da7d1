"""MX quantization parameters: the contract's domains, the element formats' traits, and the checked plan of one
call (:func:`make_plan`) that the kernel, the launch code, the torch path and ``fast.group`` share."""

from __future__ import annotations

from typing import NamedTuple

import torch

from fast._checks import check_choice
from fast.formats import FORMATS, FloatFormat

BLOCK_SIZE = 32
MX_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
SCALE_RULES: tuple[str, ...] = ("floor", "rceil", "ceil", "even")
USAGES: tuple[str, ...] = ("rowwise", "columnwise", "both")
BLOCKS: tuple[str, ...] = ("1d", "2d")
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
EDGES: tuple[str, ...] = ("te", "torchao", "torchao_018")

PATH_ENV = "QCONFORM_FAST_PATH"
INPUT_IDS: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
RULE_IDS: dict[str, int] = {"floor": 0, "ceil": 1, "even": 2, "rceil": 3}
EDGE_IDS: dict[str, int] = {"te": 0, "torchao": 1, "torchao_018": 2}
F32_INF = 0x7F800000
E8M0_MAX = 254
E8M0_NAN = 255


def fp8_id(fmt: FloatFormat) -> int:
    """The kernel's ``FP8``: 1 E4M3FN, 2 E5M2 (the hardware conversion), 0 FP6 and FP4 (``mx_code``)."""
    return 0 if fmt.bits != 8 else 1 if fmt.mantissa_bits == 3 else 2


class Plan(NamedTuple):
    """Everything one call needs besides its tensors (checked parameters and derived sizes)."""

    fmt: FloatFormat
    rule: str
    edges: str
    rowwise: bool
    columnwise: bool
    two_d: bool
    swizzled: bool
    rows: int
    cols: int

    @property
    def zero_reciprocal_bits(self) -> int:
        """float32 bits of the reciprocal of scale byte 0: ``2**127``, or torchao 0.18's ``2**126`` / ``1.0``."""
        if self.edges != "torchao_018":
            return 254 << 23
        return 127 << 23 if self.rule == "rceil" else 253 << 23

    @property
    def row_scale_shape(self) -> tuple[int, int]:
        return round_up(self.rows, 128), round_up(self.cols // BLOCK_SIZE, 4)

    @property
    def col_scale_shape(self) -> tuple[int, int]:
        return round_up(self.rows // BLOCK_SIZE, 4), round_up(self.cols, 128)


def make_plan(x: object, format: str, scale_rule: str, usage: str, blocks: str, scale_layout: str, edges: str) -> Plan:
    """Check every argument; the plan of the call."""
    check_choice("format", format, MX_FORMATS)
    check_choice("scale_rule", scale_rule, SCALE_RULES)
    check_choice("usage", usage, USAGES)
    check_choice("blocks", blocks, BLOCKS)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    check_choice("edges", edges, EDGES)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    dtype = str(x.dtype).removeprefix("torch.")
    if x.dtype not in INPUT_IDS:
        raise TypeError(
            f"Got x.dtype={dtype}, but x must be one of ['float32', 'bfloat16', 'float16'] (float64 is refused: "
            "narrowing it through float32 would round twice)"
        )
    shape = tuple(x.shape)
    if x.dim() < 2:
        raise ValueError(
            f"Got x.shape={shape}, but x must have at least 2 dimensions [..., M, K] (MX blocks run along K, or "
            "along M for columnwise usage); reshape a vector to [1, K]"
        )
    if x.numel() == 0:
        raise ValueError(f"Got x.shape={shape}, but x must not be empty")
    if not x.is_contiguous():
        raise ValueError(f"Got x with shape {shape} and strides {x.stride()}, but x must be contiguous")
    rows, cols = x.numel() // shape[-1], shape[-1]
    two_d = blocks == "2d"
    what = "2d blocks" if two_d else f"usage={usage!r}"
    if (usage != "columnwise" or two_d) and cols % BLOCK_SIZE:
        raise ValueError(
            f"Got x.shape={shape}, but {what} needs K % 32 == 0 (K = x.shape[-1] = {cols}): blocks of 32 run along K"
        )
    if (usage != "rowwise" or two_d) and rows % BLOCK_SIZE:
        raise ValueError(
            f"Got x.shape={shape}, but {what} needs M % 32 == 0 (M = {rows}, the product of the leading "
            "dimensions): columnwise blocks of 32 run along M"
        )
    fmt = FORMATS[format]
    if fmt.bits == 4 and cols % 2:
        raise ValueError(f"Got x.shape={shape}, but FP4 packs two codes per byte along K: K must be even")
    return Plan(
        fmt,
        scale_rule,
        edges,
        rowwise=usage != "columnwise",
        columnwise=usage != "rowwise",
        two_d=two_d,
        swizzled=scale_layout == "swizzled",
        rows=rows,
        cols=cols,
    )


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
