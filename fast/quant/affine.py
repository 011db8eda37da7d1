"""Groupwise affine quantization as torchao defines it (contract ``quant.affine``): torch ops on any device.

There is no kernel: the contract is torchao's sequence of torch ops in the arithmetic dtype, and
torch evaluates each of them the same way on the CPU and on CUDA (a float32 op rounded once to
the tensor's dtype) -- except a tensor divided by a Python number, which CUDA turns into a multiply
by ``float32(1 / c)``.  So those divisions are written out explicitly for the declared
``scalar_division`` (an IEEE division by a float32 tensor, or a multiply by the float32 reciprocal)
and give the same bits on every device.  Spec: ``specs/quant/affine.yaml``; formulas in
``reference/quant/affine.py``'s docstring.
"""

from __future__ import annotations

import torch

from fast._checks import check_choice

__all__ = ["ARITHMETIC_DTYPES", "MAPPINGS", "QUANT_DTYPES", "SCALAR_DIVISIONS", "ZERO_POINT_DOMAINS", "affine"]

MAPPINGS: tuple[str, ...] = ("symmetric", "symmetric_no_clipping_err", "asymmetric")
ZERO_POINT_DOMAINS: tuple[str, ...] = ("int", "none", "float")
QUANT_DTYPES: tuple[str, ...] = ("int8", "int4", "uint4")
ARITHMETIC_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
SCALAR_DIVISIONS: tuple[str, ...] = ("divide", "reciprocal")

_TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_RANGES = {"int8": (-128, 127), "int4": (-8, 7), "uint4": (0, 15)}
_EPS_NAMES = ("smallest_normal", "epsilon")


def affine(
    x: torch.Tensor,
    *,
    mapping: str,
    zero_point_domain: str,
    dtype: str,
    block_rows: int,
    block_cols: int,
    eps: str | float = "smallest_normal",
    arithmetic: str = "float32",
    scalar_division: str = "divide",
) -> dict[str, torch.Tensor]:
    """Choose per-group quantization parameters and quantize ``x`` (torchao semantics, ``quant.affine``).

    ``x``: float32, bfloat16 or float16 ``[R, C]``, rounded to ``arithmetic`` first.  Returns ``q``
    (uint8 two's complement codes of ``dtype``), ``scale`` (float32 holding ``arithmetic`` values,
    ``[R/block_rows, C/block_cols]``), and ``zero_point`` (uint8 codes, ``int`` domain) or ``zero``
    (float32, ``float`` domain), on ``x``'s device.

    Raises ``ValueError`` for unknown choices, the float domain with a symmetric mapping, block sizes
    that do not divide ``x``, a non-finite ``x`` (after rounding) or parameters, or ``1.0 / scale``
    overflowing; ``TypeError`` unless ``x`` is a float32, bfloat16 or float16 tensor.
    """
    for name, value, allowed in (
        ("mapping", mapping, MAPPINGS),
        ("zero_point_domain", zero_point_domain, ZERO_POINT_DOMAINS),
        ("dtype", dtype, QUANT_DTYPES),
        ("arithmetic", arithmetic, ARITHMETIC_DTYPES),
        ("scalar_division", scalar_division, SCALAR_DIVISIONS),
    ):
        check_choice(name, value, allowed)
    if zero_point_domain == "float" and mapping != "asymmetric":
        raise ValueError(
            f"Got zero_point_domain='float' and mapping={mapping!r}, but the float (tinygemm) zero-point "
            "domain needs mapping='asymmetric'"
        )
    compute = _TORCH_DTYPES[arithmetic]
    eps_value = _eps(eps, compute)
    x = _checked(x, block_rows, block_cols).to(compute)
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        i, j = (int(v) for v in bad.nonzero()[0])
        raise ValueError(
            f"Got x[{i}, {j}]={float(x[i, j])!r}, but quant.affine needs finite x (in {arithmetic}): "
            "a NaN or infinite group has no defined integer result"
        )
    qmin, qmax = _RANGES[dtype]
    rows, cols = x.shape

    def divide(values: torch.Tensor, constant: float) -> torch.Tensor:
        """``values / constant`` as ``scalar_division`` says, then rounded to ``compute``."""
        wide = values.to(torch.float32)
        if scalar_division == "divide":
            return (wide / torch.tensor(constant, dtype=torch.float32, device=x.device)).to(compute)
        inverse = float("inf") if constant == 0 else 1.0 / constant  # C++: 1.0 / 0.0 is +Inf
        return (wide * torch.tensor(inverse, dtype=torch.float32, device=x.device)).to(compute)

    def expand(per_group: torch.Tensor) -> torch.Tensor:
        return per_group.repeat_interleave(block_rows, dim=0).repeat_interleave(block_cols, dim=1)

    groups = x.view(rows // block_rows, block_rows, cols // block_cols, block_cols)
    min_val, max_val = torch.amin(groups, dim=(1, 3)), torch.amax(groups, dim=(1, 3))
    outputs: dict[str, torch.Tensor] = {}
    if zero_point_domain == "float":
        scale = torch.clamp(divide(max_val - min_val, qmax - qmin), min=eps_value)
        mid = (qmax + qmin + 1) / 2
        zero = min_val + scale * mid
        _check_finite(scale, zero, arithmetic)
        min_from_zero = zero - scale * mid
        integers = torch.round((x - expand(min_from_zero)) / expand(scale))
        outputs["zero"] = zero.to(torch.float32)
    else:
        min_neg = torch.minimum(min_val, torch.zeros_like(min_val))
        max_pos = torch.maximum(max_val, torch.zeros_like(max_val))
        if mapping == "asymmetric":
            scale = torch.clamp(divide(max_pos - min_neg, qmax - qmin), min=eps_value)
            zero_point = torch.clamp(qmin - torch.round(min_neg / scale), qmin, qmax)
        else:
            if mapping == "symmetric":
                scale = divide(torch.maximum(-min_neg, max_pos), (qmax - qmin) / 2)
            else:
                smin, smax = divide(min_neg, qmin), divide(max_pos, qmax)
                scale = torch.where(smin > smax, smin, smax)
            zero_point = torch.full_like(scale, int((qmax + qmin + 1) / 2))
            scale = torch.clamp(scale, min=eps_value)
        _check_finite(scale, zero_point, arithmetic)
        reciprocal = torch.reciprocal(scale)
        if not bool(torch.isfinite(reciprocal).all()):
            raise ValueError(
                f"Got eps={eps!r} with arithmetic={arithmetic!r}, but 1.0 / scale overflows {arithmetic} for a "
                f"scale clamped to eps={eps_value!r} (torchao then multiplies 0 by Inf: NaN codes); use a larger eps"
            )
        integers = torch.round(x * expand(reciprocal))
        if zero_point_domain == "int":
            integers = integers + expand(zero_point)
            outputs["zero_point"] = _codes(zero_point, dtype)
    q = torch.clamp(integers, qmin, qmax)
    return {"q": _codes(q, dtype), "scale": scale.to(torch.float32), **outputs}


def _eps(eps: str | float, compute: torch.dtype) -> float:
    """``eps`` rounded to the arithmetic dtype, as a Python float (the clamp compares in that dtype)."""
    if isinstance(eps, str):
        if eps not in _EPS_NAMES:
            raise ValueError(f"Got eps={eps!r}, but eps must be one of {list(_EPS_NAMES)} or a positive number")
        info = torch.finfo(compute)
        return float(info.smallest_normal if eps == "smallest_normal" else info.eps)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or eps == float("inf"):
        raise ValueError(f"Got eps={eps!r}, but eps must be 'smallest_normal', 'epsilon' or a positive finite number")
    return float(torch.tensor(float(eps), dtype=torch.float32).to(compute).item())


def _checked(x: object, block_rows: int, block_cols: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    if x.dtype not in _TORCH_DTYPES.values():
        raise TypeError(
            f"Got x.dtype={str(x.dtype).removeprefix('torch.')}, but x must be float32, bfloat16 or float16"
        )
    if x.dim() != 2:
        raise ValueError(f"Got x.shape={tuple(x.shape)}, but x must be 2-D [R, C]")
    for name, size, axis in (("block_rows", block_rows, 0), ("block_cols", block_cols, 1)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1 or x.shape[axis] % size:
            raise ValueError(
                f"Got {name}={size!r} and x.shape={tuple(x.shape)}, but {name} must be a positive integer "
                f"that divides x.shape[{axis}]={x.shape[axis]}"
            )
    return x.contiguous()


def _check_finite(scale: torch.Tensor, zero: torch.Tensor, arithmetic: str) -> None:
    if not (bool(torch.isfinite(scale).all()) and bool(torch.isfinite(zero).all())):
        raise ValueError(
            f"Got a group whose scale or zero is not finite in {arithmetic} arithmetic (its range overflows "
            f"{arithmetic}), but quant.affine needs finite parameters; quantize in a wider arithmetic"
        )


def _codes(values: torch.Tensor, dtype: str) -> torch.Tensor:
    """Integer-valued floats in range -> uint8 two's complement codes of ``dtype``."""
    return (values.to(torch.int32) & (0xFF if dtype == "int8" else 0xF)).to(torch.uint8)
