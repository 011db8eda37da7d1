"""The NVFP4 torch path: the contract's arithmetic with torch tensor ops (tensor-by-tensor divisions only: torch
rewrites a division by a Python number, and ``1 / t``, as multiplications by a reciprocal) and ``fast.cast``'s casts."""

from __future__ import annotations

import torch

from fast.cast import fp4 as cast_fp4
from fast.cast import fp8 as cast_fp8
from fast.pack import nibbles as pack_nibbles
from fast.quant.nvfp4.settings import (
    E4M3_MAX,
    F32_INF,
    FLT_MAX,
    INV_2688,
    RHT_SIGN_MASK,
    SIXTH,
    TORCHAO_FLOOR,
    Settings,
)

# %% Torch path


def _full(like: torch.Tensor, value: float) -> torch.Tensor:
    return torch.full_like(like, value, dtype=torch.float32)


def _torch_hadamard_16(values: torch.Tensor) -> torch.Tensor:
    """:func:`hadamard_16_columns` with torch ops on the rows of float32 ``[R, C]`` (16-element chunks of each row)."""
    rows, cols = values.shape
    lane = torch.arange(16, device=values.device)
    signs = torch.where(((RHT_SIGN_MASK >> lane) & 1) != 0, -0.25, 0.25).to(torch.float32)
    v = values.reshape(rows, cols // 16, 16) * signs
    for h in (1, 2, 4, 8):
        pairs = v.reshape(rows, cols // 16, 16 // (2 * h), 2, h)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        v = torch.stack([a + b, a - b], dim=-2)
    bits = v.reshape(rows, cols).view(torch.int32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    quiet = (bits | 0x400000) & -65536
    return torch.where((bits & 0x7FFFFFFF) > F32_INF, quiet, rounded).view(torch.float32)


def _e4m3_values(codes: torch.Tensor) -> torch.Tensor:
    """float32 value of E4M3 codes (uint8), from the bit fields (0x7F/0xFF NaN)."""
    c = codes.to(torch.int32)
    exponent, mantissa = (c >> 3) & 15, c & 7
    normal = (((exponent + 120) << 23) | (mantissa << 20)).view(torch.float32)
    value = torch.where(exponent == 0, mantissa.to(torch.float32) * 2.0**-9, normal)
    value = torch.where((c & 0x80) != 0, -value, value)
    return torch.where((c & 0x7F) == 0x7F, torch.full_like(value, float("nan")), value)


def _torch_operand(
    values: torch.Tensor, random_bits: torch.Tensor | None, given_amax: torch.Tensor | None, s: Settings
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(data, scales, amax, tensor_scale)`` of one float32 operand ``[R, C]`` with torch ops; ``given_amax``
    (float32 ``[1]``) replaces the operand's amax (a copy of it is returned)."""
    rows, cols = values.shape
    magnitude = values.view(torch.int32) & 0x7FFFFFFF
    if s.scale_rule == "te":
        magnitude = magnitude.masked_fill(magnitude > F32_INF, 0)
    if given_amax is not None:
        amax = given_amax.clone()
    else:
        amax_bits = magnitude.amax(dim=1) if s.amax_scope == "row" else magnitude.amax().reshape(1)
        amax = amax_bits.view(torch.float32)
    blocks = magnitude.reshape(rows, cols // 16, 16).amax(dim=2)
    if s.block == "16x16":
        blocks = blocks.reshape(rows // 16, 16, cols // 16).amax(dim=1).repeat_interleave(16, dim=0)
    block_amax = blocks.view(torch.float32)
    if s.scale_rule == "te":  # torch.fmin is TE's fminf: it drops a NaN operand (a given NaN or negative amax)
        encode = torch.fmin(_full(amax, 2688.0) / amax, _full(amax, FLT_MAX))
        encode = torch.where((amax == 0) | (encode == 0), _full(amax, 1.0), encode)
        tensor_scale = _full(encode, 1.0) / encode
        target = torch.fmin(block_amax * (encode * _full(encode, SIXTH)).reshape(-1, 1), _full(block_amax, FLT_MAX))
        codes = cast_fp8(target.contiguous(), format="float8_e4m3fn", overflow="saturate")["codes"]
        block_scale = _e4m3_values(codes)
        enc = torch.fmin(
            _full(block_scale, 1.0) / (block_scale * tensor_scale.reshape(-1, 1)), _full(block_scale, FLT_MAX)
        )
        if s.zero_scale == "zero":
            enc = torch.where(block_scale == 0, _full(enc, 0.0), enc)
    else:
        if s.scale_rule == "torchao":
            tensor_scale = amax / _full(amax, 2688.0)
            block_scaled = block_amax / _full(block_amax, 6.0)
        else:
            tensor_scale = amax * _full(amax, INV_2688)
            block_scaled = block_amax * _full(block_amax, SIXTH)
        ratio = block_scaled / tensor_scale.reshape(-1, 1)
        clamped = torch.clamp(ratio, TORCHAO_FLOOR, E4M3_MAX)  # NaN stays NaN
        codes = cast_fp8(clamped.contiguous(), format="float8_e4m3fn", overflow="saturate")["codes"]
        block_scale = _e4m3_values(codes)
        enc = (_full(tensor_scale, 1.0) / tensor_scale).reshape(-1, 1) / block_scale
    scaled = (values.reshape(rows, cols // 16, 16) * enc[:, :, None]).reshape(rows, cols).contiguous()
    q = cast_fp4(scaled, format="float4_e2m1fn", rounding=s.rounding, nan="max", random_bits=random_bits)["codes"]
    return pack_nibbles(q)["packed"], codes, amax, tensor_scale.reshape(amax.shape)


def quantize_torch(
    x: torch.Tensor,
    s: Settings,
    random_bits: torch.Tensor | None,
    columnwise_random_bits: torch.Tensor | None,
    given: list[torch.Tensor],
) -> dict[str, torch.Tensor]:
    values = x.to(torch.float32)
    out: dict[str, torch.Tensor] = {}
    operands = []
    if s.rowwise:
        operands.append(("", values, random_bits))
    if s.columnwise:
        operand = values.t().contiguous()
        operands.append(("columnwise_", _torch_hadamard_16(operand) if s.rht else operand, columnwise_random_bits))
    for (prefix, operand, bits), given_amax in zip(operands, given or [None] * len(operands), strict=True):
        data, scales, amax, tensor_scale = _torch_operand(operand, bits, given_amax, s)
        out.update(
            {
                f"{prefix}data": data,
                f"{prefix}scales": scales,
                f"{prefix}amax": amax,
                f"{prefix}tensor_scale": tensor_scale,
            }
        )
    return out
