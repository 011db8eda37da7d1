"""Argument checks shared by the reference modules (private: no ``__all__``, no contract here).

Every message names the argument, the value it got and what is allowed, in the style
"Got order='lsb', but order must be one of ['low_first', 'high_first']".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def check_choice(name: str, value: object, allowed: Sequence[object]) -> None:
    """``ValueError`` unless ``value`` is one of ``allowed`` (of the same type: ``1`` is not ``True``)."""
    if not any(type(value) is type(choice) and value == choice for choice in allowed):
        raise ValueError(f"Got {name}={value!r}, but {name} must be one of {list(allowed)}")


def check_array(name: str, value: object, dtypes: Sequence[type], *, min_ndim: int = 0) -> np.ndarray:
    """``TypeError`` unless ``value`` is a NumPy array of one of ``dtypes``; ``ValueError`` below ``min_ndim``."""
    allowed = " or ".join(np.dtype(d).name for d in dtypes)
    if not isinstance(value, np.ndarray):
        got = type(value).__name__
        raise TypeError(f"Got {name} of type {got}, but {name} must be a numpy.ndarray of dtype {allowed}")
    if value.dtype not in [np.dtype(d) for d in dtypes]:
        raise TypeError(f"Got {name}.dtype={value.dtype}, but {name} must be {allowed}")
    if value.ndim < min_ndim:
        raise ValueError(f"Got {name}.shape={value.shape}, but {name} must have at least {min_ndim} dimension(s)")
    return value


def check_codes(name: str, codes: np.ndarray, bits: int) -> None:
    """``ValueError`` naming the first element of ``codes`` that does not fit in ``bits`` bits."""
    bad = np.flatnonzero(codes.reshape(-1) >> bits)
    if bad.size:
        index = np.unravel_index(bad[0], codes.shape)
        where = f"{name}[{', '.join(str(int(i)) for i in index)}]" if codes.ndim else name
        raise ValueError(f"Got {where}={int(codes[index])}, but {name} must hold {bits}-bit codes 0..{(1 << bits) - 1}")
