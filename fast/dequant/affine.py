"""Groupwise affine dequantization as torchao defines it (contract ``dequant.affine``): torch ops on any device.

No kernel: each step is one torch op in float32 rounded to ``out_dtype``, as torchao's own code
runs (``_dequantize_affine``, ``_dequantize_affine_no_zero_point``, ``_dequantize_affine_tinygemm``),
with the float32 product of a float32 ``scale`` rounded once more to ``out_dtype``: the same bits on
every device.  Spec: ``specs/dequant/affine.yaml``; formulas in ``reference/dequant/affine.py``.
"""

from __future__ import annotations

import torch

from fast._checks import check_choice

__all__ = ["DEQUANT_DTYPES", "OUT_DTYPES", "ZERO_POINT_DOMAINS", "affine"]

DEQUANT_DTYPES: tuple[str, ...] = ("int8", "int4", "uint4")
ZERO_POINT_DOMAINS: tuple[str, ...] = ("int", "none", "float")
OUT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_RANGES = {"int8": (-128, 127), "int4": (-8, 7), "uint4": (0, 15)}


def affine(
    q: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None = None,
    zero: torch.Tensor | None = None,
    *,
    dtype: str,
    zero_point_domain: str,
    block_rows: int,
    block_cols: int,
    out_dtype: str = "float32",
) -> dict[str, torch.Tensor]:
    """Dequantize uint8 codes ``q`` ``[R, C]`` with per-group ``scale`` (``dequant.affine``).

    ``zero_point`` (uint8 codes of ``dtype``) for the ``int`` domain, ``zero`` (float32) for ``float``,
    neither for ``none``; parameters are ``[R/block_rows, C/block_cols]``.  Returns ``x``: float32
    holding values of ``out_dtype``.  Raises ``ValueError`` for unknown choices, block sizes that do
    not divide ``q``, an int4/uint4 code above 15, a zero point for another domain (or missing) and
    mismatched shapes; ``TypeError`` for tensors of other dtypes.
    """
    for name, value, allowed in (
        ("dtype", dtype, DEQUANT_DTYPES),
        ("zero_point_domain", zero_point_domain, ZERO_POINT_DOMAINS),
        ("out_dtype", out_dtype, OUT_DTYPES),
    ):
        check_choice(name, value, allowed)
    _check_dtype("q", q, torch.uint8)
    if q.dim() != 2:
        raise ValueError(f"Got q.shape={tuple(q.shape)}, but q must be 2-D [R, C]")
    for name, size, axis in (("block_rows", block_rows, 0), ("block_cols", block_cols, 1)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1 or q.shape[axis] % size:
            raise ValueError(
                f"Got {name}={size!r} and q.shape={tuple(q.shape)}, but {name} must be a positive integer "
                f"that divides q.shape[{axis}]={q.shape[axis]}"
            )
    groups = [q.shape[0] // block_rows, q.shape[1] // block_cols]
    _check_dtype("scale", scale, torch.float32)
    _check_shape("scale", scale, groups)
    expected = {"int": "zero_point", "float": "zero", "none": None}[zero_point_domain]
    for name, given in (("zero_point", zero_point), ("zero", zero)):
        if (given is not None) != (name == expected):
            need = f"needs {expected}=" if expected else "takes no zero point"
            raise ValueError(f"Got {name}={'a tensor' if given is not None else None}, but {zero_point_domain=} {need}")
    out = _TORCH_DTYPES[out_dtype]
    values = _values(q, "q", dtype)

    def expand(per_group: torch.Tensor) -> torch.Tensor:
        return per_group.repeat_interleave(block_rows, dim=0).repeat_interleave(block_cols, dim=1)

    s = expand(scale)
    if zero_point_domain == "int":
        assert zero_point is not None
        _check_dtype("zero_point", zero_point, torch.uint8)
        _check_shape("zero_point", zero_point, groups)
        d = values.to(out) - expand(_values(zero_point, "zero_point", dtype)).to(out)
        x = (d * s).to(out)  # float32 product (scale is float32), rounded to out
    elif zero_point_domain == "none":
        x = (values.to(out) * s).to(out)
    else:
        assert zero is not None
        _check_dtype("zero", zero, torch.float32)
        _check_shape("zero", zero, groups)
        qmin, qmax = _RANGES[dtype]
        d = (values - (qmax + qmin + 1) / 2).to(out)
        x = ((d * s).to(out) + expand(zero)).to(out)
    return {"x": x.to(torch.float32)}


def _check_dtype(name: str, value: object, dtype: torch.dtype) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor")
    if value.dtype != dtype:
        got, want = (str(d).removeprefix("torch.") for d in (value.dtype, dtype))
        raise TypeError(f"Got {name}.dtype={got}, but {name} must be {want}")


def _check_shape(name: str, value: torch.Tensor, groups: list[int]) -> None:
    if list(value.shape) != groups:
        raise ValueError(
            f"Got {name}.shape={tuple(value.shape)}, but {name} must be [R/block_rows, C/block_cols] = {groups}"
        )


def _values(codes: torch.Tensor, name: str, dtype: str) -> torch.Tensor:
    """The integers uint8 codes of ``dtype`` stand for, as float32 (exact)."""
    wide = codes.to(torch.int32)
    if dtype != "int8":
        bad = wide > 15
        if bool(bad.any()):
            i, j = (int(v) for v in bad.nonzero()[0])
            raise ValueError(f"Got {name}[{i}, {j}]={int(wide[i, j])}, but {dtype} codes are 0..15")
    if dtype == "int8":
        wide = torch.where(wide > 127, wide - 256, wide)
    elif dtype == "int4":
        wide = torch.where(wide > 7, wide - 16, wide)
    return wide.to(torch.float32)
