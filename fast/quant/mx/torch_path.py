"""The MX torch path: ``fast.cast``, ``fast.pack`` and ``fast.layout`` composed with the scale arithmetic in torch
integer ops."""

from __future__ import annotations

import torch

import fast.cast
import fast.layout
import fast.pack
from fast.quant.mx.plan import BLOCK_SIZE, E8M0_MAX, E8M0_NAN, F32_INF, FORMATS, Plan

# %% Torch path


def _scale_bytes_torch(amax: torch.Tensor, plan: Plan) -> torch.Tensor:
    """int32 scale bytes of int32 block maxima (float32 magnitude bits), as :func:`mx_scale_byte`."""
    fmt = plan.fmt
    if plan.rule == "rceil":
        value = amax.view(torch.float32)
        if plan.edges == "torchao_018":
            descale = value / torch.tensor(fmt.max_value, dtype=torch.float32, device=amax.device)
        else:
            descale = value * torch.tensor(fmt.reciprocal_of_max, dtype=torch.float32, device=amax.device)
        bits = descale.view(torch.int32) & 0x7FFFFFFF
        exponent, mantissa = bits >> 23, bits & 0x7FFFFF
        byte = exponent + torch.where(exponent == 0, mantissa > 0x400000, mantissa != 0).to(torch.int32)
        if plan.edges == "torchao_018":
            byte = byte - _log2_keeps_power_torch(exponent, mantissa)
    else:
        finite = amax.clamp(max=F32_INF)
        if plan.rule == "even":
            finite = (finite + (1 << (22 - fmt.mantissa_bits))) & F32_INF
        exponent = finite >> 23
        if plan.rule == "ceil":
            exponent = exponent + ((finite & 0x7FFFFF) != 0).to(torch.int32)
        byte = exponent - fmt.emax
    byte = byte.clamp(0, E8M0_MAX)
    if plan.edges == "te":
        byte = byte.masked_fill(amax == F32_INF, E8M0_MAX)
    elif plan.edges == "torchao":
        byte = byte.masked_fill(amax >= F32_INF, E8M0_NAN)
    else:
        byte = byte.masked_fill(amax > F32_INF, E8M0_NAN)
    return byte


def _log2_keeps_power_torch(exponent: torch.Tensor, mantissa: torch.Tensor) -> torch.Tensor:
    """int32 1 where torchao 0.18's ``ceil(log2(d))`` stays at ``j`` above ``2**j`` (as ``mx_log2_keeps_power``)."""
    offset = torch.where(exponent == 0, 2 * (mantissa - 0x400000), mantissa)
    j = exponent - 127
    a = torch.where(j >= 0, j, -j - 1)
    slack = (a >= 4).to(torch.int32) + (a >= 8) + 3 * (a >= 16) + 6 * (a >= 32) + 11 * (a >= 64)
    return ((offset > 0) & (offset <= slack) & (exponent < 255)).to(torch.int32)


def _reciprocal_torch(byte: torch.Tensor, plan: Plan) -> torch.Tensor:
    bits = torch.where(byte == E8M0_MAX, 0x00400000, (E8M0_MAX - byte) << 23)
    bits = bits.masked_fill(byte == 0, plan.zero_reciprocal_bits).masked_fill(byte == E8M0_NAN, 0x7FC00000)
    return bits.to(torch.int32).view(torch.float32)


def _codes_torch(value: torch.Tensor, byte: torch.Tensor, plan: Plan) -> torch.Tensor:
    """uint8 codes of ``value`` (float32 ``[M, K]``) given each element's scale byte (``[M, K]``, int32)."""
    fmt = plan.fmt
    scaled = value * _reciprocal_torch(byte, plan)
    name = next(n for n, f in FORMATS.items() if f is fmt)
    if fmt.bits == 8:
        codes = fast.cast.fp8(scaled, format=name, overflow="saturate")["codes"]
        codes = codes.masked_fill(scaled.isnan(), fmt.nan_codes[0])
    elif fmt.bits == 6:
        codes = fast.cast.fp6(scaled, format=name, nan="max")["codes"]
    else:
        codes = fast.cast.fp4(scaled, format=name, nan="max")["codes"]
    codes = codes.masked_fill(byte == E8M0_NAN, 0)
    return fast.pack.nibbles(codes)["packed"] if fmt.bits == 4 else codes


def quantize_torch(x2: torch.Tensor, plan: Plan, outputs: dict[str, torch.Tensor]) -> None:
    rows, cols = plan.rows, plan.cols
    bits = x2.to(torch.float32).view(torch.int32)
    value = bits.view(torch.float32)
    magnitude = bits & 0x7FFFFFFF
    if plan.edges == "te":
        magnitude = magnitude.masked_fill(magnitude > F32_INF, 0)
    tile = None
    if plan.two_d:
        blocks = magnitude.view(rows // BLOCK_SIZE, BLOCK_SIZE, cols // BLOCK_SIZE, BLOCK_SIZE)
        tile = _scale_bytes_torch(blocks.amax(dim=(1, 3)), plan)
    if plan.rowwise:
        if tile is None:
            scale = _scale_bytes_torch(magnitude.view(rows, cols // BLOCK_SIZE, BLOCK_SIZE).amax(dim=2), plan)
        else:
            scale = tile.repeat_interleave(BLOCK_SIZE, dim=0)
        outputs["data_rowwise"].view(rows, -1).copy_(
            _codes_torch(value, scale.repeat_interleave(BLOCK_SIZE, dim=1), plan)
        )
        _store_scales_torch(scale.to(torch.uint8), outputs["scale_rowwise"], plan, transpose=False)
    if plan.columnwise:
        if tile is None:
            scale = _scale_bytes_torch(magnitude.view(rows // BLOCK_SIZE, BLOCK_SIZE, cols).amax(dim=1), plan)
        else:
            scale = tile.repeat_interleave(BLOCK_SIZE, dim=1)
        outputs["data_columnwise"].view(rows, -1).copy_(
            _codes_torch(value, scale.repeat_interleave(BLOCK_SIZE, dim=0), plan)
        )
        _store_scales_torch(scale.to(torch.uint8), outputs["scale_columnwise"], plan, transpose=True)


def _store_scales_torch(scale: torch.Tensor, out: torch.Tensor, plan: Plan, *, transpose: bool) -> None:
    """Write the logical scale matrix into the (zeroed) padded buffer, compact or swizzled."""
    if plan.swizzled:
        source = scale.t() if transpose else scale
        out.view(-1).copy_(fast.layout.scale_swizzle(source)["swizzled"].view(-1))
    else:
        out[: scale.shape[0], : scale.shape[1]] = scale
