"""Packing of narrow codes into bytes (contract family ``pack``)."""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice, check_codes

__all__ = ["NIBBLE_ORDERS", "nibbles"]

NIBBLE_ORDERS: tuple[str, ...] = ("low_first", "high_first")
"""Which nibble of a byte holds the even-indexed element (``pack.nibbles`` / ``unpack.nibbles``)."""


def nibbles(codes: np.ndarray, *, order: str = "low_first") -> dict[str, np.ndarray]:
    """Pack pairs of 4-bit codes along the last axis into bytes.

    Contract
    --------
    ``pack.nibbles``: with ``a = codes[..., 2*i]`` and ``b = codes[..., 2*i + 1]``,
    ``packed[..., i] = a | b << 4`` (``order="low_first"``) or ``a << 4 | b``
    (``order="high_first"``).  An odd last dimension is padded with a zero code first, so the
    last byte holds the last code and a zero nibble.

    Source
    ------
    ``low_first``: the ONNX rule for int4/uint4/float4e2m1 tensors (``docs/technical/int4.md``,
    ``float4.md``: element 0 in the low nibble, element 1 in the high nibble, an odd count padded,
    ``ceil(N/2)`` bytes; ``onnx.numpy_helper._pack_4bitx2``), TransformerEngine NVFP4 data
    (``cast_to_fp4x2``: ``lo + 16*hi``), torchao ``pack_uint4`` and NVIDIA ``__nv_fp4x2``.
    ``high_first``: the uint8 input of torch's tinygemm ``_convert_weight_to_int4pack``
    (element 2i in the high nibble).

    Encoding
    --------
    ``codes``: ``uint8``, shape ``[..., N]``, values 0..15 (an int4 value as its two's complement
    nibble, an FP4 code as is).  ``packed``: ``uint8``, shape ``[..., ceil(N/2)]``.

    Edge cases
    ----------
    - ``N == 0``: an empty ``[..., 0]`` result; ``N == 1``: one byte, ``c`` (``low_first``) or
      ``c << 4`` (``high_first``).
    - A code above 15: ``ValueError`` naming the first one (its index and value).

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` ``numpy.ndarray``, and ``ValueError``
    for a 0-d ``codes``, a code above 15 or an unknown ``order``.
    """
    check_choice("order", order, NIBBLE_ORDERS)
    check_array("codes", codes, (np.uint8,), min_ndim=1)
    check_codes("codes", codes, 4)
    count = codes.shape[-1]
    padded = np.zeros((*codes.shape[:-1], count + count % 2), dtype=np.uint8)
    padded[..., :count] = codes
    first, second = padded[..., 0::2], padded[..., 1::2]
    low, high = (first, second) if order == "low_first" else (second, first)
    return {"packed": low | (high << 4)}
