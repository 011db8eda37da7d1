"""Unpacking of two 4-bit codes per byte (contract ``unpack.nibbles``): torch ops on any device.

There is no kernel: a mask, a shift and an interleaving copy serve CPU and CUDA alike.
"""

from __future__ import annotations

import torch

__all__ = ["NIBBLE_ORDERS", "nibbles"]

NIBBLE_ORDERS: tuple[str, ...] = ("low_first", "high_first")


def nibbles(packed: torch.Tensor, *, order: str = "low_first", odd: bool = False) -> dict[str, torch.Tensor]:
    """Split every byte along the last axis into two 4-bit codes.

    Contract
    --------
    ``unpack.nibbles``: ``codes[..., 2*i] = packed[..., i] & 0xF`` and ``codes[..., 2*i + 1] =
    packed[..., i] >> 4`` (``order="low_first"``), or the other way round (``"high_first"``).  With
    ``odd=True`` the last code (the padding nibble of an odd count) is dropped, whatever its value,
    so ``unpack(pack(c), odd=N % 2 == 1) == c``.

    Source
    ------
    As ``pack.nibbles`` (ONNX ``unpack_int4``, TransformerEngine, torchao; tinygemm for
    ``high_first``); ``specs/unpack/nibbles.yaml``.

    Encoding
    --------
    ``packed``: ``uint8``, shape ``[..., M]`` (any device; every byte is valid).  ``codes``:
    ``uint8`` 0..15, shape ``[..., 2*M - odd]``, contiguous, on ``packed``'s device.

    Raises ``TypeError`` unless ``packed`` is a ``uint8`` tensor, ``ValueError`` for an unknown
    ``order``, an ``odd`` that is not a bool, a 0-d ``packed``, or ``odd=True`` with ``M == 0``.
    """
    if order not in NIBBLE_ORDERS:
        raise ValueError(f"Got order={order!r}, but order must be one of {list(NIBBLE_ORDERS)}")
    if not isinstance(odd, bool):
        raise ValueError(f"Got odd={odd!r}, but odd must be one of {[False, True]}")
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"Got packed of type {type(packed).__name__}, but packed must be a torch.Tensor of dtype uint8")
    if packed.dtype != torch.uint8:
        raise TypeError(f"Got packed.dtype={str(packed.dtype).removeprefix('torch.')}, but packed must be uint8")
    if packed.dim() == 0:
        raise ValueError(f"Got packed.shape={tuple(packed.shape)}, but packed must have at least 1 dimension")
    if odd and packed.shape[-1] == 0:
        raise ValueError(
            f"Got odd=True and packed.shape={tuple(packed.shape)}, but odd=True drops the last nibble, "
            "so packed needs at least one byte along its last axis"
        )
    low, high = packed & 0xF, packed >> 4
    first, second = (low, high) if order == "low_first" else (high, low)
    codes = torch.stack([first, second], dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    return {"codes": codes[..., : codes.shape[-1] - int(odd)].contiguous()}
