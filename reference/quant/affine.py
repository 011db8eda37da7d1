"""Groupwise affine quantization as torchao's primitives define it (contract ``quant.affine``).

Source: pytorch/ao@36027d8 ``torchao/quantization/quant_primitives.py``: ``_choose_qparams_affine``
(mappings ``SYMMETRIC``, ``SYMMETRIC_NO_CLIPPING_ERR``, ``ASYMMETRIC``), ``_choose_qparams_affine_tinygemm``
(the float zero-point domain), ``_quantize_affine`` (int), ``_quantize_affine_tinygemm`` (float),
``_quantize_affine_no_zero_point`` (none).

Groups
------
``x`` is ``[R, C]``; a group is a ``block_rows x block_cols`` block (torchao's ``block_size``:
``(1, C)`` per row, ``(1, gs)`` groupwise, ``(R, C)`` per tensor), and ``scale`` (and the zero
point) are ``[R / block_rows, C / block_cols]``.

Arithmetic
----------
torchao computes in the dtype of the tensor it is given, so a bfloat16 weight gives bfloat16
arithmetic.  ``arithmetic`` names that dtype: ``x`` is first rounded to it (exact when ``x``
already is of that dtype: ``arithmetic="bfloat16"`` on a bfloat16 weight is torchao on that
weight), then every op is torch's: a float32 op rounded once to ``arithmetic``
(:mod:`reference._opmath`), in torchao's order.  ``"float32"`` is torchao given ``x.float()``.
Python constants stay exact float32 operands (``127.5``, ``15.0``, ``8.0``); ``1.0 / scale`` is
``reciprocal(scale)`` rounded to ``arithmetic``; ``round`` is half to even; ``eps`` is rounded to
``arithmetic`` before the clamp.

Dividing a tensor by a Python number (``(max - min) / 15.0``, ``max / 127.5``, ``min / -128.0``)
depends on the device: torch's CPU kernel divides, its CUDA kernel multiplies by the float32 of
``1 / c`` (``div_true_kernel_cuda``: "this may lose one bit of precision"), so torchao's scales
differ between CPU and CUDA in the last place.  ``scalar_division`` names the two: ``divide``
(CPU) and ``reciprocal`` (CUDA).  Tensor-by-tensor divisions are IEEE divisions on both.

Mappings (``min`` / ``max`` over a group; ``min_neg = min(min, 0)``, ``max_pos = max(max, 0)``)
-----------------------------------------------------------------------------------------------
- ``symmetric``: ``scale = max(-min_neg, max_pos) / ((qmax - qmin) / 2)`` (int8: / 127.5),
  zero point ``int((qmax + qmin + 1) / 2)`` (0 for int8 and int4, 8 for uint4), then
  ``scale = max(scale, eps)``.
- ``symmetric_no_clipping_err``: ``scale = where(smin > smax, smin, smax)`` with
  ``smin = min_neg / qmin`` and ``smax = max_pos / qmax`` (uint4: ``smin`` is ``0/0`` or
  ``-x/0``, never chosen), the same zero point, then the ``eps`` clamp.
- ``asymmetric``: ``scale = max((max_pos - min_neg) / (qmax - qmin), eps)`` and
  ``zero_point = clamp(qmin - round(min_neg / scale), qmin, qmax)``.

Zero-point domains
------------------
- ``int``: ``q = clamp(round(x * (1.0 / scale)) + zero_point, qmin, qmax)``: a reciprocal, then a
  multiply, as torchao does.
- ``none``: ``q = clamp(round(x * (1.0 / scale)), qmin, qmax)``: the zero point is dropped.
- ``float`` (tinygemm; ``asymmetric`` only): raw ``min`` / ``max``, ``scale = max((max - min) /
  (qmax - qmin), eps)``, ``zero = min + scale * mid`` with ``mid = (qmax + qmin + 1) / 2`` (8 for
  uint4, 0 for int8 and int4); then ``min_val = zero - scale * mid`` and
  ``q = clamp(round((x - min_val) / scale), qmin, qmax)``: a true division.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from reference._checks import check_choice
from reference._opmath import ARITHMETIC_DTYPES, to_dtype

__all__ = [
    "ARITHMETIC_DTYPES",
    "EPS_CHOICES",
    "MAPPINGS",
    "QUANT_DTYPES",
    "SCALAR_DIVISIONS",
    "ZERO_POINT_DOMAINS",
    "affine",
]

MAPPINGS: tuple[str, ...] = ("symmetric", "symmetric_no_clipping_err", "asymmetric")
"""torchao ``MappingType`` values."""
ZERO_POINT_DOMAINS: tuple[str, ...] = ("int", "none", "float")
"""torchao ``ZeroPointDomain`` values: an integer zero point, none, or tinygemm's float zero."""
QUANT_DTYPES: tuple[str, ...] = ("int8", "int4", "uint4")
"""Targets: int8 -128..127, int4 -8..7 (torchao: int8 storage with quant_min/max), uint4 0..15."""
EPS_CHOICES: tuple[str | float, ...] = ("smallest_normal", "epsilon", 1e-6)
"""The scale's lower bound: ``finfo(arithmetic).smallest_normal`` (torchao >= 0.12's default),
``finfo(arithmetic).eps`` (torchao <= 0.11's default for ``choose_qparams_affine``) or a number
(1e-6: torchao <= 0.8 ``int4_weight_only`` and ``get_groupwise_affine_qparams``)."""
SCALAR_DIVISIONS: tuple[str, ...] = ("divide", "reciprocal")
"""How torch divides a tensor by a Python number: IEEE division (CPU), or a multiply by
``float32(1 / c)`` (CUDA: ``div_true_kernel_cuda`` for a CPU-scalar divisor)."""

_RANGES = {"int8": (-128, 127), "int4": (-8, 7), "uint4": (0, 15)}
_FINFO = {  # smallest normal, eps (torch.finfo)
    "float32": {"smallest_normal": 2.0**-126, "epsilon": 2.0**-23},
    "bfloat16": {"smallest_normal": 2.0**-126, "epsilon": 2.0**-7},
    "float16": {"smallest_normal": 2.0**-14, "epsilon": 2.0**-10},
}
_F32 = np.float32


def affine(
    x: np.ndarray,
    *,
    mapping: str,
    zero_point_domain: str,
    dtype: str,
    block_rows: int,
    block_cols: int,
    eps: str | float = "smallest_normal",
    arithmetic: str = "float32",
    scalar_division: str = "divide",
) -> dict[str, np.ndarray]:
    """Choose per-group quantization parameters and quantize ``x`` with them (torchao semantics).

    Contract
    --------
    ``quant.affine``: the module docstring's formulas, evaluated op by op in ``arithmetic``.

    Source
    ------
    torchao ``choose_qparams_affine`` + ``quantize_affine`` (``int``), the same with
    ``_quantize_affine_no_zero_point`` (``none``), ``_choose_qparams_affine_tinygemm`` +
    ``_quantize_affine_tinygemm`` (``float``); ``specs/quant/affine.yaml``.

    Encoding
    --------
    ``x``: float32 ``[R, C]`` (bfloat16 and float16 values arrive as float32, exactly).  Outputs:

    - ``q``: uint8 ``[R, C]``, the two's complement bits of the target (int8: the byte, int4: the
      low nibble, -8 -> 0x8; uint4: 0..15), as ``cast.int``;
    - ``scale``: float32 ``[R/block_rows, C/block_cols]`` holding a value of ``arithmetic``;
    - ``zero_point`` (``int``): uint8 codes of the integer zero point, encoded as ``q``;
    - ``zero`` (``float``): float32 values of ``arithmetic``.

    Edge cases
    ----------
    A group of zeros gets ``scale = eps`` (rounded to ``arithmetic``); ``x`` is finite (NaN and
    ±Inf raise: the result would depend on how an implementation converts NaN to an integer);
    ``R == 0`` or ``C == 0`` give empty outputs.

    Raises ``ValueError`` for an unknown ``mapping``, ``zero_point_domain``, ``dtype``,
    ``arithmetic`` or ``eps``, ``zero_point_domain="float"`` with a symmetric mapping (torchao
    supports it for ``asymmetric`` only), block sizes below 1 or not dividing ``x``'s shape, a
    non-finite ``x`` (after rounding to ``arithmetic``), non-finite parameters (a group range
    that overflows float16) or a ``1.0 / scale`` that overflows (float16 with ``eps`` below
    ``2**-16``: torchao multiplies a zero by Inf); ``TypeError`` unless ``x`` is a 2-D float32 or
    float16 array.
    """
    check_choice("mapping", mapping, MAPPINGS)
    check_choice("zero_point_domain", zero_point_domain, ZERO_POINT_DOMAINS)
    check_choice("dtype", dtype, QUANT_DTYPES)
    check_choice("arithmetic", arithmetic, ARITHMETIC_DTYPES)
    check_choice("scalar_division", scalar_division, SCALAR_DIVISIONS)
    if zero_point_domain == "float" and mapping != "asymmetric":
        raise ValueError(
            f"Got zero_point_domain='float' and mapping={mapping!r}, but the float (tinygemm) zero-point "
            "domain needs mapping='asymmetric'"
        )
    eps_value = _eps(eps, arithmetic)
    x = _to_arithmetic(x, arithmetic, block_rows, block_cols)
    qmin, qmax = _RANGES[dtype]

    def rnd(values: np.ndarray) -> np.ndarray:
        return to_dtype(values, arithmetic)

    def divide(values: np.ndarray, constant: float) -> np.ndarray:
        """``tensor / constant`` (a Python number): IEEE division, or a float32 reciprocal (torch on CUDA)."""
        if scalar_division == "divide":
            return rnd(values / _F32(constant))
        return rnd(values * (_F32(np.inf) if constant == 0 else _F32(1.0 / constant)))

    groups = _grouped(x, block_rows, block_cols)  # [R/br, br, C/bc, bc]
    min_val, max_val = groups.min(axis=(1, 3)), groups.max(axis=(1, 3))
    outputs: dict[str, np.ndarray] = {}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if zero_point_domain == "float":
            scale = np.maximum(divide(rnd(max_val - min_val), qmax - qmin), eps_value)
            mid = _F32((qmax + qmin + 1) / 2)
            zero = rnd(min_val + rnd(scale * mid))
            _check_finite(scale, zero, arithmetic)
            min_from_zero = _expand(rnd(zero - rnd(scale * mid)), block_rows, block_cols)
            integers = np.rint(rnd(rnd(x - min_from_zero) / _expand(scale, block_rows, block_cols)))
            outputs["zero"] = zero
        else:
            scale, zero_point = _int_qparams(min_val, max_val, mapping, qmin, qmax, eps_value, rnd, divide)
            _check_finite(scale, zero_point, arithmetic)
            reciprocal = rnd(_F32(1.0) / scale)
            if not np.isfinite(reciprocal).all():
                raise ValueError(
                    f"Got eps={eps!r} with arithmetic={arithmetic!r}, but 1.0 / scale overflows {arithmetic} for a "
                    f"scale clamped to eps={float(eps_value)!r} (torchao then multiplies 0 by Inf: NaN codes); "
                    "use a larger eps"
                )
            reciprocal = _expand(reciprocal, block_rows, block_cols)
            integers = np.rint(rnd(x * reciprocal))
            if zero_point_domain == "int":
                integers = rnd(integers + _expand(zero_point, block_rows, block_cols))
                outputs["zero_point"] = _codes(zero_point, dtype)
    q = np.clip(integers, qmin, qmax)
    return {"q": _codes(q, dtype), "scale": scale, **outputs}


def _int_qparams(
    min_val: np.ndarray,
    max_val: np.ndarray,
    mapping: str,
    qmin: int,
    qmax: int,
    eps: np.float32,
    rnd: Callable[[np.ndarray], np.ndarray],
    divide: Callable[[np.ndarray, float], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """``choose_qparams_affine``: scale and the integer zero point (as float32 integers)."""
    zeros = np.zeros_like(min_val)
    min_neg, max_pos = np.minimum(min_val, zeros), np.maximum(max_val, zeros)
    if mapping == "asymmetric":
        scale = np.maximum(divide(rnd(max_pos - min_neg), qmax - qmin), eps)
        zero_point = np.clip(rnd(_F32(qmin) - np.rint(rnd(min_neg / scale))), qmin, qmax)
        return scale, zero_point
    if mapping == "symmetric":
        scale = divide(np.maximum(-min_neg, max_pos), (qmax - qmin) / 2)
    else:
        smin, smax = divide(min_neg, qmin), divide(max_pos, qmax)
        scale = np.where(smin > smax, smin, smax)
    zero_point = np.full_like(scale, int((qmax + qmin + 1) / 2))
    return np.maximum(scale, eps), zero_point


def _eps(eps: str | float, arithmetic: str) -> np.float32:
    """``eps`` as a value of ``arithmetic`` (the clamp compares in that dtype)."""
    if isinstance(eps, str):
        check_choice("eps", eps, ("smallest_normal", "epsilon"))
        return _F32(_FINFO[arithmetic][eps])
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or not np.isfinite(eps):
        raise ValueError(f"Got eps={eps!r}, but eps must be 'smallest_normal', 'epsilon' or a positive finite number")
    return _F32(to_dtype(np.array([eps], dtype=np.float32), arithmetic)[0])


def _to_arithmetic(x: np.ndarray, arithmetic: str, block_rows: int, block_cols: int) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise TypeError(f"Got x of dtype {got}, but x must be a float32 or float16 numpy.ndarray")
    if x.ndim != 2:
        raise ValueError(f"Got x.shape={x.shape}, but x must be 2-D [R, C]")
    for name, size, axis in (("block_rows", block_rows, 0), ("block_cols", block_cols, 1)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1 or x.shape[axis] % size:
            raise ValueError(
                f"Got {name}={size!r} and x.shape={x.shape}, but {name} must be a positive integer "
                f"that divides x.shape[{axis}]={x.shape[axis]}"
            )
    with np.errstate(over="ignore"):
        rounded = to_dtype(x.astype(np.float32), arithmetic)
    bad = np.argwhere(~np.isfinite(rounded))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"Got x[{i}, {j}]={float(x[i, j])!r}, but quant.affine needs finite x (in {arithmetic}): "
            "a NaN or infinite group has no defined integer result"
        )
    return rounded


def _check_finite(scale: np.ndarray, zero: np.ndarray, arithmetic: str) -> None:
    if not (np.isfinite(scale).all() and np.isfinite(zero).all()):
        raise ValueError(
            f"Got a group whose scale or zero is not finite in {arithmetic} arithmetic (its range overflows "
            f"{arithmetic}), but quant.affine needs finite parameters; quantize in a wider arithmetic"
        )


def _grouped(x: np.ndarray, block_rows: int, block_cols: int) -> np.ndarray:
    rows, cols = x.shape
    return x.reshape(rows // block_rows, block_rows, cols // block_cols, block_cols)


def _expand(per_group: np.ndarray, block_rows: int, block_cols: int) -> np.ndarray:
    """A ``[R/br, C/bc]`` array repeated over its groups: ``[R, C]``."""
    return np.repeat(np.repeat(per_group, block_rows, axis=0), block_cols, axis=1)


def _codes(values: np.ndarray, dtype: str) -> np.ndarray:
    """Integer values (float32, in range) as uint8 two's complement bit patterns of ``dtype``."""
    mask = 0xFF if dtype == "int8" else 0xF
    return (values.astype(np.int64) & mask).astype(np.uint8)
