"""Unpacking of bytes into narrow codes (contract family ``unpack``)."""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice
from reference.pack import NIBBLE_ORDERS

__all__ = ["nibbles"]


def nibbles(packed: np.ndarray, *, order: str = "low_first", odd: bool = False) -> dict[str, np.ndarray]:
    """Split every byte into two 4-bit codes along the last axis: the inverse of ``pack.nibbles``.

    Contract
    --------
    ``unpack.nibbles``: ``codes[..., 2*i] = packed[..., i] & 0xF`` and
    ``codes[..., 2*i + 1] = packed[..., i] >> 4`` (``order="low_first"``), or the other way round
    (``order="high_first"``).  With ``odd=True`` the last code (the padding nibble of an odd
    count) is dropped, whatever its value, so ``unpack(pack(c), odd=N % 2 == 1) == c``.

    Source
    ------
    As ``pack.nibbles``: ONNX (element 0 in the low nibble, the padding of an odd count dropped
    on unpacking, ``onnx.numpy_helper.unpack_int4``), TransformerEngine and torchao FP4
    (``low_first``); tinygemm's uint8 weight input (``high_first``).

    Encoding
    --------
    ``packed``: ``uint8``, shape ``[..., M]``.  ``codes``: ``uint8`` values 0..15, shape
    ``[..., 2*M]``, or ``[..., 2*M - 1]`` with ``odd=True``.

    Edge cases
    ----------
    - ``M == 0``: an empty result (``odd=True`` then has no nibble to drop: ``ValueError``).
    - Every byte is valid; the dropped padding nibble is not checked.

    Raises ``TypeError`` unless ``packed`` is a ``uint8`` ``numpy.ndarray``, and ``ValueError`` for a
    0-d ``packed``, an unknown ``order``, an ``odd`` that is not a bool, or ``odd=True`` with
    ``M == 0``.
    """
    check_choice("order", order, NIBBLE_ORDERS)
    check_choice("odd", odd, (False, True))
    check_array("packed", packed, (np.uint8,), min_ndim=1)
    if odd and packed.shape[-1] == 0:
        raise ValueError(
            f"Got odd=True and packed.shape={packed.shape}, but odd=True drops the last nibble, "
            "so packed needs at least one byte along its last axis"
        )
    low, high = packed & 0xF, packed >> 4
    first, second = (low, high) if order == "low_first" else (high, low)
    codes = np.stack([first, second], axis=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    return {"codes": np.ascontiguousarray(codes[..., : codes.shape[-1] - int(odd)])}
