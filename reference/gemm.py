"""Matrix products (contracts ``gemm.scaled`` and ``group.gemm``): float64 sums, compared within a bound.

A GEMM kernel accumulates in its own order and precision, so these contracts are compared within a
per-element bound, not by bits.  Each reference returns ``out``, the exact product rounded once to the
output dtype, and ``abs_dot``, ``sum_k |a_k| |b_k|`` per output element in float64: the scale of the
rounding error of any summation order.  Summing ``n`` products (each exact) in any order with unit
roundoff ``u`` is off by at most ``(n - 1) u sum_k |a_k b_k|`` (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., §3.1, to first order), so the specs state their tolerance as
``atol + rtol |ref| + mtol abs_dot`` (``compare: bound``) and derive ``mtol`` from the accumulator and
the largest ``n`` their dims allow.

The float64 sums themselves are not exact: ``n`` additions of float64 values are off by at most
``(n - 1) 2**-53 abs_dot``, which is below every tolerance here by a factor of more than ``2**30``.

Contracts
---------
- ``gemm.scaled`` (:func:`scaled`): ``torch._scaled_mm`` of two FP8 operands with float32 dequant
  scales per tensor, per row, or per 1x128 / 128x128 block.
- ``group.gemm`` (:func:`grouped`): ``torch._grouped_mm``, one matmul per group of a grouped operand.
  A contract is found at ``reference.<family>.<operation>``, so ``reference.group`` exports this
  function as ``gemm``; it is not in this module's ``__all__`` for the same reason.

Source: ``torch._scaled_mm`` (pytorch/pytorch@2bec3bd:aten/src/ATen/native/cuda/ScaledBlas.cpp),
``torch._grouped_mm`` (torch >= 2.8, pytorch/pytorch@00d4eaf:aten/src/ATen/native/cuda/GroupedBlas.cpp; CPU
fallback from 2.9, pytorch#161407).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reference._checks import check_array, check_choice
from reference._opmath import bfloat16_from_float64, is_dtype_value
from reference.formats import get_format

__all__ = ["FORMS", "OUT_DTYPES", "SCALED_FORMATS", "SCALINGS", "scaled"]

FORMS: tuple[str, ...] = ("2d_3d", "2d_2d", "3d_2d")
"""The grouped forms: which operand is split into groups (``S`` = the sum of the group sizes).

- ``2d_3d``: ``a`` ``[S, K]`` split by rows, ``b`` ``[G, K, N]``; ``out`` ``[S, N]``, group ``g``'s rows
  ``a[s:e] @ b[g]`` (mixture-of-experts forward: tokens sorted by expert).
- ``2d_2d``: ``a`` ``[M, S]`` and ``b`` ``[S, N]`` split along ``K``; ``out`` ``[G, M, N]``,
  ``out[g] = a[:, s:e] @ b[s:e]`` (the weight gradient); an empty group gives zeros.
- ``3d_2d``: ``a`` ``[G, M, K]``, ``b`` ``[K, S]`` split by columns; ``out`` ``[M, S]``,
  ``out[:, s:e] = a[g] @ b[:, s:e]``.
"""
SCALINGS: tuple[str, ...] = ("tensorwise", "rowwise", "1x128", "128x128")
"""How one operand ``[rows, K]`` is scaled: one scale, one per row, one per 1x128 or per 128x128 block."""
SCALED_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
OUT_DTYPES: tuple[str, ...] = ("bfloat16", "float32")


def scaled(
    a: np.ndarray,
    b: np.ndarray,
    scale_a: np.ndarray,
    scale_b: np.ndarray,
    *,
    scaling_a: str,
    scaling_b: str,
    format_a: str = "float8_e4m3fn",
    format_b: str = "float8_e4m3fn",
    out_dtype: str = "bfloat16",
) -> dict[str, np.ndarray]:
    """``(a * scale_a) @ (b * scale_b).T`` of FP8 operands with float32 dequant scales: ``torch._scaled_mm``.

    Contract
    --------
    ``gemm.scaled``: ``out[m, n] = round(sum_k A[m, k] B[n, k])`` with the dequantized operands
    ``A[m, k] = a[m, k] * scale_a[m // R, k // C]`` (``(R, C)`` the block of ``scaling_a``:
    ``tensorwise`` the whole operand, ``rowwise`` ``(1, K)``, ``1x128`` ``(1, 128)``, ``128x128``
    ``(128, 128)``; partial blocks at the edges) and likewise ``B`` from ``b``, ``scale_b`` and
    ``scaling_b``.  Each ``A``, ``B`` and product is exact in float64; the sum is taken in float64
    and rounded once (nearest even) to ``out_dtype``, returned as float32 holding that value.
    ``abs_dot[m, n] = sum_k |A[m, k]| |B[n, k]|`` (float64) scales the tolerance (module docstring).

    Source
    ------
    ``torch._scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=...)`` with its scales as dequant
    multipliers (pytorch/pytorch@2bec3bd:aten/src/ATen/native/cuda/ScaledBlas.cpp); the scale layouts it wants are the
    backends' business: here every scale tensor is ``[ceil(rows/R), ceil(K/C)]``, row-major.

    Encoding
    --------
    ``a`` ``[M, K]`` holds values of ``format_a`` and ``b`` ``[N, K]`` values of ``format_b`` (the weight,
    row-major: ``torch._scaled_mm``'s column-major second operand is its transpose), both in float32
    carriers: every FP8 value is a float32 value, and a backend casts them to FP8 exactly.  (Drawn as
    values, not as uint8 codes, so that no NaN code poisons a whole row of a random case.)
    ``scale_a`` float32 ``[1, 1]`` (``tensorwise``), ``[M, 1]`` (``rowwise``), ``[M, ceil(K/128)]``
    (``1x128``) or ``[ceil(M/128), ceil(K/128)]`` (``128x128``); ``scale_b`` alike with ``N``.

    Edge cases
    ----------
    NaN operands or scales give NaN in the rows and columns they reach (and ``0 * inf`` NaN); a sum
    beyond the output's range rounds to +-Inf; ``K = 0`` gives zeros.

    Raises ``ValueError`` for an unknown scaling, format or ``out_dtype``, operands that are not
    2-D with one ``K``, operands holding values outside their format (naming the first), or scales of
    another shape; ``TypeError`` for operands or scales that are not float32.
    """
    check_choice("scaling_a", scaling_a, SCALINGS)
    check_choice("scaling_b", scaling_b, SCALINGS)
    check_choice("format_a", format_a, SCALED_FORMATS)
    check_choice("format_b", format_b, SCALED_FORMATS)
    check_choice("out_dtype", out_dtype, OUT_DTYPES)
    check_array("a", a, (np.float32,))
    check_array("b", b, (np.float32,))
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"Got a.shape={a.shape} and b.shape={b.shape}, but they must be [M, K] and [N, K]")
    dequant_a = _dequantize("a", a, scale_a, format_a, scaling_a)
    dequant_b = _dequantize("b", b, scale_b, format_b, scaling_b)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = dequant_a @ dequant_b.T
        abs_dot = np.abs(dequant_a) @ np.abs(dequant_b).T
        out = bfloat16_from_float64(exact) if out_dtype == "bfloat16" else exact.astype(np.float32)
    return {"out": out, "abs_dot": abs_dot}


def grouped(
    a: np.ndarray, b: np.ndarray, *, form: str, groups: int, group_sizes: Sequence[int]
) -> dict[str, np.ndarray]:
    """One bfloat16 matmul per group of a grouped operand: ``torch._grouped_mm`` (``group.gemm``).

    Contract
    --------
    ``group.gemm``: with ``offs = cumsum(group_sizes)`` (torch's cumulative int32 end offsets; group
    ``g`` spans ``[offs[g-1], offs[g])``, ``offs[-1] = 0``), each group's product as :data:`FORMS`
    describes for ``form``, every element summed in float64 (the products of bfloat16 values are
    exact) and rounded once to bfloat16, nearest even.  Empty groups are allowed: they own no rows
    or columns (``2d_3d``, ``3d_2d``), or give a zero matrix (``2d_2d``).  ``abs_dot`` is
    ``sum_k |a| |b|`` per output element (float64) and scales the tolerance (module docstring).

    Source
    ------
    ``torch._grouped_mm(a, b, offs=offs)`` (bfloat16 in, float32 accumulation, bfloat16 out);
    pytorch/pytorch@00d4eaf:aten/src/ATen/native/cuda/GroupedBlas.cpp.  TransformerEngine's ``GroupedLinear``
    runs the same products as one GEMM per expert (``m_splits`` = the group sizes).

    Encoding
    --------
    ``a`` and ``b`` hold bfloat16 values (float32 carriers) of the shapes of :data:`FORMS`;
    ``groups`` is ``G``; ``group_sizes`` the ``G`` sizes along the split axis (rows of ``a``,
    ``K``, or columns of ``b``).

    Edge cases
    ----------
    NaN and Inf propagate as in any sum of products; a sum beyond bfloat16's range rounds to +-Inf.

    Raises ``ValueError`` for an unknown ``form``, ``groups`` < 1, ``group_sizes`` of another length
    or with a negative size (naming the group), or operands whose shapes disagree with the form and
    the sizes (naming the axis and the sum); ``TypeError`` for operands that are not bfloat16 values.
    """
    offs = _offsets(form, groups, group_sizes)
    _check_bfloat16("a", a)
    _check_bfloat16("b", b)
    total = int(offs[-1])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    _check_ranks(a, b, form)
    if form == "2d_3d":
        _check_sizes(a, b, form, [("a.shape[0]", a.shape[0], total, "sum(group_sizes)"),
                                  ("b.shape[0]", b.shape[0], groups, "groups"),
                                  ("a.shape[1]", a.shape[1], b.shape[1], "b.shape[1] (K)")])  # fmt: skip
        out = np.zeros((total, b.shape[2]))
        abs_dot = np.zeros_like(out)
        for g, (s, e) in enumerate(_spans(offs)):
            out[s:e] = a64[s:e] @ b64[g]
            abs_dot[s:e] = np.abs(a64[s:e]) @ np.abs(b64[g])
    elif form == "2d_2d":
        _check_sizes(a, b, form, [("a.shape[1]", a.shape[1], total, "sum(group_sizes)"),
                                  ("b.shape[0]", b.shape[0], total, "sum(group_sizes)")])  # fmt: skip
        out = np.zeros((groups, a.shape[0], b.shape[1]))
        abs_dot = np.zeros_like(out)
        for g, (s, e) in enumerate(_spans(offs)):
            out[g] = a64[:, s:e] @ b64[s:e]
            abs_dot[g] = np.abs(a64[:, s:e]) @ np.abs(b64[s:e])
    else:
        _check_sizes(a, b, form, [("b.shape[1]", b.shape[1], total, "sum(group_sizes)"),
                                  ("a.shape[0]", a.shape[0], groups, "groups"),
                                  ("a.shape[2]", a.shape[2], b.shape[0], "b.shape[0] (K)")])  # fmt: skip
        out = np.zeros((a.shape[1], total))
        abs_dot = np.zeros_like(out)
        for g, (s, e) in enumerate(_spans(offs)):
            out[:, s:e] = a64[g] @ b64[:, s:e]
            abs_dot[:, s:e] = np.abs(a64[g]) @ np.abs(b64[:, s:e])
    with np.errstate(invalid="ignore", over="ignore"):
        return {"out": bfloat16_from_float64(out), "abs_dot": abs_dot}


# -- helpers ----------------------------------------------------------------------------------
_BLOCK = 128


def _scale_shape(scaling: str, rows: int, k: int) -> tuple[int, int]:
    k_blocks = -(-k // _BLOCK)
    return {
        "tensorwise": (1, 1),
        "rowwise": (rows, 1),
        "1x128": (rows, k_blocks),
        "128x128": (-(-rows // _BLOCK), k_blocks),
    }[scaling]


def _dequantize(name: str, values: np.ndarray, scale: np.ndarray, fmt: str, scaling: str) -> np.ndarray:
    """float64 ``values * scale`` of each element's block (exact: 4 x 24 significant bits)."""
    table = get_format(fmt).decode_table
    outside = ~(np.isin(values, table[~np.isnan(table)]) | np.isnan(values))
    if outside.any():
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        raise ValueError(f"Got {name}{list(index)}={float(values[index])!r}, but {name} must hold {fmt} values")
    rows, k = values.shape
    check_array(f"scale_{name}", scale, (np.float32,))
    expected = _scale_shape(scaling, rows, k)
    if scale.shape != expected:
        raise ValueError(
            f"Got scale_{name}.shape={scale.shape}, but scaling_{name}={scaling!r} needs {list(expected)} "
            f"for {name}.shape={values.shape}"
        )
    row_block = {"tensorwise": max(rows, 1), "rowwise": 1, "1x128": 1, "128x128": _BLOCK}[scaling]
    k_block = max(k, 1) if scaling in ("tensorwise", "rowwise") else _BLOCK
    per_element = scale.astype(np.float64)[np.arange(rows)[:, None] // row_block, np.arange(k)[None, :] // k_block]
    with np.errstate(invalid="ignore"):
        return values.astype(np.float64) * per_element


def _offsets(form: str, groups: int, group_sizes: Sequence[int]) -> np.ndarray:
    """``cumsum(group_sizes)`` as int64, after checking the form, the count and every size."""
    check_choice("form", form, FORMS)
    if type(groups) is not int or groups < 1:
        raise ValueError(f"Got groups={groups!r}, but groups must be an int >= 1")
    sizes = list(group_sizes)
    if len(sizes) != groups:
        raise ValueError(f"Got group_sizes={tuple(sizes)} ({len(sizes)} sizes), but groups={groups} needs {groups}")
    for g, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(
                f"Got group_sizes[{g}]={size!r}, but group {g}'s size must be an int >= 0 "
                "(the end offsets cumsum(group_sizes) must not decrease)"
            )
    return np.cumsum(np.array(sizes, dtype=np.int64))


def _spans(offs: np.ndarray) -> list[tuple[int, int]]:
    starts = np.concatenate([[0], offs[:-1]])
    return [(int(s), int(e)) for s, e in zip(starts, offs, strict=True)]


def _check_bfloat16(name: str, value: object) -> None:
    """``TypeError`` unless ``value`` holds bfloat16 values (in a float32 carrier)."""
    if not isinstance(value, np.ndarray) or value.dtype != np.float32 or not is_dtype_value(value, "bfloat16").all():
        got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise TypeError(f"Got {name} of dtype {got} with values that are not bfloat16, but {name} must be bfloat16")


_SHAPES = {
    "2d_3d": "a [sum(group_sizes), K] and b [groups, K, N]",
    "2d_2d": "a [M, sum(group_sizes)] and b [sum(group_sizes), N]",
    "3d_2d": "a [groups, M, K] and b [K, sum(group_sizes)]",
}


def _check_ranks(a: np.ndarray, b: np.ndarray, form: str) -> None:
    ranks = {"2d_3d": (2, 3), "2d_2d": (2, 2), "3d_2d": (3, 2)}[form]
    if (a.ndim, b.ndim) != ranks:
        raise ValueError(
            f"Got a.shape={a.shape} and b.shape={b.shape}, but form={form!r} takes {_SHAPES[form]} "
            f"({ranks[0]}-D and {ranks[1]}-D)"
        )


def _check_sizes(a: np.ndarray, b: np.ndarray, form: str, sizes: list[tuple[str, int, int, str]]) -> None:
    """``ValueError`` naming the first ``(axis, got, expected, meaning)`` that disagrees."""
    for axis, got, want, meaning in sizes:
        if got != want:
            raise ValueError(
                f"Got a.shape={a.shape} and b.shape={b.shape}: {axis}={got}, but it must be {meaning} = {want}; "
                f"form={form!r} takes {_SHAPES[form]}"
            )
