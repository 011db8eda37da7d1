"""Groupwise affine dequantization as torchao's primitives define it (contract ``dequant.affine``).

Source: pytorch/ao@36027d8 ``torchao/quantization/quant_primitives.py``: ``_dequantize_affine``
(int zero point), ``_dequantize_affine_no_zero_point`` (none), ``_dequantize_affine_tinygemm``
(float zero).  Groups as ``quant.affine``: ``q`` is
``[R, C]`` and ``scale`` (and the zero point) ``[R / block_rows, C / block_cols]``.

Arithmetic
----------
torchao converts to ``output_dtype`` (``out_dtype`` here) and then multiplies by ``scale``; torch
computes each op in float32 and rounds the result to the dtype it is stored in (:mod:`reference._opmath`):
a float32 ``scale`` promotes the product to float32, which ``.to(out_dtype)`` rounds again, and a
bfloat16 ``scale`` gives a bfloat16 op computed in float32 and rounded once: both are
``round_out(round_f32(exact))``, so the formulas below do not depend on the dtype ``scale`` is
stored in, only on its values.

- ``int``: ``d = round_out(q - zero_point)`` (exact: ``|q - zero_point| <= 255``), then
  ``x = round_out(round_f32(d * scale))``.
- ``none``: ``x = round_out(round_f32(q * scale))``.
- ``float`` (tinygemm): ``d = q - mid`` (``mid = (qmax + qmin + 1) / 2``: 8 for uint4, 0 for int8
  and int4; exact), ``t = round_out(round_f32(d * scale))``, ``x = round_out(round_f32(t + zero))``:
  two roundings (the tinygemm kernel rounds once: ``int4.tinygemm_dequant``).
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice
from reference._opmath import ARITHMETIC_DTYPES, to_dtype

__all__ = ["DEQUANT_DTYPES", "OUT_DTYPES", "ZERO_POINT_DOMAINS", "affine"]

DEQUANT_DTYPES: tuple[str, ...] = ("int8", "int4", "uint4")
"""What ``q`` (and an integer zero point) hold, as two's complement codes in uint8."""
ZERO_POINT_DOMAINS: tuple[str, ...] = ("int", "none", "float")
OUT_DTYPES: tuple[str, ...] = ARITHMETIC_DTYPES
"""torchao's ``output_dtype``: float32 (its default), bfloat16 or float16."""

_RANGES = {"int8": (-128, 127), "int4": (-8, 7), "uint4": (0, 15)}


def affine(
    q: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray | None = None,
    zero: np.ndarray | None = None,
    *,
    dtype: str,
    zero_point_domain: str,
    block_rows: int,
    block_cols: int,
    out_dtype: str = "float32",
) -> dict[str, np.ndarray]:
    """Dequantize ``q`` with per-group ``scale`` and zero point (torchao semantics).

    Contract
    --------
    ``dequant.affine``: the module docstring's formulas, per element, with the group's parameters.

    Source
    ------
    torchao ``dequantize_affine`` (``int``), ``_dequantize_affine_no_zero_point`` (``none``),
    ``_dequantize_affine_tinygemm`` (``float``); ``specs/dequant/affine.yaml``.

    Encoding
    --------
    ``q``: uint8 ``[R, C]`` codes of ``dtype`` (int8: the byte; int4: the low nibble, 0x8 is -8;
    uint4: 0..15).  ``scale``: float32 ``[R/block_rows, C/block_cols]`` (any float32 value; a
    bfloat16 or float16 scale is a float32 holding its value).  ``zero_point`` (``int`` only): uint8
    codes of ``dtype``, same shape as ``scale``.  ``zero`` (``float`` only): float32, same shape.
    ``x``: float32 ``[R, C]`` holding values of ``out_dtype``.

    Edge cases
    ----------
    IEEE: a NaN or infinite scale or zero gives NaN or ±Inf (the spec compares NaN as NaN, any
    payload); overflow of ``out_dtype`` gives ±Inf; ``-0`` results keep their sign.

    Raises ``ValueError`` for an unknown ``dtype``, ``zero_point_domain`` or ``out_dtype``, block
    sizes that do not divide ``q``'s shape, a code outside ``dtype`` (int4/uint4: above 15), a
    zero point given for another domain or missing for its own, and shapes that do not match;
    ``TypeError`` for arrays of other dtypes.
    """
    check_choice("dtype", dtype, DEQUANT_DTYPES)
    check_choice("zero_point_domain", zero_point_domain, ZERO_POINT_DOMAINS)
    check_choice("out_dtype", out_dtype, OUT_DTYPES)
    check_array("q", q, (np.uint8,), min_ndim=2)
    if q.ndim != 2:
        raise ValueError(f"Got q.shape={q.shape}, but q must be 2-D [R, C]")
    groups = _groups(q.shape, block_rows, block_cols)
    check_array("scale", scale, (np.float32,))
    _check_shape("scale", scale, groups)
    values = _values(q, "q", dtype)
    expected = {"int": "zero_point", "float": "zero", "none": None}[zero_point_domain]
    for name, given in (("zero_point", zero_point), ("zero", zero)):
        if (given is not None) != (name == expected):
            need = f"needs {expected}=" if expected else "takes no zero point"
            raise ValueError(f"Got {name}={'an array' if given is not None else None}, but {zero_point_domain=} {need}")

    def rnd(v: np.ndarray) -> np.ndarray:
        return to_dtype(v, out_dtype)

    s = _expand(scale, block_rows, block_cols)
    with np.errstate(invalid="ignore", over="ignore"):
        if zero_point_domain == "int":
            assert zero_point is not None
            check_array("zero_point", zero_point, (np.uint8,))
            _check_shape("zero_point", zero_point, groups)
            d = rnd(values - _expand(_values(zero_point, "zero_point", dtype), block_rows, block_cols))
            x = rnd(d * s)
        elif zero_point_domain == "none":
            x = rnd(values * s)
        else:
            assert zero is not None
            check_array("zero", zero, (np.float32,))
            _check_shape("zero", zero, groups)
            qmin, qmax = _RANGES[dtype]
            d = values - np.float32((qmax + qmin + 1) / 2)
            x = rnd(rnd(d * s) + _expand(zero, block_rows, block_cols))
    return {"x": x}


def _groups(shape: tuple[int, ...], block_rows: int, block_cols: int) -> tuple[int, int]:
    for name, size, axis in (("block_rows", block_rows, 0), ("block_cols", block_cols, 1)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1 or shape[axis] % size:
            raise ValueError(
                f"Got {name}={size!r} and q.shape={shape}, but {name} must be a positive integer "
                f"that divides q.shape[{axis}]={shape[axis]}"
            )
    return shape[0] // block_rows, shape[1] // block_cols


def _check_shape(name: str, value: np.ndarray, groups: tuple[int, int]) -> None:
    if value.shape != groups:
        raise ValueError(
            f"Got {name}.shape={value.shape}, but {name} must be [R/block_rows, C/block_cols] = {list(groups)}"
        )


def _values(codes: np.ndarray, name: str, dtype: str) -> np.ndarray:
    """The integers that uint8 codes of ``dtype`` stand for, as float32."""
    if dtype != "int8":
        bad = np.argwhere(codes > 15)
        if bad.size:
            i, j = (int(v) for v in bad[0])
            raise ValueError(f"Got {name}[{i}, {j}]={int(codes[i, j])}, but {dtype} codes are 0..15")
    wide = codes.astype(np.int32)
    if dtype == "int8":
        wide = np.where(wide > 127, wide - 256, wide)
    elif dtype == "int4":
        wide = np.where(wide > 7, wide - 16, wide)
    return wide.astype(np.float32)


def _expand(per_group: np.ndarray, block_rows: int, block_cols: int) -> np.ndarray:
    return np.repeat(np.repeat(per_group, block_rows, axis=0), block_cols, axis=1)
