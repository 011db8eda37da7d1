"""FP8 blockwise scaling, DeepSeek style (contract ``quant.fp8_block``): one fused Triton kernel for CUDA and a
torch path for the rest.

Contract
--------
``quant.fp8_block`` (:func:`fp8_block`), TransformerEngine's ``Float8BlockScaling``: ``x`` ``[*rest, K]`` viewed
as ``[M, K]``; per 1x128 block of a row (and, for the columnwise copy, per 128x1 block of a column) or per
128x128 tile, ``amax = max|x|`` (NaN ignored, tail elements missing), the scale of
``fast.quant.fp8.scale_from_amax`` with ``value_for_inf`` the input dtype's max, ``scale_inv = 1 / scale``
and ``satfinite_rne(fl32(x * scale))``.  Spec: ``specs/quant/fp8_block.yaml``.

Layouts (GEMM-ready, as TE allocates them; scale padding is left unwritten)
-------------------------------------------------------------------------
- ``data`` ``[*rest, K]`` uint8; ``columnwise_data`` ``[K, *rest]`` uint8 (the columnwise blocks, stored
  transposed so that they run along its rows; for 128x128 it is the transpose of ``data``).
- 1x128: ``scale_inv`` ``[ceil(K/128), roundup(M, 4)]`` float32 with (row r, block b) at ``[b, r]``
  (TE stores the rowwise scales transposed, "GEMM_READY"); ``columnwise_scale_inv``
  ``[ceil(M/128), roundup(K, 4)]`` with (row block b, column k) at ``[b, k]``.
- 128x128: ``scale_inv`` ``[ceil(M/128), roundup(ceil(K/128), 4)]`` with tile (i, j) at ``[i, j]``;
  ``columnwise_scale_inv`` ``[ceil(K/128), roundup(ceil(M/128), 4)]`` with tile (i, j) at ``[j, i]``.

The kernel
----------
One program per tile of ``x`` (a 1-D grid, K-tiles of a row band first); ``TILES`` gives each (block, usage) its
``(BLOCK_M, BLOCK_K, num_warps)``.  A program reads its tile once (widened to float32 with
``fast._triton.float32_bits``) and computes every output from those registers: ``|x|`` with NaN as 0, the
block amaxes (rows of 128 columns, columns of 128 rows, or the whole 128x128 tile), the scales, the codes of
each copy, and the stores -- the columnwise codes through ``tl.trans``, so that each column block is written
as one contiguous 128-byte run of ``columnwise_data``.  Tiles that lie inside ``x`` (``EVEN``) load and store
without masks.  Scales come from ``fast.quant.fp8.scale_from_amax`` (powers of two without a division;
float32 scales by one correctly rounded float32 division) and ``reciprocal``; the codes from
``fast.quant.fp8.fp8_code`` (the hardware ``cvt.rn.satfinite`` on CUDA, integer arithmetic in the interpreter:
``fast/quant/fp8.py``).  Bytes moved from HBM: the input once, each copy's codes once, the scales (1/128 or
1/16384 of the elements).
Tiles and warps come from an H200 sweep at bfloat16 8192x8192 (``TILES``), every candidate checked bit for
bit against the previous kernel.  On CUDA, 1x128 both on whole tiles runs instead the Gluon kernel of
``fast.quant.fp8_blockwise_gluon`` (same device functions, same bytes), whose explicit layout stores the
transposed copy straight from registers (H100, bfloat16 8192x8192: 0.1030 -> 0.1000 ms).
After the first call of a shape and recipe, the compiled kernel is launched directly (``_LAUNCHES``), without
the ``JITFunction``'s per-call host work.

Paths are chosen by ``QCONFORM_FAST_PATH`` as in ``fast/cast.py``.  This module imports without Triton
and queries no device at import time.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import numpy as np
import torch

from fast._triton import LaunchCache, device, device_modes, float32_bits, jit, selected_path, tl, triton
from fast.quant.fp8 import (
    DTYPE_MAX,
    FORMAT_META,
    FORMATS,
    FP8_FORMATS,
    INPUT_IDS,
    USAGES,
    check_choice,
    check_epsilon,
    check_x,
    dtype_name,
    fp8_code,
    quiet_interpreter,
    reciprocal,
    rounding_core,
    scale_from_amax,
    torch_abs_no_nan,
    torch_reciprocal,
    torch_scale_from_amax,
)

__all__ = ["BLOCKS", "TILES", "bench", "fp8_block", "quantize_tile"]

BLOCKS: tuple[str, ...] = ("1x128", "128x128")
TILE = 128


# %% Compute kernel


@device
def _load_rows(x_ptr, rows, cols, M, K, INPUT: tl.constexpr, EVEN: tl.constexpr):
    """float32 values of ``x[rows][:, cols]`` (0 outside ``[M, K]``; EVEN: the tile lies inside, no mask)."""
    pointers = x_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :]
    in_range = (rows < M)[:, None] & (cols < K)[None, :]
    raw = tl.load(pointers) if EVEN else tl.load(pointers, mask=in_range, other=0)
    _, bits = float32_bits(raw, INPUT)
    return bits.to(tl.float32, bitcast=True)


@device
def _store_tile(pointers, code, first, second, first_size, second_size, EVEN: tl.constexpr):
    """Store ``code`` at ``pointers`` (a 2-D tile whose axes run over ``first`` and ``second``), masked unless EVEN."""
    if EVEN:
        tl.store(pointers, code)
    else:
        tl.store(pointers, code, mask=(first < first_size)[:, None] & (second < second_size)[None, :])


@device
def _amax_interpreted(value, AXIS: tl.constexpr):
    """:func:`_amax` under the interpreter: ``|value|`` with NaN as 0, then the maximum."""
    return tl.max(tl.where(value == value, tl.abs(value), 0.0), axis=AXIS)


@device_modes(interpreted=_amax_interpreted)
def _amax(value, AXIS: tl.constexpr):
    """Block maxima of ``|value|`` along AXIS, NaN ignored (missing elements load as 0; an all-NaN block gives 0).

    Compiled: ``max.f32`` of ``|x|`` (a NaN operand loses; the absolute value is a free operand modifier, so no
    magnitude tensor is kept in registers), then ``max.f32`` with 0, which takes an all-NaN block's NaN to 0.
    Interpreted: :func:`_amax_interpreted` (NumPy's maximum propagates NaN).
    """
    return tl.maximum(tl.max(tl.abs(value), axis=AXIS), 0.0)


def _fp8_block_kernel(
    # pointers
    x_ptr,
    data_ptr,
    scale_inv_ptr,
    columnwise_ptr,
    columnwise_scale_inv_ptr,
    # sizes: x viewed as [M, K]; row strides of the two scale layouts
    M,
    K,
    SCALE_STRIDE,
    COLUMNWISE_SCALE_STRIDE,
    # scale rule
    epsilon,
    value_for_inf,
    FP8_MAX: tl.constexpr,
    POW2: tl.constexpr,
    # format and rounding core
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_BITS: tl.constexpr,
    MAGIC: tl.constexpr,
    CORE: tl.constexpr,
    # recipe, outputs and input width
    TWO_D: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLWISE: tl.constexpr,
    INPUT: tl.constexpr,
    # tiling: programs of BLOCK_M rows (128 where column blocks or 128x128 tiles are cast) by BLOCK_K columns
    # (128 where rowwise blocks or 128x128 tiles are cast); EVEN: every tile lies inside x (no masks)
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr,
):
    k_tiles = tl.maximum(tl.cdiv(K, BLOCK_K), 1)
    quantize_tile(
        x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, tl.program_id(0) // k_tiles,
        tl.program_id(0) % k_tiles, M, K, SCALE_STRIDE, COLUMNWISE_SCALE_STRIDE, epsilon, value_for_inf, FP8_MAX,
        POW2, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE, TWO_D, ROWWISE, COLWISE, INPUT, BLOCK_M, BLOCK_K,
        EVEN,
    )  # fmt: skip


@device
def quantize_tile(
    x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, pid_m, pid_k, M, K, SCALE_STRIDE,
    COLUMNWISE_SCALE_STRIDE, epsilon, value_for_inf, FP8_MAX: tl.constexpr, POW2: tl.constexpr,
    MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr, MAX_BITS: tl.constexpr,
    MAGIC: tl.constexpr, CORE: tl.constexpr, TWO_D: tl.constexpr, ROWWISE: tl.constexpr, COLWISE: tl.constexpr,
    INPUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    """Every output of tile ``(pid_m, pid_k)`` of ``x`` ``[M, K]`` (the kernel's arguments, module docstring).

    The tile is read once; every output (rowwise and columnwise codes, their scales) comes from its registers.
    ``fast.group``'s grouped kernel calls this on each member's tiles with the member's pointers and strides.
    """
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    value = _load_rows(x_ptr, rows, cols, M, K, INPUT, EVEN)
    data_ptrs = data_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :]
    if TWO_D:  # one scale for the tile
        amax = tl.max(_amax(value, 1), axis=0)
        scale = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
        code = fp8_code(value * scale, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
        inverse = reciprocal(scale, POW2)
        if ROWWISE:
            _store_tile(data_ptrs, code, rows, cols, M, K, EVEN)
            tl.store(scale_inv_ptr + pid_m * SCALE_STRIDE + pid_k, inverse)
        if COLWISE:
            tl.store(columnwise_scale_inv_ptr + pid_k * COLUMNWISE_SCALE_STRIDE + pid_m, inverse)
    else:
        if ROWWISE:  # 1x128 blocks along the rows
            row_scale = scale_from_amax(_amax(value, 1), epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
            row_code = fp8_code(value * row_scale[:, None], MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
            _store_tile(data_ptrs, row_code, rows, cols, M, K, EVEN)
            row_inverse = reciprocal(row_scale, POW2)
            if EVEN:
                tl.store(scale_inv_ptr + pid_k * SCALE_STRIDE + rows, row_inverse)
            else:
                tl.store(scale_inv_ptr + pid_k * SCALE_STRIDE + rows, row_inverse, mask=rows < M)
        if COLWISE:  # 128x1 blocks down the columns
            scale = scale_from_amax(_amax(value, 0), epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
            code = fp8_code(value * scale[None, :], MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
            inverse = reciprocal(scale, POW2)
            if EVEN:
                tl.store(columnwise_scale_inv_ptr + pid_m * COLUMNWISE_SCALE_STRIDE + cols, inverse)
            else:
                tl.store(columnwise_scale_inv_ptr + pid_m * COLUMNWISE_SCALE_STRIDE + cols, inverse, mask=cols < K)
    if COLWISE:  # stored transposed: the column blocks run along the rows of columnwise_data
        column_ptrs = columnwise_ptr + cols.to(tl.int64)[:, None] * M + rows[None, :]
        _store_tile(column_ptrs, tl.trans(code), cols, rows, K, M, EVEN)


# %% Launcher

TILES: dict[tuple[str, str], tuple[int, int, int]] = {
    ("1x128", "rowwise"): (32, 128, 4),
    ("1x128", "columnwise"): (128, 64, 4),
    ("1x128", "both"): (128, 128, 4),
    ("128x128", "rowwise"): (128, 128, 8),
    ("128x128", "columnwise"): (128, 128, 8),
    ("128x128", "both"): (128, 128, 8),
}
"""(BLOCK_M, BLOCK_K, num_warps) per (block, usage): programs of BLOCK_M rows by BLOCK_K columns, each reading its
tile once.  A program holds whole blocks: BLOCK_K = 128 where rowwise 1x128 blocks are cast and for 128x128;
BLOCK_M = 128 where column blocks (or 128x128 tiles) are cast.  The fastest of an H200 sweep at bfloat16
8192x8192 (``fraction of copy bandwidth``: 1x128 rowwise 94%, columnwise 88%, both 76%; 128x128 rowwise 93%,
columnwise 88%, both 85%)."""


def _round4(n: int) -> int:
    return -(-n // 4) * 4


def scale_shapes(block: str, m: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Shapes of ``scale_inv`` and ``columnwise_scale_inv`` for an ``[M, K]`` view (module docstring)."""
    mb, kb = -(-m // TILE), -(-k // TILE)
    if block == "1x128":
        return (kb, _round4(m)), (mb, _round4(k))
    return (mb, _round4(kb)), (kb, _round4(mb))


_RUNTIME_ARGS = 11
"""The kernel's leading runtime arguments (pointers, sizes, epsilon and value_for_inf); the rest are constexpr."""
_LAUNCHES = LaunchCache(_fp8_block_kernel, _RUNTIME_ARGS)
"""Compiled launches by shape, recipe, dtype, device, input alignment and tile (``fast._triton.LaunchCache``)."""


@functools.cache
def _gluon_kernel() -> types.ModuleType | None:
    """``fast.quant.fp8_blockwise_gluon`` (1x128 both on whole tiles), or None where Triton has no Gluon."""
    try:
        from fast.quant import fp8_blockwise_gluon
    except ImportError:
        return None
    return fp8_blockwise_gluon


def _triton(x2: torch.Tensor, out: dict[str, torch.Tensor], block: str, usage: str, rule: dict[str, Any]) -> None:
    m, k = x2.shape
    tile = TILES[block, usage]
    block_m, block_k, num_warps = tile
    placeholder = next(iter(out.values()))
    scale_inv = out.get("scale_inv", placeholder)
    columnwise_scale_inv = out.get("columnwise_scale_inv", placeholder)
    args = (
        x2,
        out.get("data", placeholder),
        scale_inv,
        out.get("columnwise_data", placeholder),
        columnwise_scale_inv,
        m,
        k,
        scale_inv.shape[-1] if "scale_inv" in out else 0,
        columnwise_scale_inv.shape[-1] if "columnwise_scale_inv" in out else 0,
        rule["epsilon"],
        rule["value_for_inf"],
    )
    core = rounding_core(x2.device)
    key = (
        m,
        k,
        block,
        usage,
        rule["format"],
        rule["power_2_scale"],
        core,
        x2.dtype,
        x2.device,
        x2.data_ptr() % 16,
        tile,
    )
    if x2.device.type == "cuda" and _LAUNCHES.launch(key, args):
        return
    if block == "1x128" and usage == "both" and core == 2 and m % TILE == 0 and k % TILE == 0:
        gluon_kernel = _gluon_kernel()
        if gluon_kernel is not None:  # on CUDA: core 2 is the hardware conversion
            gluon_kernel.quantize_both(x2, args, key, rule)
            return
    meta = {
        "POW2": rule["power_2_scale"],
        **FORMAT_META[rule["format"]],
        "CORE": core,
        "TWO_D": block == "128x128",
        "ROWWISE": usage != "columnwise",
        "COLWISE": usage != "rowwise",
        "INPUT": INPUT_IDS[x2.dtype],
        "BLOCK_M": block_m,
        "BLOCK_K": block_k,
        "EVEN": m % block_m == 0 and k % block_k == 0,
    }
    grid = triton.cdiv(m, block_m) * triton.cdiv(k, block_k)
    with quiet_interpreter(x2.device):
        compiled = jit(_fp8_block_kernel)[(grid,)](*args, **meta, num_warps=num_warps)
    if x2.device.type == "cuda":
        _LAUNCHES.store(key, compiled, grid, meta)


def _torch(x2: torch.Tensor, out: dict[str, torch.Tensor], block: str, usage: str, rule: dict[str, Any]) -> None:
    """The kernel's arithmetic with torch ops: block amaxes over a zero-padded view, then ``fast.cast.fp8``."""
    from fast.cast import fp8 as cast_fp8

    m, k = x2.shape
    mb, kb = -(-m // TILE), -(-k // TILE)
    padded = torch.zeros((mb * TILE, kb * TILE), dtype=torch.float32, device=x2.device)
    padded[:m, :k] = torch_abs_no_nan(x2)
    tiles = padded.reshape(mb, TILE, kb, TILE)

    def cast(scale: torch.Tensor) -> torch.Tensor:
        return cast_fp8(x2.float() * scale, format=rule["format"], overflow="saturate")["codes"]

    def expand(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        return scale.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[:m, :k]

    def scales(amax: torch.Tensor) -> torch.Tensor:
        return torch_scale_from_amax(
            amax,
            rule["fp8_max"],
            power_2_scale=rule["power_2_scale"],
            epsilon=rule["epsilon"],
            value_for_inf=rule["value_for_inf"],
        )

    if block == "128x128":
        tile_scale = scales(tiles.amax(dim=(1, 3)))  # [MB, KB]
        codes = cast(expand(tile_scale, TILE, TILE))
        inverse = torch_reciprocal(tile_scale)
        if "data" in out:
            out["data"].copy_(codes)
            out["scale_inv"][:, :kb] = inverse
        if "columnwise_data" in out:
            out["columnwise_data"].copy_(codes.t())
            out["columnwise_scale_inv"][:, :mb] = inverse.t()
        return
    if "data" in out:
        row_scale = scales(tiles.amax(dim=3).reshape(mb * TILE, kb)[:m])  # [M, KB]
        out["data"].copy_(cast(expand(row_scale, 1, TILE)))
        out["scale_inv"][:, :m] = torch_reciprocal(row_scale).t()
    if "columnwise_data" in out:
        col_scale = scales(tiles.amax(dim=1).reshape(mb, kb * TILE)[:, :k])  # [MB, K]
        out["columnwise_data"].copy_(cast(expand(col_scale, TILE, 1)).t())
        out["columnwise_scale_inv"][:, :k] = torch_reciprocal(col_scale)


# %% Public function


def fp8_block(
    x: torch.Tensor,
    *,
    format: str,
    block: str = "1x128",
    power_2_scale: bool = True,
    epsilon: float = 0.0,
    usage: str = "both",
    x_dtype: str | None = None,
) -> dict[str, torch.Tensor]:
    """Quantize ``x`` to FP8 with one scale per 1x128 or 128x128 block (TE ``Float8BlockScaling``).

    Contract
    --------
    ``quant.fp8_block``: per block, ``amax = max|x|`` (NaN ignored, missing tail elements count as 0),
    ``scale = compute_scale_from_amax(amax, fp8_max, power_2_scale, epsilon, max of x's dtype)``,
    ``scale_inv = fl32(1 / scale)`` and ``satfinite_rne(fl32(x * scale))`` (module docstring).

    Source
    ------
    TE ``quantize_transpose_vector_blockwise.cu`` (1x128) and ``quantize_transpose_square_blockwise.cu``
    (128x128); ``specs/quant/fp8_block.yaml``; the NumPy reference is ``reference.quant.fp8_block``.

    Encoding
    --------
    ``x``: contiguous float32/bfloat16/float16, rank >= 1.  Outputs on x's device (module docstring):
    ``data`` and ``scale_inv`` unless ``usage="columnwise"``; ``columnwise_data`` and
    ``columnwise_scale_inv`` unless ``usage="rowwise"``.  Scale padding is unspecified.

    Edge cases
    ----------
    Zero, infinite and all-NaN blocks get scale 1; a subnormal block amax gives the dtype's max
    (pow2: 2**127, scale_inv 2**-127); empty ``x`` gives empty outputs.

    One read of ``x`` on CUDA.  Raises ``TypeError`` unless ``x`` is a float32/bfloat16/float16 tensor;
    ``ValueError`` for an unknown ``format``, ``block``, ``usage``, ``x_dtype`` or path, an ``x_dtype``
    other than x's dtype, a negative or non-finite ``epsilon``, a 0-d or non-contiguous ``x``;
    ``RuntimeError`` if the Triton path is forced where it cannot run.
    """
    check_choice("format", format, FP8_FORMATS)
    check_choice("block", block, BLOCKS)
    check_choice("power_2_scale", power_2_scale, (False, True))
    check_choice("usage", usage, USAGES)
    check_epsilon(epsilon)
    x2 = check_x(x, x_dtype)
    m, k = x2.shape
    row_shape, col_shape = scale_shapes(block, m, k)
    out: dict[str, torch.Tensor] = {}
    if usage != "columnwise":
        out["data"] = torch.empty((m, k), dtype=torch.uint8, device=x.device)
        out["scale_inv"] = torch.empty(row_shape, dtype=torch.float32, device=x.device)
    if usage != "rowwise":
        out["columnwise_data"] = torch.empty((k, m), dtype=torch.uint8, device=x.device)
        out["columnwise_scale_inv"] = torch.empty(col_shape, dtype=torch.float32, device=x.device)
    rule = {"format": format, "fp8_max": FORMATS[format].max_value, "power_2_scale": power_2_scale}
    rule.update(epsilon=float(np.float32(epsilon)), value_for_inf=DTYPE_MAX[dtype_name(x.dtype)])
    path = selected_path(x.device)  # an unknown QCONFORM_FAST_PATH is refused even for empty x
    if m and k:
        (_triton if path == "triton" else _torch)(x2, out, block, usage, rule)
    shape = tuple(x.shape)
    if "data" in out:
        out["data"] = out["data"].reshape(shape)
    if "columnwise_data" in out:
        out["columnwise_data"] = out["columnwise_data"].reshape((shape[-1], *shape[:-1]))
    return out


# %% Benchmark


def bench(
    shape: tuple[int, int] = (8192, 8192),
    dtype: torch.dtype = torch.bfloat16,
    block: str = "1x128",
    usage: str = "both",
) -> dict[str, float]:
    """Median time of :func:`fp8_block` (E4M3) on a random CUDA tensor and the fraction of copy bandwidth it reaches."""
    from triton.testing import do_bench

    x = (torch.randn(shape, device="cuda") * 64).to(dtype)
    ms = do_bench(lambda: fp8_block(x, format="float8_e4m3fn", block=block, usage=usage), return_mode="median")
    copies = (usage != "columnwise") + (usage != "rowwise")
    moved = x.numel() * (x.element_size() + copies)
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    return {"ms": ms, "fraction_of_copy": (moved / ms) / (2 * x.numel() * x.element_size() / copy_ms)}


if __name__ == "__main__":
    import os

    _device = "cuda" if torch.cuda.is_available() else "cpu"
    _x = (torch.randn(1823, 781, generator=torch.Generator().manual_seed(0)) * 64).to(_device)
    for _block in BLOCKS:
        os.environ["QCONFORM_FAST_PATH"] = "torch"
        _expected = fp8_block(_x, format="float8_e4m3fn", block=_block)
        os.environ["QCONFORM_FAST_PATH"] = "triton"
        _got = fp8_block(_x, format="float8_e4m3fn", block=_block)
        print(_block, {name: bool(torch.equal(_expected[name], _got[name])) for name in ("data", "columnwise_data")})
    if _device == "cuda":
        print(bench())
