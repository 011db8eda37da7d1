"""Unpacking of two 4-bit codes per byte (contract ``unpack.nibbles``): a Triton kernel for CUDA, torch ops elsewhere.

The kernel writes each byte's two codes as one little-endian 16-bit word (the first code in its low
byte): one byte load and one 2-byte store per input byte.  ``odd=True`` (the output's last axis is
odd) and the ``torch`` path (``QCONFORM_FAST_PATH``) use torch ops: a mask, a shift and an
interleaving copy.
"""

from __future__ import annotations

import torch

from fast._checks import check_choice
from fast._triton import jit, selected_path, tl, triton

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
    check_choice("order", order, NIBBLE_ORDERS)
    check_choice("odd", odd, (False, True))
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
    if not odd and packed.numel() > 0 and selected_path(packed.device) == "triton":
        return {"codes": _unpack_triton(packed.contiguous(), order)}
    low, high = packed & 0xF, packed >> 4
    first, second = (low, high) if order == "low_first" else (high, low)
    codes = torch.stack([first, second], dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    return {"codes": codes[..., : codes.shape[-1] - int(odd)].contiguous()}


_BLOCK = 4096
"""Input bytes per program."""


def _unpack_triton(packed: torch.Tensor, order: str) -> torch.Tensor:
    codes = torch.empty((*packed.shape[:-1], 2 * packed.shape[-1]), dtype=torch.uint8, device=packed.device)
    flat = packed.view(-1)
    jit(_unpack_kernel)[(triton.cdiv(flat.numel(), _BLOCK),)](
        flat, codes.view(-1).view(torch.int16), flat.numel(), LOW_FIRST=order == "low_first", BLOCK=_BLOCK, num_warps=4
    )
    return codes


def _unpack_kernel(packed_ptr, words_ptr, n_bytes, LOW_FIRST: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_bytes
    byte = tl.load(packed_ptr + offsets, mask=mask).to(tl.int32)
    low, high = byte & 0xF, byte >> 4
    word = low | (high << 8) if LOW_FIRST else high | (low << 8)
    tl.store(words_ptr + offsets, word.to(tl.int16), mask=mask)
