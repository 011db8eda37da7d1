"""MX dequantization (contract ``dequant.mx``): a Triton kernel for CUDA, torch ops elsewhere.

Contract
--------
``x[r, c] = fl32(value(code[r, c]) * 2**(s - 127))`` with ``s`` the E8M0 scale byte of the element's
block (rowwise ``scale[r, c // 32]``, columnwise ``scale[r // 32, c]``; 255 gives NaN).  Both factors
are exact float32 values with few significant bits, so the product is exact unless it overflows to
±Inf.  ``specs/dequant/mx.yaml``; ``reference/dequant/mx.py``.

Layouts
-------
As ``quant.mx`` writes them: data ``uint8`` in the shape of ``x`` (FP4: two codes per byte along K,
element ``2i`` in the low nibble; FP6: low 6 bits); scales in the padded shapes ``[round_up(M, 128),
round_up(K / 32, 4)]`` (rowwise) or ``[round_up(M / 32, 4), round_up(K, 128)]`` (columnwise), compact
(row-major) or swizzled (cuBLAS 128x4 tiles; columnwise swizzled as its ``[K, M / 32]`` transpose).

Paths
-----
The kernel reads each code (FP4: its byte, then the nibble), builds its float32 bits from the fields
(normal codes rebias the exponent; subnormal codes are ``M * 2**(1 - bias - m)``, an exact product;
E4M3 0x7F/0xFF and E5M2's top exponent are NaN/Inf), reads the block's scale byte at its compact or
swizzled offset and multiplies once in float32.  The torch path composes ``fast.unpack``,
``fast.decode`` and ``fast.layout``.  ``QCONFORM_FAST_PATH`` chooses per call as in ``fast/cast.py``.
"""

from __future__ import annotations

import os

import torch

import fast.decode
import fast.layout
import fast.unpack
from fast._checks import check_choice
from fast._triton import device, jit, tl, triton
from fast.formats import FORMATS, FloatFormat
from fast.layout import swizzled_offset

__all__ = ["DEQUANT_USAGES", "MX_FORMATS", "SCALE_LAYOUTS", "mx"]

MX_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
DEQUANT_USAGES: tuple[str, ...] = ("rowwise", "columnwise")
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")

_PATH_ENV = "QCONFORM_FAST_PATH"
_BLOCK = 32
_BLOCK_M = 32
_BLOCK_K = 128
_SPECIAL_IDS: dict[str, int] = {"finite": 0, "fn": 1, "ieee": 2}
"""The kernel's ``SPECIALS`` id of each ``fast.formats`` specials: 0 none (FP6/FP4), 1 E4M3 (the all-ones magnitude
is NaN), 2 IEEE (E5M2: top exponent Inf/NaN)."""


# %% Compute kernel


@device
def mx_decode_bits(
    code, EXPONENT_BITS: tl.constexpr, MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr, SPECIALS: tl.constexpr
):
    """float32 bits of int32 element codes (sign in the code's top bit)."""
    SIGN_SHIFT: tl.constexpr = EXPONENT_BITS + MANTISSA_BITS
    magnitude = code & ((1 << SIGN_SHIFT) - 1)
    exponent = magnitude >> MANTISSA_BITS
    mantissa = magnitude & ((1 << MANTISSA_BITS) - 1)
    normal = ((exponent + (127 - BIAS)) << 23) | (mantissa << (23 - MANTISSA_BITS))
    # Subnormal codes (and zero): M * 2**(1 - bias - m) as a float32 product, exact (a normal power of two).
    unit = (128 - BIAS - MANTISSA_BITS) << 23
    tiny = (mantissa.to(tl.float32) * tl.full([], unit, tl.int32).to(tl.float32, bitcast=True)).to(
        tl.int32, bitcast=True
    )
    bits = tl.where(exponent == 0, tiny, normal)
    if SPECIALS == 1:
        bits = tl.where(magnitude == (1 << SIGN_SHIFT) - 1, 0x7FC00000, bits)
    elif SPECIALS == 2:
        top = exponent == (1 << EXPONENT_BITS) - 1
        bits = tl.where(top, tl.where(mantissa == 0, 0x7F800000, 0x7FC00000), bits)
    return bits | ((code >> SIGN_SHIFT) << 31)


def _dequant_kernel(
    # pointers
    data_ptr,
    scale_ptr,
    out_ptr,
    # sizes
    rows,
    cols,
    data_stride,
    scale_stride,
    # format
    EXPONENT_BITS: tl.constexpr,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    SPECIALS: tl.constexpr,
    PACKED: tl.constexpr,
    # layout
    COLUMNWISE: tl.constexpr,
    SWIZZLED: tl.constexpr,
    # tiling
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_m[:, None] < rows) & (offs_k[None, :] < cols)
    row_base = offs_m.to(tl.int64)[:, None] * data_stride
    if PACKED:
        byte = tl.load(data_ptr + row_base + offs_k[None, :] // 2, mask=mask, other=0).to(tl.int32)
        code = (byte >> ((offs_k[None, :] % 2) * 4)) & 0xF
    else:
        code = tl.load(data_ptr + row_base + offs_k[None, :], mask=mask, other=0).to(tl.int32)
    bits = mx_decode_bits(code, EXPONENT_BITS, MANTISSA_BITS, BIAS, SPECIALS)

    if COLUMNWISE:
        scale_row = offs_m[:, None] // 32
        scale_col = offs_k[None, :]
    else:
        scale_row = offs_m[:, None]
        scale_col = offs_k[None, :] // 32
    if SWIZZLED:
        if COLUMNWISE:
            where = swizzled_offset(scale_col, scale_row, scale_stride)
        else:
            where = swizzled_offset(scale_row, scale_col, scale_stride)
    else:
        where = scale_row * scale_stride + scale_col
    s = tl.load(scale_ptr + where, mask=mask, other=127).to(tl.int32)
    factor = tl.where(s == 0, 0x00400000, tl.where(s == 255, 0x7FC00000, s << 23)).to(tl.float32, bitcast=True)
    value = bits.to(tl.float32, bitcast=True) * factor
    tl.store(out_ptr + offs_m.to(tl.int64)[:, None] * cols + offs_k[None, :], value, mask=mask)


# %% Public function


def mx(
    data: torch.Tensor,
    scale: torch.Tensor,
    *,
    format: str,
    usage: str = "rowwise",
    scale_layout: str = "compact",
) -> dict[str, torch.Tensor]:
    """Dequantize MX data: ``decode(code) * 2**(s - 127)`` per element, in float32.

    Contract
    --------
    ``dequant.mx``: ``x[r, c] = fl32(value(code[r, c]) * 2**(s - 127))``, ``s = scale[r, c // 32]``
    (rowwise) or ``scale[r // 32, c]`` (columnwise); ``s = 255`` gives NaN; exact unless it overflows.

    Source
    ------
    OCP MX v1.0; TransformerEngine ``dequantize_mxfp8.cuh``; torchao ``to_dtype``; ``specs/dequant/mx.yaml``.

    Encoding
    --------
    ``data``: contiguous ``uint8`` codes, at least 2-D (FP4 packed, ``K = 2 * data.shape[-1]``);
    ``scale``: ``uint8`` E8M0 bytes in ``quant.mx``'s padded shape and ``scale_layout``, on ``data``'s
    device.  Returns ``x``: float32 ``[..., M, K]``.

    Edge cases
    ----------
    Scale 0xFF -> NaN; scale 0 -> ``2**-127``; NaN/Inf codes stay NaN/Inf; ±0 keep their sign;
    448 at scale 254 overflows to +Inf.

    Raises ``TypeError`` unless ``data`` and ``scale`` are ``uint8`` tensors; ``ValueError`` for an
    unknown parameter, ``data`` with fewer than 2 dimensions or none of its elements, ``K % 32``
    (rowwise) or ``M % 32`` (columnwise), a ``scale`` of the wrong shape or device, a non-contiguous
    ``data``, and FP6 bytes above 63.
    """
    for name, value, allowed in (
        ("format", format, MX_FORMATS),
        ("usage", usage, DEQUANT_USAGES),
        ("scale_layout", scale_layout, SCALE_LAYOUTS),
    ):
        check_choice(name, value, allowed)
    fmt = FORMATS[format]
    for name, tensor in (("data", data), ("scale", scale)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"Got {name} of type {type(tensor).__name__}, but {name} must be a torch.Tensor of uint8")
        if tensor.dtype != torch.uint8:
            raise TypeError(f"Got {name}.dtype={str(tensor.dtype).removeprefix('torch.')}, but {name} must be uint8")
    shape = tuple(data.shape)
    if data.dim() < 2 or data.numel() == 0:
        raise ValueError(f"Got data.shape={shape}, but data must be non-empty with at least 2 dimensions [..., M, K]")
    if not data.is_contiguous():
        raise ValueError(f"Got data with shape {shape} and strides {data.stride()}, but data must be contiguous")
    if fmt.bits == 6 and bool((data > 63).any()):
        index = tuple(int(i) for i in (data > 63).nonzero()[0])
        raise ValueError(f"Got data[{', '.join(map(str, index))}]={int(data[index])}, but FP6 codes are 0..63")
    rows = data.numel() // shape[-1]
    cols = shape[-1] * (2 if fmt.bits == 4 else 1)
    if usage == "rowwise" and cols % _BLOCK:
        raise ValueError(f"Got data.shape={shape}, but rowwise blocks of 32 need K % 32 == 0 (K = {cols})")
    if usage == "columnwise" and rows % _BLOCK:
        raise ValueError(f"Got data.shape={shape}, but columnwise blocks of 32 need M % 32 == 0 (M = {rows})")
    if usage == "rowwise":
        expected = (_round_up(rows, 128), _round_up(cols // _BLOCK, 4))
    else:
        expected = (_round_up(rows // _BLOCK, 4), _round_up(cols, 128))
    if tuple(scale.shape) != expected:
        raise ValueError(
            f"Got scale.shape={tuple(scale.shape)}, but {usage} scales of data.shape={shape} ({format}) must have the "
            f"padded shape {expected}"
        )
    if scale.device != data.device:
        raise ValueError(f"Got scale on {scale.device} and data on {data.device}, but they must share a device")

    out = torch.empty((*shape[:-1], cols), dtype=torch.float32, device=data.device)
    if _use_triton(data.device):
        _launch(data, scale.contiguous(), out, fmt, usage, scale_layout, rows, cols)
    else:
        _torch_path(data.view(rows, shape[-1]), scale, out.view(rows, cols), format, usage, scale_layout)
    return {"x": out}


def _launch(
    data: torch.Tensor,
    scale: torch.Tensor,
    out: torch.Tensor,
    fmt: FloatFormat,
    usage: str,
    scale_layout: str,
    rows: int,
    cols: int,
) -> None:
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if data.device.type != "cuda" and not interpret:
        raise RuntimeError(
            f"Got {_PATH_ENV}=triton and data on {data.device}, but the Triton kernel runs CPU tensors only in "
            "Triton's interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    swizzled = scale_layout == "swizzled"
    columnwise = usage == "columnwise"
    # swizzled: tiles across the swizzled matrix ([M, K/32] rowwise, the transpose [K, M/32] columnwise)
    scale_stride = (scale.shape[0] if columnwise else scale.shape[1]) // 4 if swizzled else scale.shape[1]
    grid = (triton.cdiv(rows, _BLOCK_M), triton.cdiv(cols, _BLOCK_K))
    if interpret:  # NumPy computes the interpreted kernel: overflow to Inf must not raise a warning
        import numpy as np

        with np.errstate(all="ignore"):
            _run(grid, data, scale, out, fmt, columnwise, swizzled, rows, cols, scale_stride)
    else:
        _run(grid, data, scale, out, fmt, columnwise, swizzled, rows, cols, scale_stride)


def _run(
    grid: tuple[int, int],
    data: torch.Tensor,
    scale: torch.Tensor,
    out: torch.Tensor,
    fmt: FloatFormat,
    columnwise: bool,
    swizzled: bool,
    rows: int,
    cols: int,
    scale_stride: int,
) -> None:
    jit(_dequant_kernel)[grid](
        data,
        scale,
        out,
        rows,
        cols,
        data.shape[-1],
        scale_stride,
        EXPONENT_BITS=fmt.exponent_bits,
        MANTISSA_BITS=fmt.mantissa_bits,
        BIAS=fmt.bias,
        SPECIALS=_SPECIAL_IDS[fmt.specials],
        PACKED=fmt.bits == 4,
        COLUMNWISE=columnwise,
        SWIZZLED=swizzled,
        BLOCK_M=_BLOCK_M,
        BLOCK_K=_BLOCK_K,
        num_warps=4,
    )


def _torch_path(
    data: torch.Tensor, scale: torch.Tensor, out: torch.Tensor, format: str, usage: str, scale_layout: str
) -> None:
    rows, cols = out.shape
    if format == "float4_e2m1fn":
        codes = fast.unpack.nibbles(data)["codes"]
        values = fast.decode.fp4(codes, format=format)["values"]
    elif format.startswith("float6"):
        values = fast.decode.fp6(data, format=format)["values"]
    else:
        values = fast.decode.fp8(data, format=format)["values"]
    if scale_layout == "swizzled":
        if usage == "rowwise":
            scale = fast.layout.scale_unswizzle(scale)["scale"]
        else:
            transposed = scale.reshape(scale.shape[1], scale.shape[0])
            scale = fast.layout.scale_unswizzle(transposed)["scale"].t()
    if usage == "rowwise":
        logical = scale[:rows, : cols // _BLOCK].repeat_interleave(_BLOCK, dim=1)
    else:
        logical = scale[: rows // _BLOCK, :cols].repeat_interleave(_BLOCK, dim=0)
    factor = fast.decode.e8m0(logical.contiguous())["values"]
    torch.mul(values, factor, out=out)


def _use_triton(device_: torch.device) -> bool:
    choice = os.environ.get(_PATH_ENV, "auto")
    if choice not in ("auto", "triton", "torch"):
        raise ValueError(f"Got {_PATH_ENV}={choice!r}, but {_PATH_ENV} must be one of ['auto', 'triton', 'torch']")
    if choice == "triton" and triton is None:
        raise RuntimeError(f"Got {_PATH_ENV}=triton, but triton is not installed")
    return choice == "triton" or (choice == "auto" and device_.type == "cuda" and triton is not None)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
