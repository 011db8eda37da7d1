"""Packing of 4-bit codes two per byte (contract ``pack.nibbles``): a Triton kernel for CUDA, torch ops elsewhere.

The kernel reads each pair of codes as one little-endian 16-bit word (element ``2i`` in its low
byte), so an even last axis is a flat pass: one 2-byte load and one byte store per output byte,
with the range check (no code above 15) folded in: any offending word stores 1 into a flag (a plain
predicated store, no atomic).  An odd last axis, and the ``torch`` path (``QCONFORM_FAST_PATH``,
``fast._triton.selected_path``), use torch ops: two strided reads, a shift and an or.
"""

from __future__ import annotations

import torch

from fast._checks import check_choice
from fast._triton import LaunchCache, jit, selected_path, tl, triton

__all__ = ["NIBBLE_ORDERS", "nibbles"]

NIBBLE_ORDERS: tuple[str, ...] = ("low_first", "high_first")


def nibbles(codes: torch.Tensor, *, order: str = "low_first") -> dict[str, torch.Tensor]:
    """Pack pairs of 4-bit codes along the last axis into bytes.

    Contract
    --------
    ``pack.nibbles``: with ``a = codes[..., 2*i]`` and ``b = codes[..., 2*i + 1]``,
    ``packed[..., i] = a | b << 4`` (``order="low_first"``) or ``a << 4 | b`` (``"high_first"``).
    An odd last dimension is padded with a zero code, so the last byte holds the last code and a
    zero nibble.

    Source
    ------
    ``low_first``: ONNX int4/float4 packing, TransformerEngine NVFP4, torchao ``pack_uint4``;
    ``high_first``: the uint8 input of torch's tinygemm int4 weight packing; ``specs/pack/nibbles.yaml``.

    Encoding
    --------
    ``codes``: ``uint8`` values 0..15, shape ``[..., N]`` (any device).  ``packed``: ``uint8``,
    shape ``[..., ceil(N/2)]``, contiguous, on ``codes``' device.

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` tensor, ``ValueError`` for an unknown
    ``order``, a 0-d ``codes`` or a code above 15 (naming the first one).
    """
    check_choice("order", order, NIBBLE_ORDERS)
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"Got codes of type {type(codes).__name__}, but codes must be a torch.Tensor of dtype uint8")
    if codes.dtype != torch.uint8:
        raise TypeError(f"Got codes.dtype={str(codes.dtype).removeprefix('torch.')}, but codes must be uint8")
    if codes.dim() == 0:
        raise ValueError(f"Got codes.shape={tuple(codes.shape)}, but codes must have at least 1 dimension")
    count = codes.shape[-1]
    if count % 2 == 0 and codes.numel() > 0 and selected_path(codes.device) == "triton":
        return {"packed": _pack_triton(codes.contiguous(), order)}
    _check_codes_below_16(codes)
    first = codes[..., 0::2]
    second = torch.zeros_like(first)
    second[..., : count // 2] = codes[..., 1::2]
    low, high = (first, second) if order == "low_first" else (second, first)
    return {"packed": low | (high << 4)}


_BLOCK = 4096
"""Output bytes per program."""


def _check_codes_below_16(codes: torch.Tensor) -> None:
    above = codes > 15
    if bool(above.any()):
        index = tuple(int(i) for i in above.nonzero()[0])
        raise ValueError(f"Got codes[{', '.join(map(str, index))}]={int(codes[index])}, but codes must be 0..15")


def _pack_triton(codes: torch.Tensor, order: str) -> torch.Tensor:
    """The kernel's pass over contiguous ``codes`` with an even last axis."""
    packed = torch.empty((*codes.shape[:-1], codes.shape[-1] // 2), dtype=torch.uint8, device=codes.device)
    flag = torch.zeros(1, dtype=torch.int32, device=codes.device)
    words = codes.view(-1).view(torch.int16)
    args = (words, packed.view(-1), flag, words.numel())
    key = (order, words.numel(), codes.device, words.data_ptr() % 16)
    if codes.device.type != "cuda" or not _LAUNCHES.launch(key, args):
        meta = {"LOW_FIRST": order == "low_first", "BLOCK": _BLOCK}
        grid = triton.cdiv(words.numel(), _BLOCK)
        compiled = jit(_pack_kernel)[(grid,)](*args, **meta, num_warps=4)
        if codes.device.type == "cuda":
            _LAUNCHES.store(key, compiled, grid, meta)
    if int(flag.item()) != 0:
        _check_codes_below_16(codes)
    return packed


def _pack_kernel(words_ptr, packed_ptr, flag_ptr, n_words, LOW_FIRST: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_words
    word = tl.load(words_ptr + offsets, mask=mask, other=0).to(tl.int32) & 0xFFFF
    tl.store(flag_ptr + offsets * 0, 1, mask=mask & ((word & 0xF0F0) != 0))
    first, second = word & 0xF, (word >> 8) & 0xF
    byte = first | (second << 4) if LOW_FIRST else (first << 4) | second
    tl.store(packed_ptr + offsets, byte.to(tl.uint8), mask=mask)


_LAUNCHES = LaunchCache(_pack_kernel, runtime_args=4)
"""Compiled launches by order, size, device and alignment (``fast._triton.LaunchCache``)."""
