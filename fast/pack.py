"""Packing of 4-bit codes two per byte (contract ``pack.nibbles``): torch ops on any device.

There is no kernel: two strided reads, a shift and an or are already one memory pass each on CPU
and CUDA, so the same torch code serves both.
"""

from __future__ import annotations

import torch

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
    if order not in NIBBLE_ORDERS:
        raise ValueError(f"Got order={order!r}, but order must be one of {list(NIBBLE_ORDERS)}")
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"Got codes of type {type(codes).__name__}, but codes must be a torch.Tensor of dtype uint8")
    if codes.dtype != torch.uint8:
        raise TypeError(f"Got codes.dtype={str(codes.dtype).removeprefix('torch.')}, but codes must be uint8")
    if codes.dim() == 0:
        raise ValueError(f"Got codes.shape={tuple(codes.shape)}, but codes must have at least 1 dimension")
    above = codes > 15
    if bool(above.any()):
        index = tuple(int(i) for i in above.nonzero()[0])
        raise ValueError(f"Got codes[{', '.join(map(str, index))}]={int(codes[index])}, but codes must be 0..15")
    count = codes.shape[-1]
    first = codes[..., 0::2]
    second = torch.zeros_like(first)
    second[..., : count // 2] = codes[..., 1::2]
    low, high = (first, second) if order == "low_first" else (second, first)
    return {"packed": low | (high << 4)}
