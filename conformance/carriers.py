"""Logical dtypes and how the engine carries them in NumPy.

Every array the engine draws, stores or compares is a bit pattern: an unsigned integer
array as wide as the logical dtype.  Callables see *carriers*:

- NumPy backends (the reference included) get NumPy arrays; ``bfloat16`` has no NumPy
  dtype, so it is carried as float32 holding exactly the bfloat16 value (widening is exact).
- torch backends get tensors of the logical dtype (``conformance.backends`` converts).

Outputs come back as carriers too and are turned into bit patterns for comparison;
a bfloat16 output may come back as float32 (exact bfloat16 values) or as uint16 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DTYPES", "DType", "bits_to_carrier", "carrier_to_bits", "get_dtype", "round_to_bfloat16"]


@dataclass(frozen=True)
class DType:
    """A logical dtype: its name, kind, width and the NumPy carrier and bit dtypes."""

    name: str
    kind: str  # "float" | "int" | "uint" | "bool"
    bits: int
    carrier: np.dtype
    bit_dtype: np.dtype


def _dtype(name: str, kind: str, bits: int, carrier: str) -> DType:
    bit_dtype = np.dtype("bool") if kind == "bool" else np.dtype(f"uint{bits}")
    return DType(name, kind, bits, np.dtype(carrier), bit_dtype)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        _dtype("float32", "float", 32, "float32"),
        _dtype("float16", "float", 16, "float16"),
        _dtype("bfloat16", "float", 16, "float32"),
        _dtype("float64", "float", 64, "float64"),
        _dtype("uint8", "uint", 8, "uint8"),
        _dtype("uint16", "uint", 16, "uint16"),
        _dtype("uint32", "uint", 32, "uint32"),
        _dtype("int8", "int", 8, "int8"),
        _dtype("int16", "int", 16, "int16"),
        _dtype("int32", "int", 32, "int32"),
        _dtype("int64", "int", 64, "int64"),
        _dtype("bool", "bool", 8, "bool"),
    )
}


def get_dtype(name: str) -> DType:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"Got dtype={name!r}, but the known dtypes are {sorted(DTYPES)}") from None


def bits_to_carrier(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Turn a bit-pattern array into the NumPy carrier a NumPy backend receives."""
    d = get_dtype(dtype)
    bits = np.array(bits, dtype=d.bit_dtype, order="C")
    if d.name == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(d.carrier)


def carrier_to_bits(array: np.ndarray, dtype: str) -> np.ndarray:
    """Bit patterns of an output carrier; ``TypeError`` says what was expected instead."""
    d = get_dtype(dtype)
    array = np.asarray(array, order="C")
    if d.name == "bfloat16":
        if array.dtype == np.uint16:
            return array
        if array.dtype != np.float32:
            raise TypeError(f"got dtype {array.dtype}, expected bfloat16 (as float32 values or uint16 bits)")
        wide = array.view(np.uint32)
        if np.any(wide & 0xFFFF):
            raise TypeError("got float32 values that are not bfloat16 values (low 16 bits set)")
        return (wide >> 16).astype(np.uint16)
    if array.dtype != d.carrier:
        raise TypeError(f"got dtype {array.dtype}, expected {d.name}")
    return array.view(d.bit_dtype)


def round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), returned as float32.

    NaN stays NaN (quieted); used to draw bfloat16 inputs from float values.
    """
    wide = np.asarray(values, dtype=np.float32, order="C").view(np.uint32)
    is_nan = (wide & 0x7FFFFFFF) > 0x7F800000
    rounded = wide + np.uint32(0x7FFF) + ((wide >> 16) & np.uint32(1))
    out = np.where(is_nan, wide | np.uint32(0x00400000), rounded) & np.uint32(0xFFFF0000)
    return out.astype(np.uint32).view(np.float32)
